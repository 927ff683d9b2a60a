"""Anthropic's computer-use tools on the desktop lane, over real MCP: `aido mcp` driven by the
official Python SDK client, an owned Xvfb + openbox session (1280x800) whose screenshots the
agent gets at 640x400 (`[computer]`), a real X client (`x11_probe.py`: a tk window that writes
down every X event it receives) and a real xterm.

A client sends one turn's `computer_toolset_20260801` member blocks as one
`desktop_computer_toolset` call; every member is run here and checked where it landed (the
probe's events at the real pixel a screenshot pixel shows, a file written by a command typed
into xterm, the images' sizes), a batch stops at its first failure, and `aido replay
playback` reproduces every result. When the X11 lane cannot start the test says why (and
fails under CI, where .ci/run installs it).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import struct
from pathlib import Path

import anyio
import pytest

from conftest import describe

pytestmark = pytest.mark.anyio

LANE = ["Xvfb", "openbox", "dbus-daemon", "xterm", "python3"]
PROBE = Path(__file__).resolve().parent / "x11_probe.py"


def lane_ready() -> bool:
    missing = [p for p in LANE if shutil.which(p) is None]
    if not missing:
        return True
    print(f"X11 lane cannot start: {', '.join(missing)} not installed")
    assert os.environ.get("CI") is None, "CI must have the X11 lane (.ci/run installs it)"
    return False


def config(log: Path) -> str:
    return f"""
[desktop]
enabled = true
autostart = [
  ["python3", "{PROBE}", "{log}", "600x400+0+0"],
  ["xterm", "-fa", "DejaVu Sans Mono", "-fs", "14", "-geometry", "60x10+700+0"],
]
[computer]
width = 640
height = 400
"""


def png_size(data: str) -> tuple[int, int]:
    raw = base64.b64decode(data)
    return struct.unpack(">II", raw[16:24])


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


async def seen(log: Path, want, skip: int = 0) -> list[str]:
    with anyio.fail_after(10):
        while not want(lines(log)[skip:]):
            await anyio.sleep(0.02)
    return lines(log)[skip:]


def members(*calls: tuple[str, dict]) -> dict:
    return {
        "version": "computer_toolset_20260801",
        "actions": [{"id": f"toolu_{i}", "name": n, "input": inp} for i, (n, inp) in enumerate(calls)],
    }


async def test_the_computer_tools_are_listed_with_the_toolset_members(world):
    async with world.session() as s:
        tools = {t.name: t for t in (await s.session.list_tools()).tools}
        for name in ["computer", "computer_toolset", "desktop_computer", "desktop_computer_toolset"]:
            assert name in tools, name
        schema = json.dumps(tools["desktop_computer_toolset"].input_schema)
        for member in [
            "key", "hold_key", "type", "cursor_position", "mouse_move", "left_mouse_down",
            "left_mouse_up", "left_click", "left_click_drag", "right_click", "middle_click",
            "double_click", "triple_click", "scroll", "wait", "screenshot", "zoom",
        ]:
            assert f'"{member}"' in schema, member
        assert "computer_toolset_20260801" in schema
        # Off by default, like every desktop primitive.
        await s.err("desktop_computer_toolset", members(("screenshot", {})), code="desktop_disabled")


async def test_every_member_runs_on_a_real_desktop_and_plays_back(world):
    if not lane_ready():
        return
    log = world.home / "probe.log"
    out = world.home / "from-toolset.txt"
    async with world.session(config=config(log)) as s:
        # The owned session starts on the first desktop call, with the probe and xterm.
        tree = None
        with anyio.fail_after(20):
            while tree is None or not {"XTerm", "Probe"} <= {w["class"] for w in tree["windows"]}:
                tree = await s.ok("get_window_tree", {})
        term = next(w for w in tree["windows"] if w["class"] == "XTerm")
        await seen(log, lambda l: "ready" in l)

        # One turn: a screenshot at the agent's size, a move, where the pointer is.
        r = await s.call("desktop_computer_toolset", members(
            ("screenshot", {}), ("mouse_move", {"coordinate": [100, 60]}), ("cursor_position", {})))
        assert not r.is_error
        images = [c for c in r.content if c.type == "image"]
        assert [png_size(i.data) for i in images] == [(640, 400)]
        res = r.structured_content["results"]
        assert [x["id"] for x in res] == ["toolu_0", "toolu_1", "toolu_2"]
        assert res[2]["text"] == "X=100,Y=60"
        # Screenshot pixel (100, 60) is real pixel (201, 121).
        await seen(log, lambda l: any(x.startswith("motion 201 121 ") for x in l))

        # Clicks, a held modifier, down/up with a move between, a drag, the wheel.
        skip = len(lines(log))
        await s.ok("desktop_computer_toolset", members(
            ("left_click", {"coordinate": [50, 40], "text": "ctrl"}),
            ("right_click", {"coordinate": [60, 40]}),
            ("middle_click", {"coordinate": [70, 40]}),
            ("double_click", {"coordinate": [80, 40]}),
            ("triple_click", {"coordinate": [90, 40]}),
            ("mouse_move", {"coordinate": [20, 20]}),
            ("left_mouse_down", {}),
            ("mouse_move", {"coordinate": [30, 30]}),
            ("left_mouse_up", {}),
            ("left_click_drag", {"start_coordinate": [40, 100], "coordinate": [140, 150]}),
            ("scroll", {"coordinate": [100, 100], "scroll_direction": "down", "scroll_amount": 3}),
        ))
        ev = await seen(log, lambda l: sum(x.startswith("press 5 201 201") for x in l) >= 3, skip)
        ctrl = next(x for x in ev if x.startswith("press 1 101 81 "))
        assert int(ctrl.split()[-1]) & 4, f"ctrl held: {ctrl}"
        for prefix in ["press 3 121 81 ", "press 2 141 81 ", "press 1 41 41 ", "release 1 61 61 ",
                       "press 1 81 201 ", "release 1 281 301 "]:
            assert any(x.startswith(prefix) for x in ev), (prefix, "\n".join(ev))
        assert sum(x.startswith("press 1 161 81 ") for x in ev) == 2
        assert sum(x.startswith("press 1 181 81 ") for x in ev) == 3
        held = next(x for x in ev if x.startswith("motion 61 61 "))
        assert int(held.split()[-1]) & 256, f"button 1 held: {held}"

        # Keys into the focused probe: key with repeat, hold_key, wait.
        skip = len(lines(log))
        await s.ok("desktop_computer_toolset", members(
            ("left_click", {"coordinate": [200, 150]}),
            ("key", {"text": "b", "repeat": 3}),
            ("hold_key", {"text": "shift", "duration": 0.5}),
            ("wait", {"duration": 0.1}),
        ))
        ev = await seen(log, lambda l: any(x.startswith("keyup Shift_L") for x in l), skip)
        assert sum(x.startswith("key b ") for x in ev) == 3, ev
        down = float(next(x for x in ev if x.startswith("key Shift_L")).split()[-1])
        up = float(next(x for x in ev if x.startswith("keyup Shift_L")).split()[-1])
        assert 0.4 <= up - down < 2.0, up - down

        # type into the terminal (judged as run_command) writes a file.
        at = [term["rect"]["x"] // 2 + 20, term["rect"]["y"] // 2 + 20]
        r = await s.ok("desktop_computer_toolset", members(
            ("left_click", {"coordinate": at}), ("type", {"text": f"echo toolset > {out}\n"})))
        assert r["results"][1]["target"]["terminal"] is True, json.dumps(r, indent=1)[:3000]
        with anyio.fail_after(5):
            while not (out.exists() and out.read_text() == "toolset\n"):
                await anyio.sleep(0.02)

        # zoom: 64x40 screenshot pixels are 128x80 real ones, scaled up to fill the budget.
        r = await s.call("desktop_computer_toolset", members(("zoom", {"region": [0, 0, 64, 40]})))
        assert [png_size(c.data) for c in r.content if c.type == "image"] == [(1356, 847)]

        # The first failure stops the batch; the rest answer "Not executed".
        r = await s.ok("desktop_computer_toolset", members(
            ("left_click", {"coordinate": [640, 10]}), ("wait", {"duration": 0.1})))
        assert r["failed_at"] == 0
        assert r["results"][0]["code"] == "computer_point_outside"
        assert r["results"][1]["code"] == "computer_not_executed"

        # The legacy tool: one action, a screenshot after it.
        r = await s.call("desktop_computer", {"action": "mouse_move", "coordinate": [10, 10]})
        assert not r.is_error
        assert [png_size(c.data) for c in r.content if c.type == "image"] == [(640, 400)]

    sessions = world.run_json("replay", "sessions", "--json")
    reproduced = 0
    for sess in sessions:
        proc = world.run("replay", "playback", sess["id"], "--json")
        assert proc.returncode == 0, describe(proc)
        played = json.loads(proc.stdout)
        assert played["mismatches"] == [], describe(proc)
        assert played["not_reproducible"] == [], describe(proc)
        reproduced += played["reproduced"]
    assert reproduced >= 8
