"""Mission Control in a real browser: Debian's Chromium, headless, driven by playwright-core
(tests/browser/driver.mjs, steered from here line by line), against a fleet of three real
`aido serve` runtimes on 127.0.0.1 (port 0, each its own AIDO_HOME, so each its own
`service.instance.id`), all exporting over OTLP to one real receiver (oteltap).

Runtime 1 serves the page; it knows runtime 2 from the static `[fleet] peers` list and
runtime 3 from a discovery file written after it started. An agent (the official MCP Python
SDK over streamable HTTP) works on runtime 1: its action shows in the page's live tail within
seconds, its session's timeline shows the primitive, verdict, duration, seq and hash and the
branch a rewind abandoned; it starts a machine (the test guest `aido vm image build` makes,
booted under QEMU, TCG here) whose thumbnail renders and opens the live view; it asks a
question with `ask_human`, a person types the answer on the page, and the agent's waiting
call returns that answer. An action on runtime 2 shows in the page when that peer is picked.

Screenshots go to $AIDO_MC_SCREENSHOTS (docs/img makes the README's) or the test's dir.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from oteltap import OtelTapHttpProtobufReceiver, OtelTapHttpProtobufReceiverSettings

from conftest import REPO, World, describe
from helpers import ok, seq_of
from test_serve import Served, sdk, serve
from test_telemetry import Tap, attrs, free_port


@contextmanager
def watched_page() -> Any:
    """A page on 127.0.0.1 for the agent's browser; yields its port."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Page(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            body = b"<title>Watched</title><h1>A page under watch</h1>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    site = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    try:
        yield site.server_address[1]
    finally:
        site.shutdown()
        site.server_close()

pytestmark = pytest.mark.anyio

CHROMIUM = "/usr/bin/chromium"
DRIVER = REPO / "tests" / "browser" / "driver.mjs"
PLAYWRIGHT = REPO / "tests" / "node_modules" / "playwright-core" / "package.json"


def browser_ready() -> bool:
    missing = []
    if not Path(CHROMIUM).exists():
        missing.append(f"{CHROMIUM} (apt-get install chromium; scripts/setup-debian does)")
    if not PLAYWRIGHT.exists():
        missing.append("tests/node_modules/playwright-core (scripts/test installs it)")
    if shutil.which("node") is None:
        missing.append("node")
    if not missing:
        return True
    print("Mission Control's browser test cannot run: missing " + ", ".join(missing))
    assert os.environ.get("CI") is None, "CI must have chromium and playwright-core"
    return False


class Browser:
    """The driver process: one JSON command a line in, one JSON answer a line out."""

    def __init__(self, log: Path) -> None:
        self.errlog = open(log, "w")
        self.proc = subprocess.Popen(
            ["node", str(DRIVER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errlog,
            text=True,
            env={**os.environ, "CHROMIUM": CHROMIUM},
        )
        ready = self._read(60)
        assert ready.get("ready"), ready
        self.version = ready.get("browser")

    def _read(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.errlog.flush()
            raise AssertionError(f"the browser driver stopped: {Path(self.errlog.name).read_text()[-3000:]}")
        return json.loads(line)

    def do(self, op: str, **args: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        out = self._read(120)
        assert out.get("ok"), f"browser {op} {args}: {out}"
        return out

    async def ado(self, op: str, **args: Any) -> dict[str, Any]:
        return await anyio.to_thread.run_sync(lambda: self.do(op, **args))

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.do("close")
                self.proc.wait(timeout=10)
            except Exception:
                self.proc.kill()
        self.errlog.close()


def instance_of(home: Path) -> str:
    return (home / "instance-id").read_text().strip()


async def act(served: Served, primitive: str, arguments: dict[str, Any]) -> dict[str, Any]:
    async with httpx2.AsyncClient(timeout=30) as http:
        r = await http.post(
            f"{served.base}/actions",
            json={"primitive": primitive, "arguments": arguments},
            headers=served.headers(),
        )
        assert r.status_code == 200, r.text
        return r.json()


@pytest.mark.timeout(900)  # the guest image is built and booted (TCG here) on first use
async def test_mission_control_in_a_browser_over_a_fleet_of_three(world: World) -> None:
    if not browser_ready():
        pytest.fail("chromium or playwright-core is missing (see above)")
    shots = Path(os.environ.get("AIDO_MC_SCREENSHOTS") or world.root / "shots")
    shots.mkdir(parents=True, exist_ok=True)

    # The test guest, built from Debian packages into runtime 1's AIDO_HOME.
    built = world.run("vm", "image", "build", timeout=900)
    assert built.returncode == 0, describe(built)

    homes = [world.aido_home, world.root / "aido_home_2", world.root / "aido_home_3"]
    for h in homes[1:]:
        h.mkdir()
    port = free_port()
    otlp = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"}
    settings = OtelTapHttpProtobufReceiverSettings(http_port=port)
    async with OtelTapHttpProtobufReceiver(settings) as receiver:
        tap = Tap(receiver)
        await tap.started()
        with ExitStack() as stack:
            two = stack.enter_context(serve(world, env={**otlp, "AIDO_HOME": str(homes[1])}))
            three = stack.enter_context(serve(world, env={**otlp, "AIDO_HOME": str(homes[2])}))
            discovery = world.root / "fleet" / "peers.jsonl"
            discovery.parent.mkdir()
            # A page the agent's browser opens (the net allowlist names it).
            page = stack.enter_context(watched_page())
            config = world.write_config(
                f'[net]\nallow = ["127.0.0.1:{page}"]\n\n'
                "[fleet]\n"
                f'peers = [{{ url = "{two.base}", token_file = "{two.token_file}" }}]\n'
                f'discovery = "{discovery}"\n'
            )
            one = stack.enter_context(serve(world, "--config", str(config), env=otlp))
            # Runtime 3 joins through the discovery file, after runtime 1 started.
            discovery.write_text(
                "# written by the scheduler's template\n"
                + json.dumps({"url": three.base, "token_file": str(three.token_file)})
                + "\n"
            )
            browser = Browser(world.root / "logs" / "browser.stderr")
            stack.callback(browser.close)
            print(f"chromium {browser.version} via playwright-core")

            # The page loads; its token travels in the fragment, never to a server.
            opened = await browser.ado("open", url=f"{one.base}/mc/#token={one.token}")
            assert opened["status"] == 200 and "Mission Control" in opened["title"], opened
            await browser.ado("wait", selector='[data-testid=runtime-card][data-ok=true]', count=3, timeout_ms=20000)
            shown = (await browser.ado("attrs", selector="[data-testid=runtime-card]", name="data-instance"))["values"]
            assert sorted(shown) == sorted(instance_of(h) for h in homes), shown
            assert len(set(shown)) == 3

            async with sdk(one) as session:
                # An action by an agent shows in the live tail within seconds.
                started = time.monotonic()
                first = await session.call_tool("write_file", {"path": "mc-a.txt", "content": "one\n"})
                ok(first)
                await browser.ado(
                    "wait",
                    selector='[data-testid=tail-item][data-event=action_completed]',
                    timeout_ms=5000,
                )
                await browser.ado("wait", selector='[data-testid=tail-item][data-primitive=write_file]', timeout_ms=5000)
                seen_after = time.monotonic() - started
                print(f"the agent's write_file showed in the live tail {seen_after:.2f} s after it was called")
                assert seen_after < 5

                # Its timeline: primitive, verdict, duration, hash; a rewind and its branch.
                second = await session.call_tool("write_file", {"path": "mc-b.txt", "content": "two\n"})
                ok(second)
                ok(await session.call_tool("rewind", {"before_seq": seq_of(second)}))
                sessions = (await act_json(one, "sessions"))["sessions"]
                agent_session = next(s["id"] for s in sessions if not s["runtime"] and s["records"] >= 6)
                await browser.ado("wait", selector=f'[data-testid=session][data-id="{agent_session}"]', timeout_ms=10000)
                await browser.ado("click", selector=f'[data-testid=session][data-id="{agent_session}"]')
                await browser.ado("wait", selector='[data-testid=timeline-row].rewound', timeout_ms=10000)
                rows = (await browser.ado("texts", selector="[data-testid=timeline-row]"))["texts"]
                assert any("write_file" in r and "allow" in r and "completed" in r and " ms" in r for r in rows), rows
                abandoned = (await browser.ado("texts", selector="[data-testid=timeline-row].abandoned"))["texts"]
                assert any("mc-b.txt" in r for r in abandoned), (abandoned, rows)

                # A machine: its thumbnail renders, and opens the live view.
                vm_started = time.monotonic()
                ok(await session.call_tool("vm_start", {"vm": "box"}))
                print(f"vm_start took {time.monotonic() - vm_started:.1f} s")
                ok(await session.call_tool("vm_type", {"vm": "box", "text": "echo watched from Mission Control\n"}))
                ok(await session.call_tool("vm_wait_for_text", {"vm": "box", "text": "watched from", "timeout_ms": 30000}))
                await browser.ado("wait", selector="[data-testid=thumbnail][data-vm=box]", timeout_ms=10000)
                await browser.ado(
                    "wait", selector="[data-testid=thumbnail][data-vm=box][src^='blob:']", timeout_ms=20000
                )
                images = (await browser.ado("images", selector="[data-testid=thumbnail][data-vm=box]"))["images"]
                assert images and images[0]["w"] > 0, images
                assert images[0]["w"] == 320, images  # downscaled from the 720x400 text screen
                await browser.ado("click", selector="[data-testid=thumbnail][data-vm=box]")
                await browser.ado("wait", selector="#live-img[src^='blob:']", timeout_ms=10000)
                live = (await browser.ado("images", selector="#live-img"))["images"]
                assert live[0]["w"] == 720, live
                await browser.ado("screenshot", path=str(shots / "mission-control-live.png"), selector="#live")
                await browser.ado("click", selector="#live-close")

                # The agent's browser: listed with its page, its thumbnail rendered.
                ok(await session.call_tool("browser_navigate", {"url": f"http://127.0.0.1:{page}/"}))
                await browser.ado(
                    "wait", selector="[data-testid=browser-thumbnail][src^='blob:']", timeout_ms=20000
                )
                captions = (await browser.ado("texts", selector="[data-testid=browsers] figcaption"))["texts"]
                assert any("Watched" in c for c in captions), captions

                # A question no client can show: answered on the page, received by the agent.
                asked: dict[str, Any] = {}

                async def ask() -> None:
                    asked["result"] = await session.call_tool(
                        "ask_human", {"question": "Which branch should I deploy?", "timeout_ms": 90000}
                    )

                async with anyio.create_task_group() as tg:
                    tg.start_soon(ask)
                    await browser.ado("wait", selector="[data-testid=question]", text="Which branch", timeout_ms=15000)
                    await browser.ado("fill", selector="[data-testid=question] [data-testid=answer-text]", value="release-7")
                    await browser.ado("screenshot", path=str(shots / "mission-control-question.png"), selector="#questions")
                    await browser.ado("screenshot", path=str(shots / "mission-control.png"), full=True)
                    answered_at = time.monotonic()
                    await browser.ado("click", selector="[data-testid=question] [data-testid=answer-send]")
                with anyio.fail_after(5):
                    while "result" not in asked:
                        await anyio.sleep(0.05)
                out = ok(asked["result"])
                print(f"the agent had the page's answer {time.monotonic() - answered_at:.2f} s after the click")
                assert out["answer"] == "release-7", out
                assert out["status"] == "answered", out

            # Another runtime of the fleet: its action, seen when that peer is picked.
            await browser.ado("click", selector=f'[data-testid=runtime-card][data-instance="{instance_of(homes[1])}"]')
            await asyncio.sleep(1.5)
            done = await act(two, "write_file", {"path": "peer.txt", "content": "from runtime 2\n"})
            assert done["ok"], done
            await browser.ado("wait", selector="[data-testid=tail-item][data-primitive=write_file]", timeout_ms=8000)
            await browser.ado("wait", selector=f'[data-testid=session][data-id="{done["session"]}"]', timeout_ms=8000)
            # Only runtime 2's sessions are listed now.
            peer_sessions = (await browser.ado("attrs", selector="[data-testid=session]", name="data-id"))["values"]
            assert agent_session not in peer_sessions, peer_sessions
            assert (await browser.ado("texts", selector="[data-testid=question]"))["texts"] == []
            three_done = await act(three, "read_file", {"path": "notes.txt"})
            assert three_done["ok"], three_done
            await browser.ado("screenshot", path=str(shots / "mission-control-fleet.png"))

            # One receiver got the spans of all three runtimes (oteltap hands over spans without
            # their resource, so they are told apart by session); each runtime's resource
            # identity is its service.instance.id, as its /metrics target_info shows.
            sessions_of = {agent_session: 1, done["session"]: 2, three_done["session"]: 3}
            seen: set[int] = set()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and len(seen) < 3:
                for span in list(tap.spans):
                    sid = attrs(span).get("mcp.session.id")
                    if sid in sessions_of:
                        seen.add(sessions_of[sid])
                await anyio.sleep(0.2)
            assert seen == {1, 2, 3}, f"spans received from runtimes {seen}"
            async with httpx2.AsyncClient(timeout=30) as http:
                for served, home in zip((one, two, three), homes):
                    text = (await http.get(f"{served.base}/metrics", headers=served.headers())).text
                    assert f'service_instance_id="{instance_of(home)}"' in text, text[:2000]
        tap.stop()


async def act_json(served: Served, path: str) -> dict[str, Any]:
    async with httpx2.AsyncClient(timeout=30) as http:
        r = await http.get(f"{served.base}/mc/api/{path}", headers=served.headers())
        assert r.status_code == 200, r.text
        return r.json()
