"""`aido mcp` driven by the MCP Inspector's CLI mode (a second, independent MCP client).

The inspector is installed by scripts/test into tests/node_modules and run with
`npx --no-install` from tests/, so no network is needed here. How it is used:

    npx --no-install @modelcontextprotocol/inspector --cli --format json -q \
        -e HOME=... -e AIDO_HOME=... <aido> mcp --method tools/call --tool-name NAME \
        (--tool-arg key=value ... | --tool-args-json '{...}')

`-e` sets the server's environment (over the inspector's default set); `--tool-arg` coerces
values that look like numbers or booleans, `--tool-args-json` passes them verbatim. With
`--format json` stdout is one object, `{"result": ...}`; a result with isError makes the
inspector exit 5 (still printing the result), and other failures print `{"error": ...}`.
aido's own `--config` is not passed (the inspector would take it as its own option); the
tests that need a config put it in $AIDO_HOME/config.toml.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest

from conftest import REPO

TESTS_DIR = REPO / "tests"
INSPECTOR_PKG = TESTS_DIR / "node_modules" / "@modelcontextprotocol" / "inspector" / "package.json"
INSPECTOR_VERSION = "2.12.0"  # keep in step with scripts/test


@pytest.fixture(scope="module")
def npx() -> str:
    exe = shutil.which("npx")
    if exe is None:
        pytest.fail("npx is not on PATH (node and npm are needed for the inspector tests)", pytrace=False)
    if not INSPECTOR_PKG.is_file():
        pytest.fail(
            f"the MCP inspector is not installed in {TESTS_DIR / 'node_modules'}: run scripts/test, or "
            f"`npm install --prefix tests --no-save @modelcontextprotocol/inspector@{INSPECTOR_VERSION}`",
            pytrace=False,
        )
    version = json.loads(INSPECTOR_PKG.read_text())["version"]
    assert version == INSPECTOR_VERSION, f"tests/node_modules holds inspector {version}, expected {INSPECTOR_VERSION}"
    return exe


def inspect(npx: str, world: Any, *method_args: str) -> tuple[int, Any, subprocess.CompletedProcess[str]]:
    """Run one inspector CLI call against `aido mcp`; return (exit code, parsed stdout, process)."""
    inspector_home = world.root / "inspector-home"  # the inspector may keep state under its HOME
    inspector_home.mkdir(exist_ok=True)
    argv = [
        npx, "--no-install", "@modelcontextprotocol/inspector", "--cli", "--format", "json", "-q",
        "-e", f"HOME={world.home}", "-e", f"AIDO_HOME={world.aido_home}",
        str(world.bin), "mcp", *method_args,
    ]  # fmt: skip
    env = {
        "PATH": world.env()["PATH"],
        "HOME": str(inspector_home),
        "npm_config_update_notifier": "false",
        "npm_config_offline": "true",
        "NO_COLOR": "1",
    }
    proc = subprocess.run(
        argv, cwd=TESTS_DIR, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120
    )
    try:
        parsed = json.loads(proc.stdout) if proc.stdout.strip() else None
    except json.JSONDecodeError:
        parsed = None
    return proc.returncode, parsed, proc


def show(proc: subprocess.CompletedProcess[str]) -> str:
    return f"$ {' '.join(proc.args)}\nexit {proc.returncode}\nstdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"


def test_inspector_lists_tools(npx, world):
    rc, out, proc = inspect(npx, world, "--method", "tools/list")
    assert rc == 0 and out is not None, show(proc)
    tools = {t["name"]: t for t in out["result"]["tools"]}
    assert "write_file" in tools, show(proc)
    assert tools["write_file"]["inputSchema"]["type"] == "object"
    assert tools["read_file"]["annotations"]["readOnlyHint"] is True
    assert tools["move_to_trash"]["annotations"]["destructiveHint"] is True


def test_inspector_sees_the_lists_within_their_token_budgets(npx, world):
    """Issue 28, points 1 and 7: the whole list under 60,000 tokens and the coding profile
    (from `[mcp]` in AIDO_HOME's config) under 8,000, as the inspector receives them."""
    sizes = {}
    for profile in ("all", "coding"):
        (world.aido_home / "config.toml").write_text(f'[mcp]\ntoolsets = ["{profile}"]\n')
        rc, out, proc = inspect(npx, world, "--method", "tools/list")
        assert rc == 0, proc.stderr
        tools = out["result"]["tools"]
        sizes[profile] = (len(tools), len(json.dumps(tools)) // 4)
    print("tools and tokens per profile (inspector):", sizes)
    assert sizes["all"][1] < 60_000 and sizes["coding"][1] < 8_000, sizes
    assert sizes["coding"][0] <= 35 < sizes["all"][0], sizes


def test_inspector_write_then_read(npx, world):
    # key=value arguments (plain strings, so no coercion surprises).
    rc, out, proc = inspect(
        npx, world, "--method", "tools/call", "--tool-name", "write_file",
        "--tool-arg", "path=~/from-inspector.txt", "--tool-arg", "content=written by the inspector",
    )  # fmt: skip
    assert rc == 0 and out is not None, show(proc)
    result = out["result"]
    assert result.get("isError") in (False, None), show(proc)
    assert result["structuredContent"]["created"] is True, show(proc)
    target = world.home / "from-inspector.txt"
    assert target.read_text() == "written by the inspector", "HOME came from -e and the file is on disk"

    # JSON arguments, read back through a second server process.
    rc, out, proc = inspect(
        npx, world, "--method", "tools/call", "--tool-name", "read_file",
        "--tool-args-json", json.dumps({"path": "~/from-inspector.txt"}),
    )  # fmt: skip
    assert rc == 0 and out is not None, show(proc)
    result = out["result"]
    assert result["structuredContent"]["content"] == "written by the inspector", show(proc)
    texts = [c["text"] for c in result["content"] if c["type"] == "text"]
    assert "written by the inspector" in "".join(texts), show(proc)
    assert result["_meta"]["aido/seq"] >= 1, show(proc)


def test_inspector_shows_a_denial_as_is_error(npx, world):
    rc, out, proc = inspect(
        npx, world, "--method", "tools/call", "--tool-name", "read_file",
        "--tool-args-json", json.dumps({"path": "~/.ssh/id_rsa"}),
    )  # fmt: skip
    assert rc != 0, f"the inspector exits non-zero on isError\n{show(proc)}"
    assert out is not None, show(proc)
    result = out["result"]
    assert result["isError"] is True, show(proc)
    sc = result["structuredContent"]
    assert sc["code"] == "path_denied_by_pattern" and sc["gate"] == "deny_patterns" and sc["reason"], show(proc)
    assert "not a real key" not in proc.stdout


def test_inspector_honours_config_in_aido_home(npx, world):
    (world.aido_home / "config.toml").write_text('mode = "readonly"\n')
    rc, out, proc = inspect(
        npx, world, "--method", "tools/call", "--tool-name", "write_file",
        "--tool-args-json", json.dumps({"path": "~/ro.txt", "content": "x"}),
    )  # fmt: skip
    assert rc != 0 and out is not None, show(proc)
    assert out["result"]["isError"] is True and out["result"]["structuredContent"]["code"] == "mode_readonly", show(proc)
    assert not (world.home / "ro.txt").exists()


def test_inspector_unknown_tool_fails(npx, world):
    rc, out, proc = inspect(
        npx, world, "--method", "tools/call", "--tool-name", "no_such_tool", "--tool-args-json", "{}"
    )
    assert rc != 0, show(proc)
    assert "result" not in (out or {}), show(proc)


def test_inspector_a_question_without_elicitation_is_answered_with_aido_answer(npx, world):
    # The inspector's CLI declares no elicitation: the question is stored for `aido answer`.
    rc, out, proc = inspect(
        npx, world, "--method", "tools/call", "--tool-name", "confirm",
        "--tool-args-json", json.dumps({"question": "Tag the release?", "timeout_ms": 100}),
    )  # fmt: skip
    assert rc != 0 and out is not None, show(proc)
    sc = out["result"]["structuredContent"]
    assert sc["code"] == "needs_human", show(proc)
    qid = sc["details"]["id"]
    answered = world.run("answer", qid, "yes")
    assert answered.returncode == 0, answered.stderr
    # A third process (another server) collects the answer the CLI wrote.
    rc, out, proc = inspect(
        npx, world, "--method", "tools/call", "--tool-name", "check_answer",
        "--tool-args-json", json.dumps({"id": qid}),
    )  # fmt: skip
    assert rc == 0 and out is not None, show(proc)
    sc = out["result"]["structuredContent"]
    assert sc["approved"] is True and sc["via"] == "aido answer", show(proc)


def test_inspector_renders_a_template_and_diffs_against_text(npx, world):
    rc, out, proc = inspect(
        npx, world, "--method", "tools/call", "--tool-name", "render_template",
        "--tool-args-json", json.dumps({"template": "{{ name | upper }}!", "context": {"name": "aido"}}),
    )  # fmt: skip
    assert rc == 0 and out is not None, show(proc)
    assert out["result"]["structuredContent"]["rendered"] == "AIDO!", show(proc)
    rc, out, proc = inspect(
        npx, world, "--method", "tools/call", "--tool-name", "diff",
        "--tool-args-json", json.dumps({"path": "~/notes.txt", "text": "hello\nthere\n"}),
    )  # fmt: skip
    assert rc == 0 and out is not None, show(proc)
    diff = out["result"]["structuredContent"]["diff"]
    assert "-world\n+there\n" in diff, show(proc)
