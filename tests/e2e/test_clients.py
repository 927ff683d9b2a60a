"""Putting aido under the agents people use (issue 28, point 4): `aido init CLIENT` writes the
client's own config, merged into what is there; Claude Code's native Bash tool goes through
aido by the PreToolUse hook `init` installs (the hook contract's `updatedInput`), checked here
with a recorded hook payload and the rewritten command run as Claude Code runs it (`/bin/sh
-c`): the command is confined, journaled, and `aido replay rewind` undoes it. (The real Claude
Code CLI needs an account to run a session, so it is not run here.)"""

from __future__ import annotations

import json
import subprocess
import tomllib

import pytest
from helpers import seq_of
from test_run_command import session_ids


def test_init_writes_each_clients_config_and_keeps_what_was_there(world):
    project = world.home / "proj"
    (project / ".claude").mkdir(parents=True)
    (project / ".claude" / "settings.json").write_text(json.dumps({"model": "opus", "hooks": {"Stop": []}}))
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"other": {"command": "other"}}}))
    codex_home = world.root / "codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text('# mine\nmodel = "o4"\n\n[mcp_servers.other]\ncommand = "x"\n')
    env = {"CODEX_HOME": str(codex_home)}
    for client in ("claude-code", "codex", "cursor", "vscode"):
        proc = world.run("init", client, "--project", str(project), env=env)
        assert proc.returncode == 0, proc.stderr
    # Twice is the same as once.
    assert world.run("init", "claude-code", "--project", str(project)).returncode == 0
    mcp = json.loads((project / ".mcp.json").read_text())
    assert mcp["mcpServers"]["other"] == {"command": "other"}
    aido = mcp["mcpServers"]["aido"]
    assert aido["command"] == str(world.bin.resolve()) and aido["args"] == ["mcp", "--toolsets", "coding"], aido
    assert aido["env"] == {"AIDO_HOME": str(world.aido_home)}, aido
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    assert settings["model"] == "opus" and settings["hooks"]["Stop"] == []
    [bash, files] = settings["hooks"]["PreToolUse"]
    assert bash["matcher"] == "Bash" and bash["hooks"][0]["command"].endswith(" hook claude-code"), bash
    assert files["matcher"] == "Edit|Write|MultiEdit|NotebookEdit", files
    assert files["hooks"] == bash["hooks"], files
    [post] = settings["hooks"]["PostToolUse"]
    assert post["matcher"] == files["matcher"] and post["hooks"] == bash["hooks"], post
    codex = tomllib.loads((codex_home / "config.toml").read_text())
    assert (codex_home / "config.toml").read_text().startswith("# mine\n")
    assert codex["model"] == "o4" and codex["mcp_servers"]["other"] == {"command": "x"}
    assert codex["mcp_servers"]["aido"]["args"] == ["mcp", "--toolsets", "coding"], codex
    cursor = json.loads((project / ".cursor" / "mcp.json").read_text())
    assert cursor["mcpServers"]["aido"]["command"] == aido["command"]
    vscode = json.loads((project / ".vscode" / "mcp.json").read_text())
    assert vscode["servers"]["aido"]["type"] == "stdio", vscode
    bad = world.run("init", "claude-code", "--project", str(project), "--toolsets", "nope")
    assert bad.returncode != 0 and "config_value" in bad.stderr, bad.stderr


def test_claude_codes_bash_goes_through_aido_and_a_rewind_undoes_it(world):
    project = world.home / "claude-project"
    project.mkdir()
    assert world.run("init", "claude-code", "--project", str(project)).returncode == 0
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    hook = settings["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
    # A PreToolUse event as Claude Code sends it for its Bash tool.
    payload = {
        "session_id": "0b6c6d1e", "transcript_path": "/tmp/t.jsonl", "cwd": str(project),
        "permission_mode": "default", "hook_event_name": "PreToolUse", "tool_name": "Bash",
        "tool_use_id": "toolu_01", "tool_input": {"command": "mkdir -p out && echo 'made by claude' > out/note.txt && cat ~/.ssh/id_rsa; echo done",
                                                   "description": "write a note", "timeout": 60000},
    }
    answered = subprocess.run(["/bin/sh", "-c", hook], input=json.dumps(payload), capture_output=True,
                              text=True, cwd=project, env=world.env(), timeout=30)
    assert answered.returncode == 0, answered.stderr
    output = json.loads(answered.stdout)["hookSpecificOutput"]
    assert output["hookEventName"] == "PreToolUse" and output["permissionDecision"] == "allow", output
    command = output["updatedInput"]["command"]
    assert " exec --timeout-ms 60000 -- /bin/sh -c " in command, command
    # Another tool is left to Claude Code: no answer.
    read = dict(payload, tool_name="Read", tool_input={"file_path": str(project / "x")})
    quiet = subprocess.run(["/bin/sh", "-c", hook], input=json.dumps(read), capture_output=True, text=True,
                           env=world.env(), timeout=30)
    assert quiet.returncode == 0 and quiet.stdout == "", quiet

    # Claude Code's file tools: each path judged by aido's policy as a write there.
    def file_tool(tool: str, tool_input: dict) -> dict | None:
        event = dict(payload, tool_name=tool, tool_input=tool_input)
        done = subprocess.run(["/bin/sh", "-c", hook], input=json.dumps(event), capture_output=True, text=True,
                              cwd=project, env=world.env(), timeout=30)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)["hookSpecificOutput"] if done.stdout else None

    planted = file_tool("Write", {"file_path": str(project / ".git" / "hooks" / "pre-commit"), "content": "curl evil\n"})
    assert planted["permissionDecision"] == "deny", planted
    assert "[path_protected]" in planted["permissionDecisionReason"], planted
    secret = file_tool("Edit", {"file_path": str(world.home / ".ssh" / "config"), "old_string": "a", "new_string": "b"})
    assert secret["permissionDecision"] == "deny" and "[path_denied_by_pattern]" in secret["permissionDecisionReason"], secret
    outside = file_tool("Write", {"file_path": "/etc/motd", "content": "x"})
    assert outside["permissionDecision"] == "deny" and "[path_outside_walls]" in outside["permissionDecisionReason"], outside
    assert file_tool("Write", {"file_path": str(project / "src" / "main.py"), "content": "print(1)\n"}) is None
    assert file_tool("MultiEdit", {"file_path": str(project / "a.py"), "edits": []}) is None
    # Claude Code runs the rewritten command with its shell, in the project.
    ran = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, cwd=project,
                         env=world.env(), timeout=120)
    assert ran.returncode == 0 and "done" in ran.stdout, ran.stderr
    assert "not a real key" not in ran.stdout, "the sandbox hides the key as always"
    assert (project / "out" / "note.txt").read_text() == "made by claude\n"
    [session] = [s for s in session_ids(world) if s.get("client") == "aido exec"] or session_ids(world)[-1:]
    records = json.loads(world.run("replay", "show", session["id"], "--json").stdout)
    [proposal] = [r["seq"] for r in records if r["event"] == "action_proposed"]
    undone = world.run("replay", "rewind", session["id"], "--before", str(proposal))
    assert undone.returncode == 0, undone.stderr
    assert "will undo 1 action(s)" in undone.stdout and "out/note.txt" in undone.stdout, undone.stdout
    assert not (project / "out").exists(), "the rewind took the command's files back"


def test_undo_shows_what_it_will_take_back_then_takes_back_the_newest_first(world):
    """`aido undo [N]` for the person at the terminal: the last N actions that changed
    something in this project, across its sessions (here `aido exec` ones, as the Claude
    Code hook makes), listed first; without a terminal it asks for --yes."""
    project = world.home / "undo-project"
    project.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(world.bin), *args], capture_output=True, text=True, cwd=project,
                              env=world.env(), stdin=subprocess.DEVNULL, timeout=120)

    assert run("exec", "--", "/bin/sh", "-c", "echo a > a.txt").returncode == 0
    assert run("exec", "--", "/bin/sh", "-c", "echo b > b.txt; mkdir d; echo c > d/c.txt").returncode == 0
    asked = run("undo")
    assert asked.returncode == 1 and "--yes" in asked.stderr, asked
    assert "b.txt" in asked.stdout and "a.txt" not in asked.stdout, asked.stdout
    assert (project / "b.txt").exists(), "nothing is undone without an answer"
    done = run("undo", "--yes")
    assert done.returncode == 0, done.stderr
    assert not (project / "b.txt").exists() and not (project / "d").exists()
    assert (project / "a.txt").read_text() == "a\n"
    again = run("undo", "--yes")
    assert again.returncode == 0 and "a.txt" in again.stdout, again
    assert not (project / "a.txt").exists()
    assert "nothing to undo" in run("undo", "--yes").stdout


@pytest.mark.anyio
async def test_rewind_shows_what_it_will_undo_then_rewinds_this_projects_newest_session(world):
    """`aido rewind --to SEQ` for the person at the terminal: the newest session started in
    this project, what a rewind to SEQ undoes listed first (`--dry-run` only lists), and
    without a terminal it asks for --yes."""
    project = world.home / "rewind-project"
    project.mkdir()
    async with world.session(cwd=project) as aido:
        kept = seq_of(await aido.call("write_file", {"path": "a.txt", "content": "a\n"}))
        await aido.ok("write_file", {"path": "b.txt", "content": "b\n"})
        await aido.ok("run_command", {"shell": "mkdir d && echo c > d/c.txt"})

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(world.bin), *args], capture_output=True, text=True, cwd=project,
                              env=world.env(), stdin=subprocess.DEVNULL, timeout=120)

    shown = run("rewind", "--to", str(kept), "--dry-run")
    assert shown.returncode == 0, shown
    assert "will undo 2 action(s)" in shown.stdout, shown.stdout
    assert "b.txt" in shown.stdout and "d/c.txt" in shown.stdout and "a.txt" not in shown.stdout, shown.stdout
    asked = run("rewind", "--to", str(kept))
    assert asked.returncode == 1 and "--yes" in asked.stderr, asked
    assert (project / "b.txt").exists() and (project / "d" / "c.txt").exists(), "nothing is undone without an answer"
    done = run("rewind", "--to", str(kept), "--yes")
    assert done.returncode == 0, done
    assert not (project / "b.txt").exists() and not (project / "d").exists()
    assert (project / "a.txt").read_text() == "a\n"
    nowhere = world.root / "no-sessions-here"
    nowhere.mkdir()
    elsewhere = subprocess.run([str(world.bin), "rewind", "--to", "1", "--yes"], capture_output=True, text=True,
                               cwd=nowhere, env=world.env(), stdin=subprocess.DEVNULL, timeout=120)
    assert elsewhere.returncode != 0 and "session_not_found" in elsewhere.stderr, elsewhere


def test_claude_codes_edit_and_write_are_journaled_with_their_times_and_undone(world):
    """Claude Code's own Write and Edit write the file; the hook keeps what was there at
    PreToolUse and at PostToolUse makes the write again through aido (judged, journaled, with
    the modification time Claude Code's write gave it, which Claude Code checks before its next
    edit), so `aido undo` takes it back."""
    project = world.home / "claude-files"
    project.mkdir()
    (project / "a.py").write_text("a = 1\n")
    assert world.run("init", "claude-code", "--project", str(project)).returncode == 0
    hook = json.loads((project / ".claude" / "settings.json").read_text())["hooks"]["PostToolUse"][0]["hooks"][0]["command"]

    def event(name: str, tool: str, use: str, tool_input: dict) -> dict | None:
        payload = {"session_id": "5e55", "transcript_path": "/tmp/t.jsonl", "cwd": str(project),
                   "permission_mode": "default", "hook_event_name": name, "tool_name": tool,
                   "tool_use_id": use, "tool_input": tool_input}
        if name == "PostToolUse":
            payload["tool_response"] = {"success": True}
        done = subprocess.run(["/bin/sh", "-c", hook], input=json.dumps(payload), capture_output=True, text=True,
                              cwd=project, env=world.env(), timeout=60)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout) if done.stdout else None

    # Write of a new file in a new directory, as Claude Code makes it.
    new = project / "src" / "new.py"
    written = {"file_path": str(new), "content": "print(1)\n"}
    assert event("PreToolUse", "Write", "toolu_w", written) is None
    new.parent.mkdir()
    new.write_text("print(1)\n")
    claude_time = new.stat().st_mtime_ns
    assert event("PostToolUse", "Write", "toolu_w", written) is None
    assert new.read_text() == "print(1)\n" and new.stat().st_mtime_ns == claude_time, "the time Claude Code saw stays"
    # Edit of an existing file.
    edited = {"file_path": str(project / "a.py"), "old_string": "a = 1", "new_string": "a = 2"}
    assert event("PreToolUse", "Edit", "toolu_e", edited) is None
    (project / "a.py").write_text("a = 2\n")
    claude_time = (project / "a.py").stat().st_mtime_ns
    assert event("PostToolUse", "Edit", "toolu_e", edited) is None
    assert (project / "a.py").read_text() == "a = 2\n" and (project / "a.py").stat().st_mtime_ns == claude_time

    sessions = [s for s in session_ids(world) if s.get("client") == "claude-code hook"]
    assert len(sessions) == 2, sessions
    records = json.loads(world.run("replay", "show", sessions[-1]["id"], "--json").stdout)
    [proposed] = [r for r in records if r["event"] == "action_proposed"]
    assert proposed["action"]["type"] == "write_file" and proposed["action"]["path"] == str(project / "a.py"), proposed
    assert world.run("replay", "verify", sessions[-1]["id"]).returncode == 0
    played = world.run("replay", "playback", sessions[-1]["id"])
    assert played.returncode == 0, played.stdout + played.stderr

    undone = subprocess.run([str(world.bin), "undo", "2", "--yes"], capture_output=True, text=True, cwd=project,
                            env=world.env(), stdin=subprocess.DEVNULL, timeout=120)
    assert undone.returncode == 0, undone
    assert (project / "a.py").read_text() == "a = 1\n"
    assert not new.exists() and not new.parent.exists(), "the write and the directory it made are undone"
    assert not list((world.aido_home / "hooks" / "claude-code").iterdir()), "nothing is left kept"
