"""The gateway over real MCP: `aido mcp` driven by the official Python SDK client, with
`@modelcontextprotocol/server-everything` (npm) as a `[[downstream]]` server that aido starts
inside its own sandbox.

Its tools are listed under namespaced names with their own annotations; each call is an aido
action: judged by the class its annotations (or the entry's `classes`) give, refused by the
entry's `deny_tools`, journaled with the server's whole result, and played back without the
server. Its progress reaches the client's progress token, its question (elicitation) is asked
of the client and the answer goes back, and a server killed mid-session is restarted.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import types

from helpers import err, ok, text_of
from test_browser import chromium_ready
from test_mission import watched_page
from test_serve import sdk, serve

pytestmark = pytest.mark.anyio

SCRIPT = "node_modules/@modelcontextprotocol/server-everything/dist/index.js"


def everything() -> Path:
    """server-everything's script, from the directory scripts/test prepares."""
    base = os.environ.get("AIDO_TEST_DOWNSTREAMS")
    script = Path(base) / SCRIPT if base else None
    if script is not None and script.is_file():
        return script
    print(f"server-everything is missing: AIDO_TEST_DOWNSTREAMS={base!r} (scripts/test prepares it)")
    assert os.environ.get("CI") is None, "CI must have the downstream servers"
    pytest.fail("server-everything is missing (see above)")


def config(script: Path, mode: str = "normal", classes: str = "") -> str:
    return f"""mode = "{mode}"

[[downstream]]
name = "everything"
command = "node"
args = ["{script}", "stdio"]
deny_tools = ["get-env"]
classes = {{ {classes} }}
"""


def server_pids(script: Path) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if str(script).encode() in cmdline and b"node" in cmdline:
                pids.append(int(entry.name))
    return pids


async def test_a_downstream_server_s_tools_pass_through_aido(world):
    script = everything()
    asked: list[str] = []

    async def answer(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"color": "blue", "number": 7, "pets": "cats"})

    async with world.session(config=config(script), elicitation_callback=answer) as s:
        tools = {t.name: t for t in (await s.session.list_tools()).tools}
        assert {"downstream_call", "everything__echo", "everything__get-sum"} <= set(tools), sorted(tools)
        assert "echo" in (tools["everything__echo"].description or "").lower()

        echoed = await s.call("everything__echo", {"message": "through aido"})
        ok(echoed)
        assert "through aido" in text_of(echoed), text_of(echoed)
        summed = await s.call("everything__get-sum", {"a": 2, "b": 40})
        assert "42" in text_of(summed), text_of(summed)

        # The entry's deny list: refused by the policy, the server never asked.
        denied = err(await s.call("everything__get-env", {}), "downstream_tool_denied")
        assert denied["gate"] == "bodies", denied
        # The server's own refusal keeps its words beside aido's code.
        bad = err(await s.call("everything__get-sum", {"a": "two"}))
        assert bad["code"] in {"downstream_tool_failed", "downstream_refused"}, bad
        assert "a" in bad["message"], bad

        # Its progress reaches this call's progress token.
        seen: list[float] = []

        async def progress(done: float, total: float | None, message: str | None) -> None:
            seen.append(done)

        long = await s.session.call_tool(
            "everything__trigger-long-running-operation",
            {"duration": 1, "steps": 3},
            progress_callback=progress,
        )
        ok(long)
        assert len(seen) >= 2, seen

        # Its question is asked of this client; the answer goes back to it.
        elicited = await s.call("everything__trigger-elicitation-request", {})
        ok(elicited)
        assert asked, "the downstream's question reached the client"
        assert "blue" in text_of(elicited), text_of(elicited)

        # Killed, it is restarted: the next calls work again.
        before = server_pids(script)
        assert before, "the server runs"
        for pid in before:
            os.kill(pid, signal.SIGKILL)
        answered = None
        for _ in range(3):
            answered = await s.call("everything__echo", {"message": "again"})
            if not answered.is_error:
                break
            assert answered.structured_content["code"] == "downstream_crashed", answered
            await anyio.sleep(0.2)
        ok(answered)
        assert set(server_pids(script)).isdisjoint(before)

    # The journal holds every call: playback renders each result without the server.
    reproduced = world.played_back()
    assert reproduced >= 5, reproduced


async def test_readonly_mode_runs_a_read_only_downstream_tool_and_refuses_the_rest(world):
    script = everything()
    readonly = config(script, mode="readonly", classes='"echo" = "destructive"')
    async with world.session(config=readonly) as s:
        # get-sum's annotations say read-only; toggle-simulated-logging's do not; echo's do,
        # but the entry's classes say destructive.
        ok(await s.call("everything__get-sum", {"a": 1, "b": 2}))
        refused = err(await s.call("everything__toggle-simulated-logging", {}), "mode_readonly")
        assert "readonly" in refused["message"], refused
        err(await s.call("everything__echo", {"message": "x"}), "mode_readonly")
        # What simulate says of a downstream call: irreversible.
        simulated = ok(
            await s.call(
                "simulate",
                {"action": {"type": "downstream_call", "tool": "everything__echo", "arguments": {"message": "x"}}},
            )
        )
        assert simulated["leaves"][0]["irreversible"] is True, simulated


def git_server() -> Path:
    base = os.environ.get("AIDO_TEST_DOWNSTREAMS")
    server = Path(base) / "venv" / "bin" / "mcp-server-git" if base else None
    if server is not None and server.is_file():
        return server
    print(f"mcp-server-git is missing: AIDO_TEST_DOWNSTREAMS={base!r} (scripts/test prepares it)")
    assert os.environ.get("CI") is None, "CI must have the downstream servers"
    pytest.fail("mcp-server-git is missing (see above)")


@pytest.fixture
def repos(world) -> Any:
    """A git repository inside the walls and one outside, under /var/tmp (the sandbox the
    server runs in hides /tmp)."""
    import shutil
    import subprocess
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="aido-e2e-git-", dir="/var/tmp"))
    made = {}
    for name in ("inside", "outside"):
        repo = base / name
        repo.mkdir()
        run = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)  # noqa: E731
        run("init", "-q", "-b", "main")
        (repo / "README").write_text(f"{name}\n")
        run("-c", "user.name=t", "-c", "user.email=t@e", "add", "README")
        run("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "first")
        (repo / "new.txt").write_text("untracked\n")
        made[name] = repo
    yield made
    shutil.rmtree(base, ignore_errors=True)


async def test_mcp_server_git_works_inside_the_walls_and_is_refused_outside(world, repos):
    server = git_server()
    inside, outside = repos["inside"], repos["outside"]
    config = f"""[paths]
read = ["~", "{inside}"]
write = ["~", "{inside}"]

[[downstream]]
name = "git"
command = "{server}"
writable = ["{inside}"]
path_arguments = ["repo_path"]
classes = {{ git_status = "read_only", git_log = "read_only" }}
"""
    async with world.session(config=config) as s:
        tools = {t.name for t in (await s.session.list_tools()).tools}
        assert {"git__git_status", "git__git_log", "git__git_add"} <= tools, sorted(tools)
        status = await s.call("git__git_status", {"repo_path": str(inside)})
        ok(status)
        assert "new.txt" in text_of(status), text_of(status)
        # The repository outside aido's walls: refused by the policy, the server never asked.
        refused = err(await s.call("git__git_status", {"repo_path": str(outside)}), "path_outside_walls")
        assert str(outside) in refused["message"], refused
        # Inside: a change through the server lands in the repository.
        ok(await s.call("git__git_add", {"repo_path": str(inside), "files": ["new.txt"]}))
        staged = await s.call("git__git_status", {"repo_path": str(inside)})
        assert "new file" in text_of(staged) or "Changes to be committed" in text_of(staged), text_of(staged)
    assert world.played_back() >= 3


async def test_mission_control_shows_the_downstream_servers_and_the_open_browsers(world):
    """`aido serve`'s Mission Control API lists the gateway's servers and each session's open
    browser with its tabs, and gives a thumbnail of its current tab (looking journals
    nothing)."""
    if not chromium_ready():
        pytest.fail("chromium is missing (see above)")
    script = everything()
    with watched_page() as port:
        config = world.write_config(
            f"""[net]
allow = ["127.0.0.1:{port}"]

[[downstream]]
name = "everything"
command = "node"
args = ["{script}", "stdio"]
"""
        )
        with serve(world, "--config", str(config)) as served:
            async with sdk(served) as session, httpx2.AsyncClient(timeout=30) as http:
                opened = await session.call_tool("browser_navigate", {"url": f"http://127.0.0.1:{port}/"})
                assert not opened.is_error, opened
                api = f"{served.base}/mc/api"
                servers = (await http.get(f"{api}/downstreams", headers=served.headers())).json()["servers"]
                assert [s["name"] for s in servers] == ["everything"], servers
                assert servers[0]["running"] is True and servers[0]["tools"] >= 10, servers
                browsers = (await http.get(f"{api}/browsers", headers=served.headers())).json()["browsers"]
                assert len(browsers) == 1, browsers
                tabs = browsers[0]["tabs"]
                assert any(t["current"] and t["title"] == "Watched" for t in tabs), tabs
                shot = await http.get(
                    f"{api}/browsers/{browsers[0]['session']}/screen.png?width=320", headers=served.headers()
                )
                assert shot.status_code == 200 and shot.content.startswith(b"\x89PNG"), shot.status_code
                missing = await http.get(f"{api}/browsers/nobody/screen.png", headers=served.headers())
                assert missing.status_code == 404 and missing.json()["code"] == "browser_not_open"
                # Without the token: nothing.
                assert (await http.get(f"{api}/browsers")).status_code == 401


async def test_playwright_mcp_as_a_downstream_browser_reaches_only_what_its_entry_allows(world):
    """`@playwright/mcp` (npm) driving Debian's Chromium, started by aido as a downstream inside
    its sandbox: the page on 127.0.0.1 its entry's `network` names loads through the server's
    own egress proxy; a host it does not name is refused there and never reached."""
    if not chromium_ready():
        pytest.fail("chromium is missing (see above)")
    base = os.environ.get("AIDO_TEST_DOWNSTREAMS")
    cli = Path(base) / "node_modules" / "@playwright" / "mcp" / "cli.js" if base else None
    if cli is None or not cli.is_file():
        print(f"@playwright/mcp is missing: AIDO_TEST_DOWNSTREAMS={base!r} (scripts/test prepares it)")
        assert os.environ.get("CI") is None, "CI must have the downstream servers"
        pytest.fail("@playwright/mcp is missing (see above)")
    with watched_page() as port:
        # Its proxy is known inside the sandbox only (HTTP_PROXY): a shell hands it over.
        launch = (
            f"exec node {cli} --headless --browser chromium --executable-path /usr/bin/chromium "
            '--no-sandbox --isolated --proxy-server "$HTTP_PROXY" --proxy-bypass "<-loopback>"'
        )
        config = f"""[[downstream]]
name = "pw"
command = "sh"
args = ["-c", {json.dumps(launch)}]
network = ["127.0.0.1:{port}"]
start_timeout_ms = 60000
"""
        async with world.session(config=config) as s:
            tools = {t.name for t in (await s.session.list_tools()).tools}
            assert {"pw__browser_navigate", "pw__browser_snapshot"} <= tools, sorted(tools)
            opened = await s.call("pw__browser_navigate", {"url": f"http://127.0.0.1:{port}/"})
            ok(opened)
            assert "Page Title: Watched" in text_of(opened), text_of(opened)
            # The proxy answers a plain-HTTP request it refuses with 403 (X-Aido-Code net_denied).
            away = await s.call("pw__browser_navigate", {"url": "http://denied.example/"})
            said = text_of(away)
            assert "HTTP status: 403" in said or "ERR_" in said, said[:2000]
    assert world.played_back() >= 2


async def test_toolsets_and_grants_narrow_downstream_tools_like_aido_s_own(world):
    script = everything()
    base = config(script)
    # A client given the coding profile and the entry's toolset: the server's tools, not the
    # gateway's every tool; the coding profile alone: none of them, and a call is refused.
    narrowed = base + '\n[mcp]\ntoolsets = ["coding", "everything"]\n'
    async with world.session(config=narrowed) as s:
        tools = {t.name for t in (await s.session.list_tools()).tools}
        assert "everything__echo" in tools and "downstream_call" not in tools, sorted(tools)
        ok(await s.call("everything__echo", {"message": "given by its toolset"}))
    coding = base + '\n[mcp]\ntoolsets = ["coding"]\n'
    async with world.session(config=coding) as s:
        tools = {t.name for t in (await s.session.list_tools()).tools}
        assert not any(name.startswith("everything__") for name in tools), sorted(tools)
        err(await s.call("everything__echo", {"message": "x"}), "tool_not_enabled")
    # A grant naming one downstream tool: that one listed and run, another refused.
    async with world.session(config=base) as s:
        minted = await s.ok("grant_mint", {"primitives": ["everything__echo", "grant_list"]})
    async with world.session(config=base, env={"AIDO_GRANT": minted["token"]}) as child:
        tools = {t.name for t in (await child.session.list_tools()).tools}
        assert "everything__echo" in tools and "everything__get-sum" not in tools, sorted(tools)
        ok(await child.call("everything__echo", {"message": "granted"}))
        err(await child.call("everything__get-sum", {"a": 1, "b": 2}), "capability_missing")


async def test_an_http_downstream_the_net_policy_does_not_name_is_left_out(world):
    """aido reaches an HTTP downstream itself: `[net]` judges its URL like any, and an entry it
    refuses is left out with the refusal's code, the other entries served."""
    script = everything()
    refused = config(script) + '\n[[downstream]]\nname = "remote"\nurl = "http://10.1.2.3:9/mcp"\n'
    async with world.session(config=refused) as s:
        tools = {t.name for t in (await s.session.list_tools()).tools}
        assert "everything__echo" in tools, sorted(tools)
        assert not any(name.startswith("remote__") for name in tools), sorted(tools)
    said = world.logs[-1].read_text()
    assert "remote" in said and "code=net_denied" in said, said[-2000:]
