"""Events (issue 9 point 5) and list_processes (point 1) through the real aido binary and the
official Python SDK client.

subscribe delivers file changes made by write_file and by run_command as
`notifications/message` (logger `aido/events`), each batch journaled as `events_delivered`;
a change of a path the deny globs refuse (one that did not exist before included) is never
delivered. watch_and_react runs its reaction for each change as a child action (journaled with
`parent`), is rate-limited with a journaled `watch_rate_limited`, is not fed its own writes,
and a reaction the policy denies is journaled as denied. list_processes shows a background
handle with its pid; host processes need `[processes] host_visible`. `replay verify` and
playback pass after each."""

from __future__ import annotations

import json
from typing import Any

import pytest

from helpers import eventually
from test_run_command import played_back, session_ids

pytestmark = pytest.mark.anyio

LOGGER = "aido/events"


class Inbox:
    """Every aido/events notification the client received, in order."""

    def __init__(self) -> None:
        self.batches: list[dict[str, Any]] = []
        self.others: list[Any] = []

    async def __call__(self, params: Any) -> None:
        if params.logger == LOGGER:
            self.batches.append(params.data)
        else:
            self.others.append(params.data)

    def paths(self, subscription: str) -> list[str]:
        return [
            c["path"]
            for b in self.batches
            if b["subscription"] == subscription
            for c in b.get("changes", [])
        ]

    def of(self, subscription: str) -> list[dict[str, Any]]:
        return [b for b in self.batches if b["subscription"] == subscription]


def records(world) -> list[dict[str, Any]]:
    out = []
    for s in session_ids(world):
        proc = world.run("replay", "export", s["id"], "--jsonl")
        assert proc.returncode == 0, proc.stderr
        out += [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return out


def verified(world) -> None:
    for s in session_ids(world):
        proc = world.run("replay", "verify", s["id"])
        assert proc.returncode == 0, proc.stdout + proc.stderr
    played_back(world)


async def test_subscribe_delivers_changes_of_write_file_and_run_command_but_never_a_denied_path(world):
    watched = world.home / "watched"
    watched.mkdir()
    inbox = Inbox()
    async with world.session(logging_callback=inbox) as s:
        tools = {t.name: t for t in (await s.session.list_tools()).tools}
        for name in ("subscribe", "unsubscribe", "list_subscriptions", "watch_and_react", "list_processes"):
            assert name in tools, name
        sub = await s.ok("subscribe", {"paths": ["watched"], "debounce_ms": 50})
        sid = sub["subscription"]
        assert sub["paths"] == [str(watched.resolve())], sub
        # A denied path that did not exist before, written behind aido's back, first: had it
        # been delivered, it would come before (or with) the next change.
        (watched / ".env").write_text("SECRET=1\n")
        (watched / ".ssh").mkdir()
        (watched / ".ssh" / "id_new").write_text("key\n")
        await s.ok("write_file", {"path": "watched/a.txt", "content": "from write_file\n"})
        a = str(watched / "a.txt")
        assert await eventually(lambda: a in inbox.paths(sid), 10), inbox.batches
        ran = await s.ok("run_command", {"shell": "echo from run_command > watched/b.txt"})
        assert ran["exit_code"] == 0, ran
        b = str(watched / "b.txt")
        assert await eventually(lambda: b in inbox.paths(sid), 10), inbox.batches
        # The test's own write of an allowed path arrives too (changes from outside aido).
        (watched / "c.txt").write_text("outside\n")
        c = str(watched / "c.txt")
        assert await eventually(lambda: c in inbox.paths(sid), 10), inbox.batches
        for path in inbox.paths(sid):
            assert ".env" not in path and ".ssh" not in path, inbox.batches
            assert ".aido-" not in path, f"aido's temp file was delivered: {inbox.batches}"
        kinds = {c["path"]: c["kinds"] for batch in inbox.of(sid) for c in batch["changes"]}
        assert set(kinds[a]) <= {"create", "modify"}, kinds
        listed = await s.ok("list_subscriptions", {})
        [mine] = [x for x in listed["subscriptions"] if x["subscription"] == sid]
        assert mine["delivered"] >= 3 and mine["state"] == "active", mine
        ended = await s.ok("unsubscribe", {"subscription": sid})
        assert ended["ended"] is True, ended
        await s.err("unsubscribe", {"subscription": sid}, "subscription_unknown")
        # Nothing comes after unsubscribe.
        count = len(inbox.of(sid))
        (watched / "d.txt").write_text("late\n")
        assert not await eventually(lambda: len(inbox.of(sid)) > count, 1.0), inbox.batches
        # A path outside the walls cannot be watched.
        await s.err("subscribe", {"paths": [str(world.outside)]}, "path_outside_walls")
    journaled = [r for r in records(world) if r["event"] == "events_delivered"]
    told = [b["seq"] for b in inbox.of(sid)]
    assert sorted(r["seq"] for r in journaled if r["subscription"] == sid) == sorted(told), (journaled, told)
    for r in journaled:
        assert all(".env" not in c["path"] and ".ssh" not in c["path"] for c in r["changes"]), r
    verified(world)


async def test_watch_and_react_fires_judged_child_actions_rate_limited_and_never_on_its_own_writes(world):
    inbox_dir = world.home / "inbox"
    inbox_dir.mkdir()
    inbox = Inbox()
    async with world.session(logging_callback=inbox) as s:
        r = await s.call(
            "watch_and_react",
            {
                "paths": ["inbox"],
                "debounce_ms": 100,
                "per_minute": 2,
                "reaction": {"tool": "write_file", "arguments": {"path": "{{path}}.seen", "content": "{{kind}} {{relative}}\n"}},
            },
        )
        assert not r.is_error, r
        watch = r.structured_content
        wid, watch_seq = watch["subscription"], r.meta["aido/seq"]
        for name in ("one", "two", "three", "four"):
            (inbox_dir / name).write_text(name)
        assert await eventually(lambda: len(inbox.of(wid)) >= 4, 15), inbox.batches
        fired = [b for b in inbox.of(wid) if "fired" in b]
        refused = [b for b in inbox.of(wid) if b.get("refused")]
        assert len(fired) == 2 and len(refused) == 2, inbox.batches
        assert {b["refused"] for b in refused} == {"watch_rate_limited"}, refused
        assert all(b["fired"]["status"] == "completed" for b in fired), fired
        seen = sorted(p.name for p in inbox_dir.glob("*.seen"))
        assert len(seen) == 2, seen
        first = fired[0]["changes"][0]["path"]
        assert (inbox_dir / (first.rsplit("/", 1)[1] + ".seen")).read_text().endswith(first.rsplit("/", 1)[1] + "\n")
        # Its own writes (the .seen files) never fed back to it: no .seen.seen, ever.
        assert not await eventually(lambda: any(inbox_dir.glob("*.seen.seen")), 2.0), list(inbox_dir.iterdir())
        listed = await s.ok("list_subscriptions", {})
        [mine] = [x for x in listed["subscriptions"] if x["subscription"] == wid]
        assert mine["fired"] == 2 and mine["rate_limited"] == 2, mine
        assert mine["own_changes_ignored"] >= 1, mine
        await s.ok("unsubscribe", {"subscription": wid})

        # A reaction the policy denies: each firing is journaled as denied.
        r = await s.call(
            "watch_and_react",
            {
                "paths": ["inbox"],
                "debounce_ms": 50,
                "reaction": {"tool": "write_file", "arguments": {"path": str(world.outside / "stolen.txt"), "content": "{{path}}"}},
            },
        )
        assert not r.is_error, r
        denied_id, denied_seq = r.structured_content["subscription"], r.meta["aido/seq"]
        (inbox_dir / "five").write_text("5")
        assert await eventually(lambda: any("fired" in b for b in inbox.of(denied_id)), 10), inbox.batches
        [denied] = [b["fired"] for b in inbox.of(denied_id) if "fired" in b]
        assert denied["status"] == "denied" and denied["code"] == "path_outside_walls", denied
        assert not (world.outside / "stolen.txt").exists()
        # A reaction that watches is refused when the watch is made.
        await s.err(
            "watch_and_react",
            {"paths": ["inbox"], "reaction": {"tool": "subscribe", "arguments": {"paths": ["."]}}},
            "reaction_invalid",
        )
    recs = records(world)
    children = [r for r in recs if r["event"] == "action_proposed" and r.get("parent") == watch_seq]
    assert len(children) == 2, children
    assert all(c["action"]["type"] == "write_file" and c["verdict"]["verdict"] == "allow" for c in children), children
    limited = [r for r in recs if r["event"] == "events_delivered" and r.get("refused") == "watch_rate_limited"]
    assert len(limited) == 2, limited
    [refusal] = [r for r in recs if r["event"] == "action_proposed" and r.get("parent") == denied_seq]
    assert refusal["verdict"]["verdict"] == "deny" and refusal["verdict"]["code"] == "path_outside_walls", refusal
    verified(world)


async def test_list_processes_shows_a_background_handle_and_the_host_only_when_the_policy_allows(world):
    async with world.session() as s:
        handle = (await s.ok("run_command", {"argv": ["sleep", "876650"], "background": True}))["handle"]
        listed = await s.ok("list_processes", {})
        [mine] = [p for p in listed["started"] if p["handle"] == handle]
        assert mine["argv"] == ["sleep", "876650"] and mine["state"] == "running", mine
        assert isinstance(mine["started_unix_ms"], int) and mine["started_unix_ms"] > 0, mine
        assert isinstance(mine["pid"], int), mine
        with open(f"/proc/{mine['pid']}/cmdline", "rb") as f:
            assert f.read().split(b"\0")[:2] == [b"sleep", b"876650"]
        await s.err("list_processes", {"host": True}, "host_processes_hidden")
        await s.ok("stop_handle", {"handle": handle, "grace_ms": 200})
        after = await s.ok("list_processes", {})
        [stopped] = [p for p in after["started"] if p["handle"] == handle]
        assert stopped["state"] == "stopped" and stopped["pid"] is None, stopped
    config = '[processes]\nhost_visible = true\nhost_fields = ["pid", "comm", "argv"]\n'
    async with world.session(config=config) as s:
        listed = await s.ok("list_processes", {"host": True})
        aido = [p for p in listed["host"] if p["pid"] == listed["aido_pid"]]
        assert aido and set(aido[0]) == {"pid", "comm", "argv"}, aido
        assert all("env" not in p and "uid" not in p for p in listed["host"]), listed["host"][:3]
    verified(world)
