"""`aido watch` in a real terminal: tmux at 80x24 (as over SSH), driven with send-keys and read
with capture-pane, against `aido serve` that the official MCP Python SDK client is driving.

- an action the agent makes shows in the TUI's timeline within a second;
- a confirmation the agent waits on is approved with `a` in the TUI, and the waiting call
  returns approved (answered through the same store `aido answer` writes);
- in `mode = "confirm"` a write the agent makes waits; `a` in the TUI lets it run, once, and
  the journal and the TUI's timeline name `watch` and the user as who answered;
- a rewind chosen in the TUI (the step selected, `r`, its preview, `y`) puts the tree back,
  and the agent's session goes on;
- `q` quits and gives the terminal back; NO_COLOR draws without colour.

`aido watch` is started with no arguments: it finds the runtime through the URL `aido serve`
wrote to AIDO_HOME/serve/url and its token file. The screens are written to
$AIDO_WATCH_SCREENS (docs/watch makes docs/watch.md's) or the test's directory.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import anyio
import pytest

from conftest import World
from helpers import err, ok, seq_of
from test_serve import sdk, serve

pytestmark = pytest.mark.anyio

# SGR parameters that set a colour (foreground, background, 256 and true colour).
COLOUR_SGR = re.compile(r"\x1b\[([0-9;]*)m")


def colour_codes(escaped: str) -> set[int]:
    """The colour SGR parameters in `capture-pane -e` output."""
    found: set[int] = set()
    for params in COLOUR_SGR.findall(escaped):
        for p in params.split(";"):
            if p.isdigit() and (30 <= int(p) <= 49 or 90 <= int(p) <= 107):
                if int(p) not in (39, 49):  # the defaults
                    found.add(int(p))
    return found


class Terminal:
    """One tmux server of our own (its own socket) with one 80x24 window running a command;
    when the command ends the pane prints its exit status and stays."""

    def __init__(self, world: World, argv: list[str], env: dict[str, str], name: str):
        self.socket = f"aido-watch-test-{os.getpid()}-{name}"
        self.name = name
        environment = [f"{k}={v}" for k, v in env.items()] + ["TERM=screen-256color"]
        shell = " ".join(_quote(a) for a in ["env", "-i", *environment, *argv])
        self._tmux(
            "new-session", "-d", "-s", name, "-x", "80", "-y", "24",
            f"{shell}; echo \"[exited $?]\"; sleep 600",
        )

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=10
        )
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout

    def screen(self, escapes: bool = False) -> str:
        return self._tmux("capture-pane", "-p", *(["-e"] if escapes else []), "-t", self.name)

    def keys(self, *keys: str) -> None:
        # One key per send: an Escape followed at once by a letter reads as Alt+letter.
        for key in keys:
            self._tmux("send-keys", "-t", self.name, key)
            time.sleep(0.05)

    async def until(self, check: Callable[[str], bool], timeout: float, what: str) -> str:
        """The screen once `check` holds of it, looked at every 20 ms for at most `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            shown = self.screen()
            if check(shown):
                return shown
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not on screen within {timeout} s:\n{shown}")
            await anyio.sleep(0.02)

    async def shows(self, text: str, timeout: float = 10) -> str:
        return await self.until(lambda s: text in s, timeout, repr(text))

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=10)


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\"'\"'") + "'"


def keep(shots: Path, name: str, screen: str) -> None:
    (shots / f"{name}.txt").write_text(screen.rstrip("\n") + "\n")


def selected(screen: str) -> str:
    """The timeline row under the cursor (marked `>`)."""
    for line in screen.splitlines():
        m = re.search(r"│>(.*?)│$", line)
        if m:
            return m.group(1)
    return ""


async def test_watch_shows_live_actions_approves_and_rewinds_in_tmux(world: World) -> None:
    shots = Path(os.environ.get("AIDO_WATCH_SCREENS") or world.root / "screens")
    shots.mkdir(parents=True, exist_ok=True)
    target = world.home / "watched.txt"
    with serve(world) as served:
        assert (world.aido_home / "serve" / "url").read_text().strip() == served.base
        async with sdk(served) as session:
            first = await session.call_tool("write_file", {"path": "watched.txt", "content": "v1\n"})
            ok(first)
            denied = await session.call_tool("read_file", {"path": str(world.outside / "secret.txt")})
            err(denied, "path_outside_walls")
            env = {k: v for k, v in world.env().items()}
            tui = Terminal(world, [str(world.bin), "watch"], env, "watch")
            try:
                # The agent's session opens by itself, with what it did so far.
                await tui.shows("write_file")
                await tui.shows("path_outside_walls")

                # An action shows up within a second of its call returning.
                second = await session.call_tool("write_file", {"path": "watched.txt", "content": "v2\n"})
                returned = time.monotonic()
                ok(second)
                seq2 = seq_of(second)
                row = re.compile(rf"^│?.*\b{seq2} write_file\s+ok\b", re.M)
                await tui.until(lambda s: bool(row.search(s)), 1.0, f"#{seq2} write_file")
                print(f"the TUI showed #{seq2} {time.monotonic() - returned:.2f} s after the call returned")
                keep(shots, "timeline", tui.screen())

                # A question the agent waits on, approved in the TUI.
                asked: dict[str, Any] = {}

                async def confirm() -> None:
                    asked["result"] = await session.call_tool(
                        "confirm", {"question": "Ship watched.txt v2?", "timeout_ms": 60000}
                    )

                async with anyio.create_task_group() as tg:
                    tg.start_soon(confirm)
                    await tui.shows("Ship watched.txt v2?")
                    screen = await tui.shows("a approve  d deny")
                    keep(shots, "question", screen)
                    answered_at = time.monotonic()
                    tui.keys("a")
                    with anyio.fail_after(10):
                        while "result" not in asked:
                            await anyio.sleep(0.02)
                out = ok(asked["result"])
                print(f"the agent had the approval {time.monotonic() - answered_at:.2f} s after `a`")
                assert out["approved"] is True, out
                await tui.until(lambda s: "waiting for you" not in s, 5, "the question gone")

                # The v2 write in full: its diff.
                tui.keys("End")
                for _ in range(40):
                    if re.search(rf"^\s*{seq2} write_file", selected(tui.screen())):
                        break
                    tui.keys("Up")
                assert re.search(rf"^\s*{seq2} write_file", selected(tui.screen())), tui.screen()
                tui.keys("Enter")
                screen = await tui.shows("+v2")
                assert "-v1" in screen, screen
                keep(shots, "step", screen)
                tui.keys("Escape")
                await tui.shows(" sessions ")

                # Rewind to before the v2 write: the preview names it, `y` puts v1 back.
                tui.keys("r")
                screen = await tui.shows("undoes ")
                assert f"rewind: undo #{seq2} and everything after it" in screen, screen
                assert f"#{seq2} write_file" in screen, screen
                assert "watched.txt" in screen, screen
                keep(shots, "rewind", screen)
                assert target.read_text() == "v2\n", "the preview changes nothing"
                tui.keys("y")
                deadline = time.monotonic() + 10
                while target.read_text() != "v1\n" and time.monotonic() < deadline:
                    await anyio.sleep(0.05)
                assert target.read_text() == "v1\n"
                screen = await tui.shows(f"rewound before #{seq2}")
                assert re.search(rf"\b{seq2}~write_file", screen), screen
                keep(shots, "rewound", screen)

                # The agent's session goes on after the operator's rewind.
                again = await session.call_tool("read_file", {"path": "watched.txt"})
                assert ok(again)["content"] == "v1\n"

                # `q` quits and gives the terminal back (the alternate screen is left).
                tui.keys("q")
                screen = await tui.shows("[exited 0]")
                assert " sessions " not in screen, screen
            finally:
                tui.close()

            # The journal says who rewound, and the question was answered as `aido answer` does.
            proc = world.run("answer", "--list", "--json")
            assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout


async def test_watch_draws_without_colour_under_no_color_and_explains_a_missing_runtime(world: World) -> None:
    with serve(world) as served:
        done = await act(served)
        assert done["ok"], done
        plain = Terminal(world, [str(world.bin), "watch"], {**world.env(), "NO_COLOR": "1"}, "plain")
        coloured = Terminal(world, [str(world.bin), "watch"], world.env(), "coloured")
        try:
            await plain.shows("write_file")
            await coloured.shows("write_file")
            assert colour_codes(plain.screen(escapes=True)) == set(), plain.screen(escapes=True)
            assert colour_codes(coloured.screen(escapes=True)), "colour is drawn without NO_COLOR"
            # Still told apart without colour: the selected row is marked and the header reversed.
            assert ">" in plain.screen()
        finally:
            plain.close()
            coloured.close()
    # No runtime: a coded error before the screen is taken.
    proc = world.run("watch", "--url", "http://127.0.0.1:9", timeout=30)
    assert proc.returncode != 0
    assert "[watch_unreachable]" in proc.stderr, proc.stderr


async def test_watch_pages_a_long_session_from_its_newest_records(world: World) -> None:
    import httpx2

    with serve(world) as served:
        actions = 400
        async with httpx2.AsyncClient(timeout=30, headers=served.headers()) as http:
            first = (await http.post(f"{served.base}/actions", json={
                "primitive": "read_file", "arguments": {"path": "notes.txt"}})).json()
            session = first["session"]
            for _ in range(actions - 1):
                done = (await http.post(f"{served.base}/actions", json={
                    "primitive": "read_file", "arguments": {"path": "notes.txt"}, "session": session})).json()
                assert done["ok"], done
        records = done["seq"] + 1
        tui = Terminal(world, [str(world.bin), "watch", "--session", session[:12]], world.env(), "long")
        try:
            # The newest page only: the start of the session is not held yet.
            await tui.shows(f"{records} records · live ↑ older")
            # The newest row, once the view has followed the tail to it (a busy machine may
            # draw the count a frame before the rows).
            screen = await tui.shows(f"{done['seq']} read_file")
            assert "started by" not in screen, screen
            # Up past the top reads the page before, until the first record is reached.
            tui.keys("Home")
            deadline = time.monotonic() + 30
            while "started by" not in tui.screen() and time.monotonic() < deadline:
                tui.keys("Up", "Home")
                await anyio.sleep(0.1)
            screen = await tui.shows("started by aido serve /actions")
            assert "↑ older" not in screen, screen
            assert re.search(r">\s+1 ── started by", screen), screen
        finally:
            tui.close()


async def act(served: Any) -> dict[str, Any]:
    import httpx2

    async with httpx2.AsyncClient(timeout=30) as http:
        r = await http.post(
            f"{served.base}/actions",
            json={"primitive": "write_file", "arguments": {"path": "plain.txt", "content": "x\n"}},
            headers=served.headers(),
        )
        return r.json()


async def test_a_confirm_mode_write_waits_for_the_tui_and_is_journaled_as_watch(world: World) -> None:
    config = world.write_config('mode = "confirm"\n[limits]\nconfirm_timeout_ms = 60000\n')
    target = world.home / "held.txt"
    with serve(world, "--config", str(config)) as served:
        async with sdk(served) as session:
            tui = Terminal(world, [str(world.bin), "watch"], world.env(USER="carol"), "confirm")
            try:
                asked: dict[str, Any] = {}

                async def write() -> None:
                    asked["result"] = await session.call_tool("write_file", {"path": "held.txt", "content": "held\n"})

                async with anyio.create_task_group() as tg:
                    tg.start_soon(write)
                    await tui.shows("confirm: aido asks before running write_file")
                    await tui.shows("a approve  d deny")
                    assert not target.exists() and "result" not in asked, "the write waits"
                    tui.keys("a")
                    with anyio.fail_after(10):
                        while "result" not in asked:
                            await anyio.sleep(0.02)
                ok(asked["result"])
                assert target.read_text() == "held\n"
                await tui.until(lambda s: "waiting for you" not in s, 5, "the question gone")
                # The timeline names who answered.
                await tui.shows("watch (carol")
            finally:
                tui.close()
    records = []
    for s in world.run_json("replay", "sessions", "--json"):
        proc = world.run("replay", "export", s["id"], "--jsonl")
        records += [json.loads(line) for line in proc.stdout.splitlines()]
    [answered] = [r for r in records if r.get("event") == "confirm_answered"]
    assert answered["approved"] is True, answered
    assert answered["by"]["surface"] == "watch", answered
    assert answered["by"]["person"].startswith("carol, with the operator's token from 127.0.0.1"), answered

