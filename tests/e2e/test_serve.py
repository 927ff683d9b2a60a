"""`aido serve`: the official MCP Python SDK's streamable HTTP client against the real binary,
making real calls (write_file, read_file), and raw HTTP for what a well-behaved client never
sends: a foreign Host or Origin (403), no token (401 with RFC 9728 metadata), an oversized
body (413), an expired session (404, then a new initialize is served)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import time
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from conftest import World
from helpers import err, ok, seq_of

pytestmark = pytest.mark.anyio


class Served:
    def __init__(self, proc: subprocess.Popen[str], url: str, token_file: Path):
        self.proc = proc
        self.url = url
        self.base = url.rsplit("/mcp", 1)[0]
        self.token_file = token_file
        self.token = token_file.read_text().strip()

    def headers(self, **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", **extra}


@contextmanager
def serve(world: World, *args: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    log = world.root / "logs" / f"serve-{len(world.logs)}.stderr"
    log.parent.mkdir(parents=True, exist_ok=True)
    world.logs.append(log)
    with open(log, "w") as errlog:
        proc = subprocess.Popen(
            [str(world.bin), "serve", "--listen", "127.0.0.1:0", *args],
            env=world.env(**(env or {})),
            cwd=world.home,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=errlog,
            text=True,
        )
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline()
            second = proc.stdout.readline()
            assert first.startswith("aido serve: MCP at "), (first, log.read_text())
            url = first.removeprefix("aido serve: MCP at ").strip()
            token_file = Path(second.removeprefix("aido serve: bearer token in ").strip())
            yield Served(proc, url, token_file)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    raise AssertionError("aido serve did not stop within 10 s of SIGTERM")


@asynccontextmanager
async def sdk(served: Served) -> AsyncIterator[ClientSession]:
    async with httpx2.AsyncClient(headers=served.headers(), timeout=30) as http:
        async with streamable_http_client(served.url, http_client=http) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=30) as session:
                await session.initialize()
                yield session


def init_body(version: str = "2025-11-25") -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        },
    }


MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


async def test_sdk_client_writes_and_reads_files_over_http(world: World) -> None:
    with serve(world) as served:
        mode = stat.S_IMODE(served.token_file.stat().st_mode)
        assert mode == 0o600, oct(mode)
        assert served.token_file == world.aido_home / "serve" / "token"
        async with sdk(served) as session:
            wrote = await session.call_tool(
                "write_file", {"path": "over_http.txt", "content": "sent over HTTP\n"}
            )
            ok(wrote)
            assert (world.home / "over_http.txt").read_text() == "sent over HTTP\n"
            read = await session.call_tool("read_file", {"path": "over_http.txt"})
            assert ok(read)["content"] == "sent over HTTP\n"
            assert seq_of(read) > seq_of(wrote)
            # The walls hold over HTTP as over stdio.
            denied = await session.call_tool("read_file", {"path": str(world.outside / "secret.txt")})
            assert err(denied, "path_outside_walls")["gate"]
    # The same journal as stdio: replay finds the HTTP session, and its chain verifies.
    sessions = world.run_json("replay", "sessions", "--json")
    assert sessions, "the journal has the HTTP session"
    for s in sessions:
        proc = world.run("replay", "verify", s["id"])
        assert proc.returncode == 0, proc.stdout + proc.stderr
    # And the audit file has every record of it.
    day = time.strftime("%Y-%m-%d", time.gmtime())
    lines = [json.loads(l) for l in (world.aido_home / "audit" / f"{day}.jsonl").read_text().splitlines()]
    assert any(l.get("event") == "action_completed" for l in lines)
    assert all(len(l["hash"]) == 64 and len(l["prev"]) == 64 and l["seq"] >= 1 for l in lines)


async def test_the_token_is_kept_across_restarts(world: World) -> None:
    with serve(world) as first:
        token = first.token
    with serve(world) as second:
        assert second.token == token


def test_foreign_host_and_origin_get_403(world: World) -> None:
    with serve(world) as served:
        port = served.base.rsplit(":", 1)[1]
        with httpx2.Client(timeout=10) as http:
            r = http.post(served.url, json=init_body(), headers=served.headers(**MCP_HEADERS, Host="evil.example"))
            assert r.status_code == 403 and r.json()["code"] == "host_not_allowed"
            r = http.post(
                served.url,
                json=init_body(),
                headers=served.headers(**MCP_HEADERS, Origin="https://evil.example"),
            )
            assert r.status_code == 403 and r.json()["code"] == "origin_not_allowed"
            r = http.post(
                served.url,
                json=init_body(),
                headers=served.headers(**MCP_HEADERS, Origin=f"http://localhost:{port}"),
            )
            assert r.status_code == 200, r.text


def test_no_token_gets_401_and_the_metadata_says_why(world: World) -> None:
    with serve(world) as served:
        with httpx2.Client(timeout=10) as http:
            r = http.post(served.url, json=init_body(), headers=MCP_HEADERS)
            assert r.status_code == 401
            assert r.json()["code"] == "unauthorized"
            challenge = r.headers["www-authenticate"]
            assert challenge.startswith("Bearer resource_metadata=")
            metadata_url = challenge.split('resource_metadata="', 1)[1].split('"', 1)[0]
            meta = http.get(metadata_url)
            assert meta.status_code == 200
            assert meta.json()["resource"] == served.url
            r = http.post(served.url, json=init_body(), headers={**MCP_HEADERS, "Authorization": "Bearer wrong"})
            assert r.status_code == 401


def test_an_oversized_body_gets_413_and_nothing_is_written(world: World) -> None:
    with serve(world, "--body-bytes-max", "100000") as served:
        body = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "write_file", "arguments": {"path": "big.txt", "content": "x" * 200_000}},
        }
        with httpx2.Client(timeout=10) as http:
            r = http.post(served.url, json=body, headers=served.headers(**MCP_HEADERS))
            assert r.status_code == 413, r.text
            assert r.json()["code"] == "request_too_large"
            r = http.post(f"{served.base}/actions", json={"primitive": "write_file", "arguments": body["params"]["arguments"]}, headers=served.headers())
            assert r.status_code == 413
        assert not (world.home / "big.txt").exists()


async def test_an_expired_session_gets_404_and_a_new_session_is_served(world: World) -> None:
    with serve(world, "--session-idle-secs", "1") as served:
        with httpx2.Client(timeout=10) as http:
            r = http.post(served.url, json=init_body(), headers=served.headers(**MCP_HEADERS))
            assert r.status_code == 200, r.text
            sid = r.headers["mcp-session-id"]
            time.sleep(2.5)
            r = http.post(
                served.url,
                json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                headers=served.headers(**MCP_HEADERS, **{"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}),
            )
            assert r.status_code == 404, r.text
            assert r.json()["code"] == "session_not_found"
        # A client that initializes again is served.
        async with sdk(served) as session:
            ok(await session.call_tool("write_file", {"path": "again.txt", "content": "again"}))
        assert (world.home / "again.txt").read_text() == "again"


def test_sigterm_stops_it_promptly_with_a_stream_open(world: World) -> None:
    with serve(world) as served:
        with httpx2.Client(timeout=10) as http:
            with http.stream("GET", f"{served.base}/events", headers=served.headers()) as events:
                assert events.status_code == 200
                r = http.post(f"{served.base}/actions", json={"primitive": "read_file", "arguments": {"path": "notes.txt"}}, headers=served.headers())
                assert r.json()["ok"] is True, r.text
                start = time.monotonic()
                served.proc.send_signal(signal.SIGTERM)
                served.proc.wait(timeout=10)
                took = time.monotonic() - start
        assert served.proc.returncode == 0
        assert took < 5, f"shutdown took {took:.1f}s"


async def test_aido_mcp_on_stdio_writes_the_audit_file_as_it_goes(world: World) -> None:
    day = time.strftime("%Y-%m-%d", time.gmtime())
    audit = world.aido_home / "audit" / f"{day}.jsonl"
    async with world.session() as s:
        wrote = await s.call("write_file", {"path": "audited.txt", "content": "a"})
        seq = seq_of(wrote)
        # While the session is still open: the action's records are already in the file.
        deadline = time.monotonic() + 5
        while True:
            lines = [json.loads(l) for l in audit.read_text().splitlines()] if audit.exists() else []
            if any(l["seq"] == seq + 1 and l["event"] == "action_completed" for l in lines):
                break
            assert time.monotonic() < deadline, f"not in {audit}: {lines}"
            time.sleep(0.05)
    assert stat.S_IMODE(audit.stat().st_mode) == 0o600
    lines = [json.loads(l) for l in audit.read_text().splitlines()]
    by_session: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        by_session.setdefault(line["session"], []).append(line)
    for records in by_session.values():
        assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
        for before, after in zip(records, records[1:]):
            assert after["prev"] == before["hash"]
    # The session's end is there too, once it closed.
    assert any(l["event"] == "session_ended" for l in lines)


async def test_an_endpoint_per_profile_narrows_the_tools_within_the_servers_own(world: World) -> None:
    """Issue 28, point 2 (HTTP): `/mcp/x/TOOLSETS` gives its sessions those toolsets, never
    more than the server's own `[mcp]`; a tool outside them is not listed and is refused
    `tool_not_enabled`; an unknown toolset is refused at `initialize`."""
    with serve(world) as served:
        coding = Served(served.proc, served.url + "/x/coding", served.token_file)
        async with sdk(coding) as session:
            names = {t.name for t in (await session.list_tools()).tools}
            assert "run_command" in names and "remember" not in names and len(names) <= 35, names
            refused = await session.call_tool("remember", {"text": "x"})
            assert refused.is_error and refused.structured_content["code"] == "tool_not_enabled", refused
        async with sdk(served) as session:
            assert "remember" in {t.name for t in (await session.list_tools()).tools}
        with httpx2.Client(timeout=10) as http:
            r = http.post(served.url + "/x/nope", json=init_body(), headers=served.headers(**MCP_HEADERS))
            assert "not a toolset" in r.text, r.text
    config = world.write_config('[mcp]\ntoolsets = ["files"]\n')
    with serve(world, "--config", str(config)) as served:
        coding = Served(served.proc, served.url + "/x/coding,memory", served.token_file)
        async with sdk(coding) as session:
            names = {t.name for t in (await session.list_tools()).tools}
            assert "read_file" in names and "run_command" not in names and "remember" not in names, names
