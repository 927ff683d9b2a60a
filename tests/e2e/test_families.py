"""Primitive families as cargo features: an aido built with `--no-default-features` (no VM,
process, memory, search, human, net, desktop or script family) against the default build, both driven by the
official Python SDK client.

The minimal build lists none of those families' tools; a call to one of them (alone or inside
a pipeline) is refused by the policy with `primitive_not_built`, journaled like any refusal,
and nothing of the tree runs; `simulate` says the same; `aido answer` (the human family's CLI)
fails with the code. The core (files, snapshots, simulate) works as in the full build.

The minimal binary is `$AIDO_MINIMAL_BIN`, or `<repo>/target/debug/aido-minimal` (scripts/test
builds it: `cargo build -p aido --no-default-features`, copied there).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import REPO, describe

pytestmark = pytest.mark.anyio

MINIMAL_BIN = Path(os.environ.get("AIDO_MINIMAL_BIN") or REPO / "target" / "debug" / "aido-minimal")

# One primitive of each optional family, with arguments that parse.
FAMILIES = {
    "prim-vm": ("vm_start", {}),
    "prim-process": ("run_command", {"argv": ["touch", "ran.txt"]}),
    "prim-memory": ("remember", {"text": "the build is minimal"}),
    "prim-search": ("search_code", {"patterns": ["hello"]}),
    "prim-human": ("ask_human", {"question": "which file?"}),
    "prim-net": ("dns_lookup", {"host": "example.com"}),
    "prim-desktop": ("get_focused_window", {}),
    "prim-script": ("define_function", {"name": "f", "source": "1"}),
    "prim-artifact": ("artifact_create", {"files": [{"name": "index.html", "content": "x"}]}),
}
ALL_OF = {
    "prim-vm": {"vm_start", "vm_list", "vm_click", "computer", "computer_toolset", "vm_pool_status"},
    "prim-process": {
        "run_command",
        "check_handle",
        "write_stdin",
        "stop_handle",
        "list_handles",
        "ssh_exec",
        "run_in_sandbox",
        "run_container_group",
        "list_processes",
        "subscribe",
        "unsubscribe",
        "list_subscriptions",
        "watch_and_react",
    },
    "prim-memory": {"remember", "recall", "forget", "list_memory"},
    "prim-search": {"search_code", "search_and_read"},
    "prim-human": {"ask_human", "confirm", "ask_multiple_choice", "check_answer"},
    "prim-net": {"http_request", "fetch_url", "port_check", "dns_lookup", "llm_call", "ollama_chat", "ollama_api"},
    "prim-desktop": {"screenshot", "click", "type_text", "press_key", "get_window_tree", "set_clipboard", "send_notification", "desktop_computer", "desktop_computer_toolset", "find_text", "wait_for_text", "click_text"},
    "prim-script": {"define_function", "call_function", "list_functions", "delete_function", "define_primitive", "call_primitive", "list_custom_primitives", "delete_primitive"},
    "prim-artifact": {"artifact_create", "artifact_list", "artifact_serve", "artifact_save", "artifact_stop", "artifact_destroy"},
}
CORE = {"read_file", "write_file", "edit_file", "simulate", "pipeline", "rewind", "diff", "read_logs"}


@pytest.fixture
def minimal(world):
    if not (MINIMAL_BIN.is_file() and os.access(MINIMAL_BIN, os.X_OK)):
        pytest.fail(
            f"the minimal aido binary is missing at {MINIMAL_BIN}: build it with "
            "`cargo build -p aido --no-default-features` and copy target/debug/aido there "
            "(scripts/test does), or point AIDO_MINIMAL_BIN at it",
            pytrace=False,
        )
    world.bin = MINIMAL_BIN
    return world


async def test_the_full_build_lists_every_family(world):
    async with world.session() as s:
        names = {t.name for t in (await s.session.list_tools()).tools}
    for family, tools in ALL_OF.items():
        assert tools <= names, family
    assert CORE <= names


async def test_a_minimal_build_lists_no_tool_of_a_missing_family(minimal):
    async with minimal.session() as s:
        names = {t.name for t in (await s.session.list_tools()).tools}
    for family, tools in ALL_OF.items():
        assert not (tools & names), f"{family}: {tools & names}"
    assert CORE <= names, CORE - names
    assert not any(n.startswith("vm_") for n in names), names


async def test_a_missing_family_is_refused_with_a_code_and_journaled(minimal):
    async with minimal.session() as s:
        for family, (name, args) in FAMILIES.items():
            e = await s.err(name, args, "primitive_not_built")
            assert family in e["message"], e
        # Inside a pipeline: the whole tree is refused before its first step runs.
        e = await s.err(
            "pipeline",
            {
                "steps": [
                    {"type": "write_file", "path": "first.txt", "content": "x"},
                    {"type": "run_command", "argv": ["true"]},
                ]
            },
            "primitive_not_built",
        )
        assert not (minimal.home / "first.txt").exists(), "nothing of a refused tree runs"
        assert not (minimal.home / "ran.txt").exists()
        # simulate answers the same, and the core still works.
        sim = await s.ok("simulate", {"action": {"type": "remember", "text": "x"}})
        assert "primitive_not_built" in json.dumps(sim), sim
        await s.ok("write_file", {"path": "core.txt", "content": "still here\n"})
        assert (await s.ok("read_file", {"path": "core.txt"}))["content"] == "still here\n"
    # Every refusal is in the journal, with its code.
    sessions = minimal.run_json("replay", "sessions", "--json")
    shown = "".join(minimal.run("replay", "show", x["id"], "--json").stdout for x in sessions)
    assert shown.count("primitive_not_built") >= len(FAMILIES) + 1, shown[-2000:]
    for name, _ in FAMILIES.values():
        assert name in shown, name
    proc = minimal.run("replay", "verify", sessions[0]["id"])
    assert proc.returncode == 0, describe(proc)


def test_the_cli_of_a_missing_family_fails_with_the_code(minimal):
    for args, feature in ((("answer", "--list"), "prim-human"), (("desktop", "doctor"), "prim-desktop")):
        proc = minimal.run(*args)
        assert proc.returncode != 0, describe(proc)
        assert "[primitive_not_built]" in proc.stderr and feature in proc.stderr, describe(proc)
