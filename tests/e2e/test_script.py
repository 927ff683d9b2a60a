"""Composite functions (Rhai) over real MCP: `aido mcp` driven by the official Python SDK client.

A defined function appears in tools/list after `notifications/tools/list_changed` and is called
both as its own tool and through call_function; every host call a script makes is a child
action, judged by the policy and journaled with the script's proposal as its parent (a denied
path is refused and journaled as such a child); scripts that try to escape (loops, deep
recursion, huge strings, a denied path) are stopped with a code; definitions survive a restart;
`aido replay playback` reproduces every result of a session with scripts.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from mcp import types

from conftest import describe
from helpers import err, eventually, ok, seq_of

pytestmark = pytest.mark.anyio

SCRIPT_TOOLS = {
    "define_function",
    "call_function",
    "list_functions",
    "delete_function",
    "define_primitive",
    "call_primitive",
    "list_custom_primitives",
    "delete_primitive",
}

READ_TWO = """
let a = run("read_file", #{path: args.first});
let b = run("read_file", #{path: args.second});
print("read " + args.first + " and " + args.second);
#{joined: a.content + b.content}
"""


def records(world) -> list[dict[str, Any]]:
    """Every record of every session, as `aido replay export --jsonl` prints them."""
    out = []
    for s in world.run_json("replay", "sessions", "--json"):
        proc = world.run("replay", "export", s["id"], "--jsonl")
        assert proc.returncode == 0, describe(proc)
        out += [json.loads(line) for line in proc.stdout.splitlines()]
    return out



async def test_the_script_tools_are_listed_and_list_changed_is_advertised(world):
    async with world.session() as s:
        tools = {t.name: t for t in (await s.session.list_tools()).tools}
        assert SCRIPT_TOOLS <= set(tools)
        assert s.init.capabilities.tools.list_changed is True
        assert tools["list_functions"].annotations.read_only_hint is True
        assert tools["delete_function"].annotations.destructive_hint is True


async def test_a_defined_function_shows_up_after_the_notification_and_runs_as_its_own_tool(world):
    changed: list[str] = []

    async def on_message(message: Any) -> None:
        # The SDK hands a ServerNotification (a root model in some versions) or the
        # notification itself.
        inner = getattr(message, "root", message)
        if isinstance(inner, types.ToolListChangedNotification):
            changed.append("tools")

    async with world.session(message_handler=on_message) as s:
        before = {t.name for t in (await s.session.list_tools()).tools}
        assert "read_two" not in before
        defined = await s.ok(
            "define_function",
            {"name": "read_two", "description": "Read two files and join them.", "source": READ_TWO},
        )
        assert defined["kind"] == "function" and len(defined["hash"]) == 64
        assert await eventually(lambda: bool(changed)), "tools/list_changed was sent"
        after = {t.name: t for t in (await s.session.list_tools()).tools}
        assert "read_two" in after
        assert "Read two files" in after["read_two"].description

        args = {"first": "~/notes.txt", "second": "~/lines.txt"}
        as_tool = await s.call("read_two", args)
        got = ok(as_tool)
        assert got["result"] == {"joined": "hello\nworld\n" + "".join(f"line{i}\n" for i in range(1, 11))}
        assert [c["primitive"] for c in got["calls"]] == ["read_file", "read_file"]
        assert got["log"] == ["read ~/notes.txt and ~/lines.txt"]
        # The same through the static tool, for clients that ignore the notification.
        through = await s.ok("call_function", {"name": "read_two", "args": args})
        assert through["result"] == got["result"]

        # Each host call is its own journaled action, proposed with the script's seq as parent.
        parent = seq_of(as_tool)
        children = [r for r in records(world) if r.get("event") == "action_proposed" and r.get("parent") == parent]
        assert [c["action"]["type"] for c in children] == ["read_file", "read_file"]
        assert [c["seq"] for c in children] == [c["seq"] for c in got["calls"]]

        listed = await s.ok("list_functions", {})
        assert [d["name"] for d in listed["definitions"]] == ["read_two"]
        changed.clear()
        await s.ok("delete_function", {"name": "read_two"})
        assert await eventually(lambda: bool(changed)), "tools/list_changed was sent on delete"
        assert "read_two" not in {t.name for t in (await s.session.list_tools()).tools}
        await s.err("call_function", {"name": "read_two"}, "script_not_found")
    assert world.played_back() >= 9


async def test_a_host_call_to_a_denied_path_is_refused_and_journaled_as_a_child(world):
    async with world.session() as s:
        await s.ok(
            "define_function",
            {"name": "steal", "source": 'run("read_file", #{path: args.path})'},
        )
        for path in (str(world.outside / "secret.txt"), "~/.ssh/id_rsa"):
            result = await s.call("call_function", {"name": "steal", "args": {"path": path}})
            sc = err(result, "script_host_call_failed")
            assert sc["details"]["child_code"] in {"path_outside_walls", "path_denied_by_pattern"}, sc
            child = sc["details"]["seq"]
            proposed = [r for r in records(world) if r.get("seq") == child and r.get("event") == "action_proposed"]
            assert len(proposed) == 1
            assert proposed[0]["parent"] == seq_of(result)
            assert proposed[0]["verdict"]["verdict"] == "deny", proposed[0]
        assert "top secret" not in json.dumps([r for r in records(world)])
    world.played_back()


ESCAPES = [
    ("spin", "loop {}", "script_operations_exceeded"),
    ("recurse", "fn f(n) { f(n + 1) } f(0)", "script_call_depth_exceeded"),
    ("grow", 'let s = "xxxxxxxxxxxxxxxx"; loop { s += s; }', "script_data_too_large"),
    ("hoard", "let a = []; loop { a.push(1); }", "script_data_too_large"),
    ("clock", "timestamp()", "script_runtime_error"),
    ("nap", "sleep(10)", "script_runtime_error"),
    ("nest", 'run("define_function", #{name: "x", source: "1"})', "script_host_call_refused"),
]


async def test_scripts_that_try_to_escape_are_stopped_with_a_code(world):
    async with world.session() as s:
        for name, source, code in ESCAPES:
            await s.ok("define_function", {"name": name, "source": source})
            with anyio.fail_after(20):
                sc = await s.err("call_function", {"name": name}, code)
            assert sc["message"], sc
        # Sources that cannot compile are refused at definition, and nothing is stored.
        await s.err("define_function", {"name": "evil", "source": 'eval("1")'}, "script_parse_error")
        await s.err("define_function", {"name": "mod", "source": 'import "x" as y; 1'}, "script_parse_error")
        deep = "(" * 300 + "1" + ")" * 300
        await s.err("define_function", {"name": "deep", "source": deep}, "script_parse_error")
        await s.err("define_function", {"name": "read_file", "source": "1"}, "script_name_reserved")
        await s.err("define_function", {"name": "Bad-Name", "source": "1"}, "script_name_invalid")
        names = {d["name"] for d in (await s.ok("list_functions", {}))["definitions"]}
        assert names == {name for name, _, _ in ESCAPES}
        # The server still serves.
        assert (await s.ok("read_file", {"path": "~/notes.txt"}))["content"] == "hello\nworld\n"
    world.played_back()


async def test_a_custom_primitive_checks_its_arguments_and_survives_a_restart(world):
    schema = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "times": {"type": "integer"}},
        "required": ["path"],
    }
    source = """
    let n = if "times" in args { args.times } else { 1 };
    let out = [];
    for i in 0..n { out.push(run("file_info", #{path: args.path}).size); }
    out
    """
    async with world.session() as s:
        await s.ok("define_primitive", {"name": "sizes", "input_schema": schema, "source": source})
        got = await s.ok("call_primitive", {"name": "sizes", "args": {"path": "~/notes.txt", "times": 2}})
        assert got["result"] == [12, 12]
        await s.err("call_primitive", {"name": "sizes", "args": {"times": 2}}, "script_arguments_invalid")
        await s.err("call_primitive", {"name": "sizes", "args": {"path": 3}}, "script_arguments_invalid")
        await s.err("sizes", {"path": "~/notes.txt", "other": 1}, "script_arguments_invalid")
        # A function and a primitive share one namespace.
        await s.err("define_function", {"name": "sizes", "source": "1"}, "script_name_taken")
        await s.err("define_primitive", {"name": "bad", "input_schema": {"type": "string"}, "source": "1"}, "script_schema_invalid")
    # A new server on the same AIDO_HOME has the definition, as a tool with its schema.
    async with world.session() as s:
        tools = {t.name: t for t in (await s.session.list_tools()).tools}
        assert tools["sizes"].input_schema == schema
        listed = await s.ok("list_custom_primitives", {"source": True})
        assert listed["definitions"][0]["source"] == source
        assert (await s.ok("sizes", {"path": "~/lines.txt"}))["result"] == [len("".join(f"line{i}\n" for i in range(1, 11)))]
        await s.ok("delete_primitive", {"name": "sizes"})
    reproduced = world.played_back()
    assert reproduced >= 8, reproduced
