"""Capability grants through the Python MCP SDK: a session mints a grant narrower than its
own, a second `aido mcp` started with `AIDO_GRANT=<token>` can never exceed it (primitives,
paths as resolved, commands, uses, expiry, revocation), the grants it mints only narrow
further, the token never reaches the journal or the audit files, and playback reproduces
every grant call."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import describe
from helpers import err, ok

pytestmark = pytest.mark.anyio


def files_holding(root: Path, needle: bytes) -> list[str]:
    found = []
    for dirpath, _, names in os.walk(root):
        for name in names:
            p = Path(dirpath) / name
            try:
                if needle in p.read_bytes():
                    found.append(str(p.relative_to(root)))
            except OSError:
                pass
    return found


def playback_clean(world) -> int:
    reproduced = 0
    for s in world.run_json("replay", "sessions", "--json"):
        proc = world.run("replay", "playback", s["id"], "--json")
        assert proc.returncode == 0, describe(proc)
        played = json.loads(proc.stdout)
        assert played["mismatches"] == [] and played["not_reproducible"] == [], describe(proc)
        reproduced += played["reproduced"]
    return reproduced


async def test_a_granted_session_never_exceeds_its_grant_and_the_token_is_never_journaled(world):
    (world.home / "work").mkdir()
    async with world.session() as parent:
        minted = await parent.ok(
            "grant_mint",
            {
                "primitives": ["read_only", "write_file", "grant_mint", "grant_list"],
                "write": ["work"],
                "uses_max": 10,
            },
        )
        token = minted["token"]
        grant = minted["grant"]
        assert token.startswith("aidog_") and grant["id"] in token
        assert grant["scope"]["write"] == [str(world.home / "work")]
        assert grant["uses_max"] == 10 and grant["uses"] == 0
        listed = await parent.ok("grant_list", {})
        assert [g["id"] for g in listed["grants"]] == [grant["id"]]
        assert "token" not in json.dumps(listed["grants"])

    async with world.session(env={"AIDO_GRANT": token}) as child:
        # 1: inside the grant.
        await child.ok("write_file", {"path": "work/a.txt", "content": "granted\n"})
        assert (world.home / "work/a.txt").read_text() == "granted\n"
        # 2: a write outside the grant's roots, though inside the walls.
        err(await child.call("write_file", {"path": "notes2.txt", "content": "x"}), "grant_path_outside")
        assert not (world.home / "notes2.txt").exists()
        # 3: a link inside the grant pointing out of it is judged where it points.
        os.symlink(world.home / "notes.txt", world.home / "work/link.txt")
        err(await child.call("write_file", {"path": "work/link.txt", "content": "x"}), "grant_path_outside")
        assert (world.home / "notes.txt").read_text() == "hello\nworld\n"
        # 4: a primitive the grant does not name.
        err(await child.call("edit_file", {"path": "work/a.txt", "old_string": "granted", "new_string": "x"}), "capability_missing")
        # 5: commands are refused under a grant that narrows paths.
        err(await child.call("run_command", {"argv": ["touch", str(world.home / "x")]}), "grant_path_outside")
        assert not (world.home / "x").exists()
        # 6: a wider grant is refused; a narrower one inherits what is left of the uses.
        err(await child.call("grant_mint", {"primitives": ["edit_file"]}), "grant_not_narrower")
        err(await child.call("grant_mint", {"uses_max": 100}), "grant_not_narrower")
        narrower = await child.ok("grant_mint", {"primitives": ["read_file"], "write": ["work"]})
        # It has what was left when it was minted: 10 uses less the 8 calls so far (refused
        # calls spend a use too).
        assert narrower["grant"]["uses_max"] == 2
        # 7: read_only primitives are granted by class; the 9th and 10th uses.
        assert (await child.ok("read_file", {"path": "work/a.txt"}))["content"] == "granted\n"
        # Under a grant, the list holds the session's own grant and those narrowed from it.
        listed = (await child.ok("grant_list", {}))["grants"]
        assert [g["id"] for g in listed] == [grant["id"], narrower["grant"]["id"]]
        assert listed[0]["uses"] == 10
        err(await child.call("read_file", {"path": "work/a.txt"}), "grant_exhausted")

    # The grant narrowed from the spent one is spent too.
    async with world.session(env={"AIDO_GRANT": narrower["token"]}) as grandchild:
        err(await grandchild.call("read_file", {"path": "work/a.txt"}), "grant_exhausted")

    # The token is in no file of AIDO_HOME: not in the journal, not in the audit files.
    assert files_holding(world.aido_home, token.encode()) == []
    assert files_holding(world.aido_home, narrower["token"].encode()) == []
    assert playback_clean(world) > 0


async def test_revocation_expiry_and_rate_refuse_the_next_call_and_a_bad_token_starts_nothing(world):
    async with world.session() as parent:
        a = await parent.ok("grant_mint", {"primitives": ["read_only"], "rate": {"count": 2, "per_s": 60}})
        b = await parent.ok("grant_mint", {"primitives": ["read_only"], "expires_in_s": 2})
        c = await parent.ok("grant_mint", {"primitives": ["read_only"]})
        async with world.session(env={"AIDO_GRANT": a["token"]}) as child:
            await child.ok("read_file", {"path": "notes.txt"})
            await child.ok("read_file", {"path": "notes.txt"})
            refused = err(await child.call("read_file", {"path": "notes.txt"}), "grant_rate_limited")
            assert "try again" in refused["message"]
        async with world.session(env={"AIDO_GRANT": c["token"]}) as child:
            await child.ok("read_file", {"path": "notes.txt"})
            revoked = await parent.ok("grant_revoke", {"id": c["grant"]["id"]})
            assert revoked["revoked"] == [c["grant"]["id"]]
            err(await child.call("read_file", {"path": "notes.txt"}), "grant_revoked")
        time.sleep(2.1)
        async with world.session(env={"AIDO_GRANT": b["token"]}) as child:
            err(await child.call("read_file", {"path": "notes.txt"}), "grant_expired")
        err(await parent.call("grant_revoke", {"id": "0" * 32}), "grant_unknown")
        err(await parent.call("grant_mint", {"primitives": ["no_such_thing"]}), "grant_invalid")
        err(await parent.call("grant_mint", {"write": ["/etc"]}), "path_outside_walls")

    # A forged token (the right id, a wrong secret) starts no session.
    forged = a["token"][:-4] + ("0000" if not a["token"].endswith("0000") else "1111")
    proc = subprocess.run(
        [str(world.bin), "mcp"], env=world.env(AIDO_GRANT=forged), cwd=world.home,
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30,
    )
    assert proc.returncode != 0, describe(proc)
    assert "grant_token_invalid" in proc.stderr, describe(proc)
    # The refusals were journaled in the child sessions, with their codes.
    history = world.run("replay", "sessions", "--json")
    assert history.returncode == 0
    assert playback_clean(world) > 0


async def test_aido_serve_takes_a_grant_as_its_bearer_token_and_the_operator_cli_mints_lists_and_revokes(world):
    """`aido grant mint` (the operator's CLI, journaled) makes a token that `aido serve`
    accepts as a bearer token: the MCP session it opens runs under the grant (tools/list
    shows only the granted primitives; a path outside is refused), it reaches no session
    opened with another token and none of the operator's endpoints, and `aido grant revoke`
    makes the server refuse it with 401 while the server runs."""
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from test_serve import MCP_HEADERS, init_body, serve

    (world.home / "work").mkdir()
    (world.home / "work" / "a.txt").write_text("granted\n")
    minted = world.run("grant", "mint", "--primitive", "read_only", "--read", "work", "--uses", "50", "--json")
    assert minted.returncode == 0, describe(minted)
    minted = json.loads(minted.stdout)
    token, gid = minted["token"], minted["grant"]["id"]
    assert minted["grant"]["scope"]["read"] == [str(world.home / "work")]
    listed = world.run("grant", "list")
    assert listed.returncode == 0 and gid in listed.stdout and "used 0/50" in listed.stdout, describe(listed)

    with serve(world) as served:
        grant_headers = {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=grant_headers, timeout=30) as http:
            async with streamable_http_client(served.url, http_client=http) as (read, write):
                async with ClientSession(read, write, read_timeout_seconds=30) as mcp:
                    await mcp.initialize()
                    names = {t.name for t in (await mcp.list_tools()).tools}
                    assert "read_file" in names and "search_code" in names
                    assert "write_file" not in names and "run_command" not in names
                    got = ok(await mcp.call_tool("read_file", {"path": "work/a.txt"}))
                    assert got["content"] == "granted\n"
                    err(await mcp.call_tool("read_file", {"path": "notes.txt"}), "grant_path_outside")
                    err(await mcp.call_tool("write_file", {"path": "work/b.txt", "content": "x"}))
                    assert not (world.home / "work" / "b.txt").exists()

        with httpx2.Client(timeout=30) as raw:
            # The operator's endpoints refuse a grant's token.
            for path in ("/events", "/metrics", "/mc/api/questions", "/mc/api/sessions"):
                r = raw.get(served.base + path, headers=grant_headers)
                assert r.status_code == 403 and r.json()["code"] == "serve_operator_only", (path, r.text)
            # An MCP session the operator opened is not the grant's to use.
            r = raw.post(served.url, headers={**served.headers(), **MCP_HEADERS}, json=init_body())
            assert r.status_code == 200, r.text
            sid = r.headers["mcp-session-id"]
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "read_file", "arguments": {"path": "notes.txt"}}}
            r = raw.post(served.url, headers={**grant_headers, **MCP_HEADERS, "mcp-session-id": sid,
                                              "mcp-protocol-version": "2025-11-25"}, json=call)
            assert r.status_code == 403 and r.json()["code"] == "serve_session_not_yours", r.text
            # /actions: the grant's own session, judged by the grant; the operator's refused.
            r = raw.post(served.base + "/actions", headers=grant_headers,
                         json={"primitive": "read_file", "arguments": {"path": "work/a.txt"}})
            assert r.json()["ok"] is True, r.text
            op = raw.post(served.base + "/actions", headers=served.headers(),
                          json={"primitive": "read_file", "arguments": {"path": "notes.txt"}}).json()
            assert op["ok"] is True, op
            r = raw.post(served.base + "/actions", headers=grant_headers,
                         json={"primitive": "read_file", "arguments": {"path": "notes.txt"}, "session": op["session"]})
            assert r.status_code == 403 and r.json()["code"] == "serve_session_not_yours", r.text
            # A made-up grant token is refused like a wrong token.
            r = raw.post(served.base + "/actions", headers={"Authorization": "Bearer aidog_" + "0" * 32 + "_" + "0" * 64},
                         json={"primitive": "read_file", "arguments": {"path": "work/a.txt"}})
            assert r.status_code == 401 and "invalid_token" in r.headers["www-authenticate"], r.text

            # Revoked by the operator while the server runs: refused from the next request.
            revoked = world.run("grant", "revoke", gid)
            assert revoked.returncode == 0 and f"revoked {gid}" in revoked.stdout, describe(revoked)
            r = raw.post(served.base + "/actions", headers=grant_headers,
                         json={"primitive": "read_file", "arguments": {"path": "work/a.txt"}})
            assert r.status_code == 401 and r.json()["code"] == "serve_grant_token_invalid", r.text
            assert "grant_revoked" in r.json()["message"]

    after = json.loads(world.run("grant", "list", "--json").stdout)["grants"]
    assert [g["id"] for g in after] == [gid] and after[0]["revoked_ms"] is not None
    # Uses were counted: the MCP session's three calls and the one /actions call.
    assert after[0]["uses"] == 4, after
    # The CLI's mint, list and revoke are journaled in sessions of their own; the token never is.
    sessions = world.run_json("replay", "sessions", "--json")
    assert sum(1 for s in sessions if s.get("client") == "aido grant") >= 3, sessions
    assert files_holding(world.aido_home, token.encode()) == []
    assert playback_clean(world) > 0
