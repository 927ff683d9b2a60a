"""The desktop body over real MCP: `aido mcp` driven by the official Python SDK client, with
an owned headless session (Xvfb + openbox + a private D-Bus) and a real xterm in it, and the
same on the Wayland lane (a headless sway with a real foot, driven by the wlr backend).

Off by default (`desktop_disabled`); enabled, an agent finds the terminal in the window tree,
focuses it, types a command that writes a file (judged as run_command first), gets a
screenshot as an MCP image, and `aido replay playback` reproduces every desktop result;
`aido desktop doctor` says what the owned session supports. When the X11 lane cannot start
the test says why (and fails under CI, where .ci/run installs it).
"""

from __future__ import annotations

import json
import os
import shutil

import anyio
import pytest

from conftest import describe

pytestmark = pytest.mark.anyio

LANE = ["Xvfb", "openbox", "dbus-daemon", "xterm"]
SWAY_LANE = ["sway", "dbus-daemon", "foot"]

DESKTOP_TOOLS = {
    "screenshot", "click", "double_click", "move_mouse", "scroll", "type_text", "press_key",
    "press_key_combination", "focus_window", "get_window_tree", "get_focused_window",
    "get_clipboard", "set_clipboard", "send_notification",
}

CONFIG = """
[desktop]
enabled = true
autostart = [["xterm", "-fa", "DejaVu Sans Mono", "-fs", "14", "-geometry", "80x20+0+0"]]
"""


SWAY_CONFIG = """
[desktop]
enabled = true
server = "sway"
autostart = [["env", "LC_ALL=C.UTF-8", "foot", "-a", "foot", "-o", "font=DejaVu Sans Mono:size=14", "sh"]]
"""


def lane_ready(lane: list[str] = LANE, name: str = "X11") -> bool:
    missing = [p for p in lane if shutil.which(p) is None]
    if not missing:
        return True
    print(f"{name} lane cannot start: {', '.join(missing)} not installed")
    assert os.environ.get("CI") is None, f"CI must have the {name} lane (.ci/run installs it)"
    return False



async def shell_reads_typing(s, ready) -> None:
    """Wait until the shell behind a freshly mapped terminal reads what is typed (seconds on a
    loaded machine): type a command that leaves a file, again each second, until it does."""
    with anyio.fail_after(30):
        while not ready.exists():
            await s.ok("type_text", {"text": f": > {ready}\n"})
            with anyio.move_on_after(1):
                while not ready.exists():
                    await anyio.sleep(0.02)

async def test_desktop_tools_are_listed_and_off_by_default(world):
    async with world.session() as s:
        tools = {t.name: t for t in (await s.session.list_tools()).tools}
        assert DESKTOP_TOOLS <= set(tools)
        assert tools["screenshot"].annotations.read_only_hint is True
        assert tools["type_text"].annotations.destructive_hint is True
        await s.err("screenshot", {}, code="desktop_disabled")
        await s.err("type_text", {"text": "x"}, code="desktop_disabled")
        # simulate says a desktop input cannot be rewound.
        sim = await s.ok("simulate", {"action": {"type": "type_text", "text": "ls"}})
        assert sim["leaves"][0]["irreversible"] is True


async def test_an_agent_types_into_a_real_xterm_and_playback_reproduces_it(world):
    if not lane_ready():
        return
    out = world.home / "typed.txt"
    async with world.session(config=CONFIG) as s:
        term = None
        with anyio.fail_after(20):
            while term is None:
                tree = await s.ok("get_window_tree", {})
                term = next((w for w in tree["windows"] if w["class"] == "XTerm"), None)
                if term is None:
                    await anyio.sleep(0.1)
        await s.ok("focus_window", {"window": term["id"]})
        focused = await s.ok("get_focused_window", {})
        assert focused["window"]["id"] == term["id"]
        await shell_reads_typing(s, world.home / "xterm-ready")
        typed = await s.ok("type_text", {"text": f"echo from-mcp > {out}\n"})
        assert typed["terminal"] is True
        with anyio.fail_after(15):
            while not (out.exists() and out.read_text() == "from-mcp\n"):
                await anyio.sleep(0.02)
        shot = await s.call("screenshot", {})
        assert not shot.is_error
        images = [c for c in shot.content if c.type == "image"]
        assert len(images) == 1 and images[0].mime_type == "image/png"
        await s.err("press_key", {"key": "ctrl+alt+F1"}, code="desktop_chord_refused")
        # Reading the screen on the x11 backend too.
        found = await s.ok("wait_for_text", {"text": "from-mcp", "timeout_ms": 10000})
        assert found["match"]["center"][1] < term["rect"]["y"] + term["rect"]["height"], found
        clicked = await s.ok("click_text", {"text": "from-mcp"})
        assert clicked["under_pointer"]["id"] == term["id"], clicked
    sessions = world.run_json("replay", "sessions", "--json")
    reproduced = 0
    for sess in sessions:
        proc = world.run("replay", "playback", sess["id"], "--json")
        assert proc.returncode == 0, describe(proc)
        played = json.loads(proc.stdout)
        assert played["mismatches"] == [], describe(proc)
        assert played["not_reproducible"] == [], describe(proc)
        reproduced += played["reproduced"]
    assert reproduced >= 6


def test_doctor_probes_an_owned_session(world):
    if not lane_ready():
        return
    proc = world.run("desktop", "doctor", "--json")
    assert proc.returncode == 0, describe(proc)
    report = json.loads(proc.stdout)
    assert report["session"] == "owned"
    assert report["x11"]["input"] is True
    assert report["x11"]["window_manager"] == "Openbox"
    assert "XTEST" in report["x11"]["extensions"]


async def test_an_agent_types_into_a_real_foot_on_sway(world):
    if not lane_ready(SWAY_LANE, "Wayland"):
        return
    out = world.home / "typed-wl.txt"
    async with world.session(config=SWAY_CONFIG) as s:
        term = None
        with anyio.fail_after(20):
            while term is None:
                tree = await s.ok("get_window_tree", {})
                term = next((w for w in tree["windows"] if w["class"] == "foot"), None)
                if term is None:
                    await anyio.sleep(0.1)
        assert tree["backend"] == "wlr", tree
        await s.ok("focus_window", {"window": term["id"]})
        focused = await s.ok("get_focused_window", {})
        assert focused["window"]["id"] == term["id"]
        await shell_reads_typing(s, world.home / "foot-ready")
        typed = await s.ok("type_text", {"text": f"echo from-wayland ✓ > {out}\n"})
        assert typed["terminal"] is True
        with anyio.fail_after(15):
            while not (out.exists() and out.read_text() == "from-wayland ✓\n"):
                await anyio.sleep(0.02)
        shot = await s.call("screenshot", {})
        assert not shot.is_error
        images = [c for c in shot.content if c.type == "image"]
        assert len(images) == 1 and images[0].mime_type == "image/png"
        await s.ok("set_clipboard", {"text": "clip ✓"})
        got = await s.ok("get_clipboard", {})
        assert got["text"] == "clip ✓", got
        # Reading the screen: OCR finds the typed token inside the terminal.
        found = await s.ok("wait_for_text", {"text": "from-wayland", "timeout_ms": 10000})
        x, y = found["match"]["center"]
        r = term["rect"]
        assert r["x"] <= x < r["x"] + r["width"] and r["y"] <= y < r["y"] + r["height"], found
        listed = await s.ok("find_text", {"text": "from-wayland"})
        assert listed["found"] is True and listed["matches"], listed
        await s.err("click_text", {"text": "no-such-text-zq9"}, code="desktop_text_not_found")
        clicked = await s.ok("click_text", {"text": "from-wayland"})
        assert clicked["under_pointer"]["id"] == term["id"], clicked
    sessions = world.run_json("replay", "sessions", "--json")
    for sess in sessions:
        proc = world.run("replay", "playback", sess["id"], "--json")
        assert proc.returncode == 0, describe(proc)
        played = json.loads(proc.stdout)
        assert played["mismatches"] == [], describe(proc)


def test_doctor_probes_an_owned_sway(world):
    if not lane_ready(SWAY_LANE, "Wayland"):
        return
    proc = world.run("desktop", "doctor", "--json", config='[desktop]\nserver = "sway"\n')
    assert proc.returncode == 0, describe(proc)
    report = json.loads(proc.stdout)
    assert report["session"] == "owned"
    assert report["backend"] == "wlr"
    wlr = report["wlr"]
    assert wlr["input"] and wlr["screenshot"] and wlr["clipboard"], wlr
    assert wlr["window_manager"].startswith("sway"), wlr
    assert any(e.startswith("zwlr_screencopy_manager_v1") for e in wlr["extensions"]), wlr
    # Probing a socket that is not there is a coded failure, not a guess.
    proc = world.run("desktop", "doctor", "--json", "--display", str(world.home / "no-socket"))
    assert proc.returncode != 0
    assert json.loads(proc.stdout)["wlr"]["error"]["code"] == "desktop_connect_failed"
