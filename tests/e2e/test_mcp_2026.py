"""MCP 2026-07-28 through the real aido binary: the official Python SDK 2.x client (which
speaks it) on stdio (`aido mcp`) and HTTP (`aido serve`), beside legacy clients in the same run.

What is checked, on both transports: `server/discover`; `tools/list` for every profile (its
tool count and bytes printed), identical on repeated calls and to what a legacy client of the
same server is given, with deliberate cache hints (`ttlMs`, `cacheScope`); a call and a coded
refusal; `input_required` round trips for ask_human, confirm and ask_multiple_choice (answered
and declined), each answer reaching the action once (a replayed `requestState` is refused) and
journaled as an elicitation's; `subscriptions/listen` delivering a subscription's file change
(the `aido://events` resource) and a defined function's tool-list change.
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import anyio
import httpx2
import pytest
from mcp import ClientSession, types
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourceUpdated, ToolsListChanged
from mcp.shared.exceptions import MCPError

from conftest import World, describe
from helpers import err, ok
from test_serve import serve

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"
EVENTS_URI = "aido://events"
# aido's cache hints (mcp/src/server.rs): an hour for a list nothing in the process can change,
# a minute when defined functions can.
TTL_FIXED_MS = 3_600_000
TTL_DEFINED_MS = 60_000
# (name, `aido mcp` arguments, `aido serve` endpoint under /mcp); the default is `[mcp]`'s.
PROFILES = [
    ("default", (), ""),
    ("coding", ("--toolsets", "coding"), "/x/coding"),
    ("all", ("--toolsets", "all"), "/x/all"),
    ("files,process,search", ("--toolsets", "files,process,search"), "/x/files,process,search"),
]


class Transport:
    """One way to reach aido: stdio (a process per client) or HTTP (one `aido serve`)."""

    def __init__(self, world: World, kind: str, served: Any = None):
        self.world = world
        self.kind = kind
        self.served = served
        self.scope = "private" if kind == "http" else "public"

    @asynccontextmanager
    async def modern(
        self, profile: tuple[str, tuple[str, ...], str] = PROFILES[0], mode: str = MODERN, **kw: Any
    ) -> AsyncIterator[Client]:
        """A 2026-07-28 client (`mode="auto"` probes `server/discover` first)."""
        _, args, endpoint = profile
        kw.setdefault("read_timeout_seconds", 30)
        if self.kind == "stdio":
            log = self.world.root / "logs" / f"mcp-2026-{len(self.world.logs)}.stderr"
            log.parent.mkdir(parents=True, exist_ok=True)
            self.world.logs.append(log)
            params = StdioServerParameters(
                command=str(self.world.bin),
                args=["mcp", *args],
                env=self.world.env(),
                cwd=str(self.world.home),
            )
            async with Client(params, mode=mode, **kw) as client:
                yield client
            return
        async with httpx2.AsyncClient(headers=self.served.headers(), timeout=30) as http:
            transport = streamable_http_client(self.served.url + endpoint, http_client=http)
            async with Client(transport, mode=mode, **kw) as client:
                yield client

    @asynccontextmanager
    async def legacy(self, profile: tuple[str, tuple[str, ...], str] = PROFILES[0]) -> AsyncIterator[ClientSession]:
        """A 2025-11-25 client (the initialize handshake) of the same server."""
        _, args, endpoint = profile
        if self.kind == "stdio":
            async with self.world.session(extra_args=args) as s:
                yield s.session
            return
        async with httpx2.AsyncClient(headers=self.served.headers(), timeout=30) as http:
            async with streamable_http_client(self.served.url + endpoint, http_client=http) as (read, write):
                async with ClientSession(read, write, read_timeout_seconds=30) as session:
                    init = await session.initialize()
                    assert init.protocol_version == "2025-11-25", init
                    yield session


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest, world: World) -> Any:
    if request.param == "stdio":
        yield Transport(world, "stdio")
        return
    with serve(world) as served:
        yield Transport(world, "http", served)


def listing(result: Any) -> str:
    """A tools/list result's tools as the JSON the server sent."""
    return json.dumps([t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in result.tools])


async def test_discover_names_the_revisions_and_the_server(transport: Transport) -> None:
    async with transport.modern(mode="auto") as client:
        assert client.protocol_version == MODERN
        found = await client.session.discover()
        assert MODERN in found.supported_versions and "2025-11-25" in found.supported_versions, found
        assert found.capabilities.tools is not None and found.capabilities.tools.list_changed is True
        assert found.ttl_ms == TTL_FIXED_MS and found.cache_scope == "public", found
        assert client.server_info is not None and client.server_info.name == "aido"
        # A legacy client of the same server still negotiates 2025-11-25.
        async with transport.legacy() as legacy:
            assert (await legacy.list_tools()).tools


@pytest.mark.parametrize("profile", PROFILES, ids=[p[0] for p in PROFILES])
async def test_tools_list_per_profile_is_fixed_and_carries_cache_hints(
    transport: Transport, profile: tuple[str, tuple[str, ...], str], trail: Any
) -> None:
    async with transport.modern(profile) as client:
        first = await client.list_tools(cache_mode="bypass")
        again = await client.list_tools(cache_mode="bypass")
        assert listing(first) == listing(again), "the list varies within a connection"
        names = [t.name for t in first.tools]
        assert len(names) == len(set(names)) and names, names
        defined = "call_function" in names or "call_primitive" in names
        assert first.ttl_ms == (TTL_DEFINED_MS if defined else TTL_FIXED_MS), first.ttl_ms
        assert first.cache_scope == transport.scope, first.cache_scope
        # A call in between changes nothing.
        ok(await client.call_tool("stat_files", {"paths": ["notes.txt"]}))
        assert listing(await client.list_tools(cache_mode="bypass")) == listing(first)
        trail(f"{transport.kind} {profile[0]}: {len(names)} tools, {len(listing(first))} bytes (2026-07-28)")
    async with transport.legacy(profile) as legacy:
        old = await legacy.list_tools()
        assert listing(old) == listing(first), "a legacy client is given the same list"


async def test_a_call_and_a_refusal_with_its_code(transport: Transport, world: World) -> None:
    async with transport.modern(PROFILES[1]) as client:
        wrote = ok(await client.call_tool("write_file", {"path": "modern.txt", "content": "2026\n"}))
        assert wrote["created"] is True
        assert (world.home / "modern.txt").read_text() == "2026\n"
        denied = err(await client.call_tool("read_file", {"path": str(world.outside / "secret.txt")}), "path_outside_walls")
        assert denied["gate"], denied
        err(await client.call_tool("remember", {"text": "x"}), "tool_not_enabled")
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("no_such_tool", {})
        assert (unknown.value.error.data or {}).get("code") == "unknown_primitive"
    async with transport.legacy() as legacy:
        read = await legacy.call_tool("read_file", {"path": "modern.txt"})
        assert ok(read)["content"] == "2026\n"


def answering(replies: dict[str, Any], asked: list[Any]) -> Any:
    """An elicitation callback answering by the form's field: `None` declines."""

    async def callback(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        schema = params.requested_schema
        if hasattr(schema, "model_dump"):
            schema = schema.model_dump(by_alias=True, exclude_none=True, mode="json")
        field = next(iter(schema["properties"]))
        content = replies.get(field)
        if content is None:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content=content)

    return callback


def human_answers(world: World) -> list[dict[str, Any]]:
    """Every recorded `answer` input from the human, over every session."""
    out = []
    for s in world.run_json("replay", "sessions", "--json"):
        proc = world.run("replay", "export", s["id"], "--jsonl")
        assert proc.returncode == 0, describe(proc)
        for line in proc.stdout.splitlines():
            rec = json.loads(line)
            inputs = (rec.get("outcome") or {}).get("inputs") or rec.get("inputs") or []
            out += [i["value"] for i in inputs if i.get("input") == "answer" and i.get("from") == "human"]
    return out


async def test_input_required_asks_the_person_and_answers_reach_the_action_once(
    transport: Transport, world: World
) -> None:
    replies: dict[str, Any] = {
        "answer": {"answer": "the main branch"},
        "approve": {"approve": True},
        "choice": {"choice": "green"},
    }
    asked: list[Any] = []
    async with transport.modern(elicitation_callback=answering(replies, asked)) as client:
        out = ok(await client.call_tool("ask_human", {"question": "Which branch?"}))
        assert out == {"via": "elicitation", "status": "answered", "answer": "the main branch"}, out
        out = ok(await client.call_tool("confirm", {"question": "Deploy to staging now?"}))
        assert out["approved"] is True and out["answer"] == "yes", out
        colours = ["red", "green", "blue"]
        out = ok(await client.call_tool("ask_multiple_choice", {"question": "Which colour?", "choices": colours}))
        assert out["choice"] == "green", out
        assert [a.message for a in asked] == ["Which branch?", "Deploy to staging now?", "Which colour?"]

        # Declined: the coded failures of today, and confirm's "no".
        replies.clear()
        err(await client.call_tool("ask_human", {"question": "A name?"}), "human_declined")
        out = ok(await client.call_tool("confirm", {"question": "Delete it?"}))
        assert out["approved"] is False and out["reason"] == "declined", out
        err(await client.call_tool("ask_multiple_choice", {"question": "Which?", "choices": ["a", "b"]}), "human_declined")

        # The round by hand: input_required, then the answer; the same state again is refused.
        args = {"question": "Release name?"}
        first = await client.session.call_tool("ask_human", args, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult), first
        [key] = list(first.input_requests or {})
        request = first.input_requests[key]
        assert request.method == "elicitation/create" and request.params.message == "Release name?"
        answer = {key: types.ElicitResult(action="accept", content={"answer": "Aurora"})}
        done = await client.session.call_tool(
            "ask_human", args, input_responses=answer, request_state=first.request_state, allow_input_required=True
        )
        assert ok(done)["answer"] == "Aurora", done
        with pytest.raises(MCPError) as replayed:
            await client.session.call_tool(
                "ask_human", args, input_responses=answer, request_state=first.request_state, allow_input_required=True
            )
        assert (replayed.value.error.data or {}).get("code") == "request_state_unknown"
        # A state sent with other arguments, or altered, does not open.
        second = await client.session.call_tool("ask_human", {"question": "Codename?"}, allow_input_required=True)
        assert isinstance(second, types.InputRequiredResult)
        for state, sent in [
            (second.request_state, {"question": "Something else?"}),
            (second.request_state[:-2] + ("AA" if not second.request_state.endswith("AA") else "BB"), {"question": "Codename?"}),
        ]:
            with pytest.raises(MCPError) as refused:
                await client.session.call_tool(
                    "ask_human", sent, input_responses=answer, request_state=state, allow_input_required=True
                )
            assert (refused.value.error.data or {}).get("code") == "request_state_invalid"
        # The untouched state still resumes the waiting question, once.
        codename = {key: types.ElicitResult(action="accept", content={"answer": "Borealis"})}
        done = await client.session.call_tool(
            "ask_human", {"question": "Codename?"}, input_responses=codename, request_state=second.request_state,
            allow_input_required=True,
        )
        assert ok(done)["answer"] == "Borealis"
    # Journaled as today's elicitation answers: the five accepted (Aurora once, though its
    # state was sent twice) and confirm's decline (a declined question is a coded failure).
    answers = human_answers(world)
    assert [a.get("via") for a in answers] == ["elicitation"] * len(answers), answers
    assert [a["action"] for a in answers] == ["accept"] * 3 + ["decline"] + ["accept"] * 2, answers
    assert [a["answer"]["text"] for a in answers if "text" in a.get("answer", {})] == [
        "the main branch",
        "Aurora",
        "Borealis",
    ], answers
    # Every session's chain verifies.
    for s in world.run_json("replay", "sessions", "--json"):
        proc = world.run("replay", "verify", s["id"])
        assert proc.returncode == 0, describe(proc)


async def test_listen_delivers_subscription_batches_and_tool_list_changes(
    transport: Transport, world: World
) -> None:
    watched = world.home / "watched"
    watched.mkdir()
    frames: list[Any] = []

    async def keep(message: Any) -> None:
        frames.append(message)

    async with transport.modern(message_handler=keep) as client:
        sub = ok(await client.call_tool("subscribe", {"paths": ["watched"], "debounce_ms": 50}))
        sid = sub["subscription"]
        async with client.listen(tools_list_changed=True, resource_subscriptions=[EVENTS_URI]) as stream:
            assert stream.honored.tools_list_changed is True
            assert stream.honored.resource_subscriptions == [EVENTS_URI], stream.honored
            ok(await client.call_tool("write_file", {"path": "watched/a.txt", "content": "a\n"}))
            events: list[Any] = []
            with anyio.fail_after(15):
                async for event in stream:
                    events.append(event)
                    if isinstance(event, ResourceUpdated):
                        break
            assert events[-1] == ResourceUpdated(uri=EVENTS_URI), events
            read = await client.read_resource(EVENTS_URI, cache_mode="bypass")
            batches = json.loads(read.contents[0].text)["batches"]
            paths = [c["path"] for b in batches if b["subscription"] == sid for c in b["changes"]]
            assert str((watched / "a.txt").resolve()) in paths, batches
            # The batch rode the notification too, under aido/events, on the listen stream.
            carried = [
                f.params.meta
                for f in frames
                if getattr(f, "method", None) == "notifications/resources/updated" and f.params.meta
            ]
            assert carried, frames
            assert carried[0]["aido/events"]["subscription"] == sid, carried
            assert carried[0]["io.modelcontextprotocol/subscriptionId"] == stream.subscription_id
            # A defined function is a new tool: listeners are told.
            ok(await client.call_tool("define_function", {"name": "twice", "source": "1 + 1"}))
            with anyio.fail_after(15):
                async for event in stream:
                    if isinstance(event, ToolsListChanged):
                        break
            assert "twice" in {t.name for t in (await client.list_tools(cache_mode="bypass")).tools}
    # The batch was journaled before the client was told.
    journaled = []
    for s in world.run_json("replay", "sessions", "--json"):
        proc = world.run("replay", "export", s["id"], "--jsonl")
        journaled += [json.loads(l) for l in proc.stdout.splitlines() if "events_delivered" in l]
    assert journaled, "events_delivered is journaled"
