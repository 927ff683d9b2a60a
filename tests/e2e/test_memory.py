"""Memory over real MCP: `aido mcp` driven by the official Python SDK client.

remember / recall / list_memory / forget in one server; two `aido mcp` processes on one
AIDO_HOME, remembering at the same time, each seeing the other's memories; `aido replay
playback` reproducing every memory result from the journal (without the database); a rewind
leaving memories alone; and bad input answered with codes while the server keeps serving.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from conftest import describe
from helpers import err, ok, seq_of

pytestmark = pytest.mark.anyio

MEMORY_TOOLS = {"remember", "recall", "forget", "list_memory"}


def texts(recalled: dict[str, Any]) -> list[str]:
    return [r["memory"]["text"] for r in recalled["results"]]


def playback_all(world) -> dict[str, int]:
    """`aido replay playback --json` over every session: the totals."""
    sessions = world.run_json("replay", "sessions", "--json")
    totals = {"reproduced": 0, "not_reproducible": 0, "external": 0, "mismatches": 0}
    for s in sessions:
        proc = world.run("replay", "playback", s["id"], "--json")
        assert proc.returncode == 0, describe(proc)
        played = json.loads(proc.stdout)
        assert played["mismatches"] == [], describe(proc)
        assert played["not_reproducible"] == [], describe(proc)
        totals["reproduced"] += played["reproduced"]
        totals["external"] += sum(e["count"] for e in played["external"].values())
    return totals


async def test_the_four_memory_tools_are_listed_with_their_classes(world):
    async with world.session() as s:
        tools = {t.name: t for t in (await s.session.list_tools()).tools}
        assert MEMORY_TOOLS <= set(tools)
        assert tools["recall"].annotations.read_only_hint is True
        assert tools["list_memory"].annotations.read_only_hint is True
        assert tools["remember"].annotations.read_only_hint is False
        assert tools["forget"].annotations.destructive_hint is True
        schema = tools["remember"].input_schema
        assert schema["properties"]["text"]["maxLength"] == 16384
        assert set(schema["required"]) == {"text"}


async def test_remember_recall_list_forget_and_playback_reproduces_them(world):
    async with world.session() as s:
        first = await s.call(
            "remember", {"text": "The integration tests need cargo test --features e2e", "tags": ["testing"]}
        )
        kept = ok(first)
        assert kept["scope"]["kind"] == "project"
        assert kept["provenance"]["seq"] == seq_of(first)
        assert kept["provenance"]["untrusted"] is False
        await s.ok("remember", {"text": "Scratch files go to /tmp/scratch", "scope": "session"})
        await s.ok("remember", {"text": "Releases are cut on Thursdays", "scope": "global", "expiry": {"after_ms": 3_600_000}})

        assert texts(await s.ok("recall", {"query": "integration tests"})) == [
            "The integration tests need cargo test --features e2e"
        ]
        recalled = await s.call("recall", {"query": "releases thursdays"})
        assert "Releases are cut on Thursdays" in "".join(c.text for c in recalled.content)
        assert texts(ok(recalled)) == ["Releases are cut on Thursdays"]

        page = await s.ok("list_memory", {"limit": 2})
        assert len(page["memories"]) == 2 and page["next_cursor"]
        rest = await s.ok("list_memory", {"limit": 2, "cursor": page["next_cursor"]})
        assert len(rest["memories"]) == 1
        ids = {m["id"] for m in page["memories"] + rest["memories"]}
        assert len(ids) == 3

        assert (await s.ok("forget", {"id": kept["id"]}))["count"] == 1
        assert texts(await s.ok("recall", {"query": "integration tests"})) == []
        err(await s.call("forget", {"id": kept["id"]}), "memory_not_found")
        assert (await s.ok("forget", {"tags": ["nothing-has-this"]}))["count"] == 0

    totals = playback_all(world)
    # 3 remembers, 3 recalls, 2 lists, 2 forgets and 1 coded failure (memory_not_found).
    assert totals["reproduced"] == 11, totals
    assert totals["external"] == 0, totals


async def test_bad_input_is_coded_and_the_server_keeps_serving(world):
    async with world.session() as s:
        err(await s.call("remember", {"text": "x" * (16 * 1024 + 1)}), "memory_text_too_large")
        err(await s.call("remember", {"text": "   "}), "memory_text_empty")
        err(await s.call("remember", {"text": "t", "tags": ["ok", "bad\ttag"]}), "memory_tag_invalid")
        err(await s.call("remember", {"text": "t", "expiry": {"at_ms": 1}}), "memory_expiry_past")
        err(await s.call("recall", {"query": ""}), "memory_query_empty")
        err(await s.call("recall", {"query": "((( )))"}), "memory_query_empty")
        err(await s.call("recall", {"query": "q" * 3000}), "memory_query_too_large")
        err(await s.call("recall", {"query": "a", "limit": 1000}), "memory_results_too_many")
        err(await s.call("recall", {"query": "a", "cursor": "r1.0.forged"}), "memory_cursor_invalid")
        err(await s.call("forget", {}), "memory_forget_filter_empty")
        err(await s.call("forget", {"id": 1, "tags": ["x"]}), "invalid_arguments")
        err(await s.call("remember", {"text": "t", "scope": "everyone"}), "invalid_arguments")
        # A flood of small memories is fine and every one is recalled by its word.
        for n in range(50):
            await s.ok("remember", {"text": f"flood item {n} marker{n}"})
        assert texts(await s.ok("recall", {"query": "marker49"})) == ["flood item 49 marker49"]
        assert (await s.ok("read_file", {"path": "~/notes.txt"}))["content"] == "hello\nworld\n"
    playback_all(world)


async def test_two_servers_on_one_aido_home_each_see_the_others_memories(world):
    writes = 25
    async with world.session() as a, world.session() as b:

        async def remember(s, who: str) -> None:
            for n in range(writes):
                await s.ok("remember", {"text": f"fact {n} from {who} about zebras", "tags": [who]})

        async with anyio.create_task_group() as tg:
            tg.start_soon(remember, a, "a")
            tg.start_soon(remember, b, "b")

        for s, other in ((a, "b"), (b, "a")):
            seen = await s.ok("list_memory", {"tags": [other], "limit": 500})
            assert len(seen["memories"]) == writes, f"every memory of {other} is seen"
            found = await s.ok("recall", {"query": "zebras", "limit": 100})
            assert len(found["results"]) == 2 * writes
        # One forgets the other's memory; the other sees it gone.
        victim = (await a.ok("list_memory", {"tags": ["b"], "limit": 1}))["memories"][0]
        assert (await a.ok("forget", {"id": victim["id"]}))["count"] == 1
        left = await b.ok("list_memory", {"tags": ["b"], "limit": 500})
        assert len(left["memories"]) == writes - 1
    totals = playback_all(world)
    assert totals["reproduced"] >= 2 * writes + 6, totals


async def test_a_rewind_leaves_memories_alone_and_the_session_still_verifies(world):
    async with world.session() as s:
        base = seq_of(await s.call("write_file", {"path": "~/a.txt", "content": "one"}))
        await s.ok("remember", {"text": "The answer is forty two"})
        await s.ok("write_file", {"path": "~/a.txt", "content": "two"})
        rewound = await s.ok("rewind", {"to_seq": base})
        assert {u["primitive"] for u in rewound["undone"]} == {"remember", "write_file"}
        assert (world.home / "a.txt").read_text() == "one"
        # The memory is still there: a rewind puts the workspace back, not the shared store.
        assert texts(await s.ok("recall", {"query": "answer forty two"})) == ["The answer is forty two"]
    for session in world.run_json("replay", "sessions", "--json"):
        proc = world.run("replay", "verify", session["id"])
        assert proc.returncode == 0, describe(proc)
    playback_all(world)


async def test_memory_disabled_refuses_all_four(world):
    async with world.session(config="[memory]\nenabled = false\n") as s:
        for name, args in (
            ("remember", {"text": "t"}),
            ("recall", {"query": "t"}),
            ("forget", {"id": 1}),
            ("list_memory", {}),
        ):
            err(await s.call(name, args), "memory_disabled")
