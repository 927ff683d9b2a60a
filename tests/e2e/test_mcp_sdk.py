"""`aido mcp` driven by the official MCP Python SDK client over stdio.

Each test starts its own server in a fresh HOME and AIDO_HOME (see conftest.py) and checks
what the server answered and what is on disk afterwards.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import anyio
import blake3
import pytest
from mcp import MCPError, types

from conftest import describe
from helpers import dump, err, eventually, ok, seq_of, text_of

pytestmark = pytest.mark.anyio

ALL_TOOLS = {
    "read_file", "read_files", "write_file", "edit_file", "apply_patch", "patch_set",
    "stat_files", "file_info", "checksum", "move_to_trash", "restore_from_trash", "simulate",
    "policy_check", "pipeline", "try", "if", "assert", "validate", "session_history",
}  # fmt: skip
READ_ONLY_TOOLS = {
    "read_file", "read_files", "stat_files", "file_info", "checksum", "assert", "validate",
    "simulate", "policy_check", "session_history",
}  # fmt: skip
WRITING_TOOLS = {"write_file", "edit_file", "apply_patch", "patch_set", "restore_from_trash", "move_to_trash"}
ZEROS = "0" * 64


def verdict_name(v: Any) -> str:
    """A leaf's verdict, whether given as "deny" or as {"verdict": "deny", ...}."""
    return v["verdict"] if isinstance(v, dict) else v


# ---------------------------------------------------------------------------------------------
# The handshake and the tool list
# ---------------------------------------------------------------------------------------------


async def test_initialize_negotiates_2025_11_25_and_names_aido(world):
    async with world.session() as s:
        assert s.init.protocol_version == "2025-11-25"
        assert s.init.server_info.name == "aido"
        assert s.init.server_info.version, "serverInfo has a version"
        assert s.init.capabilities.tools is not None, "the server offers tools"
        assert s.init.capabilities.logging is not None, "the server declares logging (it sends notifications/message)"
        await s.session.send_ping()


async def test_tools_list_has_every_tool_with_object_schemas_and_hints(world):
    async with world.session() as s:
        listed = await s.session.list_tools()
        tools = {t.name: t for t in listed.tools}
        assert ALL_TOOLS <= set(tools), f"missing tools: {sorted(ALL_TOOLS - set(tools))}"
        for name in ALL_TOOLS:
            t = tools[name]
            assert t.description, f"{name} has a description"
            assert t.input_schema.get("type") == "object", f"{name} input schema is an object: {t.input_schema}"
            assert t.annotations is not None, f"{name} has annotations"
        # Required arguments are declared, so a client can build calls from the schema.
        assert "path" in tools["read_file"].input_schema.get("properties", {})
        assert set(tools["write_file"].input_schema.get("required", [])) >= {"path", "content"}
        for name in READ_ONLY_TOOLS:
            assert tools[name].annotations.read_only_hint is True, f"{name} is read-only: {tools[name].annotations}"
        for name in WRITING_TOOLS:
            assert tools[name].annotations.read_only_hint is False, f"{name} writes: {tools[name].annotations}"
        assert tools["move_to_trash"].annotations.destructive_hint is True
        assert tools["read_file"].annotations.destructive_hint is not True


async def test_the_tool_list_fits_an_agents_budget_and_steps_are_checked_by_their_tools_schema(world):
    """Issue 28, point 1: the whole list under 60,000 tokens (bytes / 4), every description
    under 1 KB; a composite names its steps compactly, and a bad step is refused naming its
    path while a good one runs."""
    async with world.session() as s:
        listed = await s.session.list_tools()
        dumped = [t.model_dump(mode="json", exclude_none=True) for t in listed.tools]
        size = len(json.dumps(dumped))
        print(f"tools/list: {len(dumped)} tools, {size} bytes, ~{size // 4} tokens")
        assert size // 4 < 60_000, size
        assert all(len(t.description or "") < 1024 for t in listed.tools)
        pipeline = next(t for t in listed.tools if t.name == "pipeline")
        assert list(pipeline.input_schema["$defs"]) == ["Action"], pipeline.input_schema
        bad = await s.call("pipeline", {"steps": [{"type": "read_file", "path": "~/notes.txt"},
                                                  {"type": "write_file", "path": "~/x.txt"}]})
        refused = err(bad, "invalid_arguments")
        assert "at steps[1]" in refused["message"] and "content" in refused["message"], refused
        good = await s.ok("pipeline", {"steps": [{"type": "write_file", "path": "~/x.txt", "content": "x\n"},
                                                {"type": "read_file", "path": "~/x.txt"}]})
        assert good, good
    assert (world.home / "x.txt").read_text() == "x\n"


# ---------------------------------------------------------------------------------------------
# Files: round trips checked on disk
# ---------------------------------------------------------------------------------------------


async def test_write_read_edit_round_trip_on_disk(world):
    target = world.home / "docs" / "plan.md"
    async with world.session() as s:
        r = await s.call("write_file", {"path": "~/docs/plan.md", "content": "alpha\nbeta\ngamma\n"})
        out = ok(r)
        seq1 = seq_of(r)
        assert out["bytes"] == len(b"alpha\nbeta\ngamma\n")
        assert out["created"] is True
        assert Path(out["path"]) == target
        assert target.read_text() == "alpha\nbeta\ngamma\n", "the file is on disk (parents created)"

        r = await s.call("read_file", {"path": "docs/plan.md"})  # relative to workdir = HOME
        out = ok(r)
        seq2 = seq_of(r)
        assert out["content"] == "alpha\nbeta\ngamma\n"
        assert out["lines"] == 3
        assert text_of(r) == "alpha\nbeta\ngamma\n", "the text content is the file's text"
        assert seq2 > seq1, "journal seqs grow"

        # A dry run returns a diff and writes nothing.
        out = await s.ok(
            "edit_file", {"path": "~/docs/plan.md", "old_string": "beta", "new_string": "BETA", "dry_run": True}
        )
        assert out["dry_run"] is True and out["replacements"] == 1
        assert "-beta" in out["diff"] and "+BETA" in out["diff"]
        assert target.read_text() == "alpha\nbeta\ngamma\n"

        out = await s.ok("edit_file", {"path": "~/docs/plan.md", "old_string": "beta", "new_string": "BETA"})
        assert out["replacements"] == 1 and out["dry_run"] is False
        assert target.read_text() == "alpha\nBETA\ngamma\n"

        # Overwrite: created is false now.
        out = await s.ok("write_file", {"path": str(target), "content": "v2\n"})
        assert out["created"] is False
        assert target.read_text() == "v2\n"

    # Python changes the file behind the server's back; a new session reads what is there.
    target.write_text("changed by python\n")
    async with world.session() as s:
        assert (await s.ok("read_file", {"path": "~/docs/plan.md"}))["content"] == "changed by python\n"


async def test_edit_failures_leave_the_file_alone(world):
    f = world.home / "dup.txt"
    f.write_text("x = 1\nx = 1\n")
    async with world.session() as s:
        await s.err("edit_file", {"path": "~/dup.txt", "old_string": "nope", "new_string": "y"}, "edit_no_match")
        await s.err("edit_file", {"path": "~/dup.txt", "old_string": "x = 1", "new_string": "y"}, "edit_ambiguous_match")
        assert f.read_text() == "x = 1\nx = 1\n"
        out = await s.ok(
            "edit_file", {"path": "~/dup.txt", "old_string": "x = 1", "new_string": "y = 2", "replace_all": True}
        )
        assert out["replacements"] == 2
        assert f.read_text() == "y = 2\ny = 2\n"
        await s.err("edit_file", {"path": "~/missing.txt", "old_string": "a", "new_string": "b"}, "file_not_found")
        await s.err("read_file", {"path": "~/missing.txt"}, "file_not_found")


async def test_read_window_base64_and_read_files(world):
    blob = bytes(range(256)) * 4
    (world.home / "data.bin").write_bytes(blob)
    async with world.session() as s:
        out = await s.ok("read_file", {"path": "~/lines.txt", "offset": 3, "limit": 2})
        assert "line3" in out["content"] and "line4" in out["content"]
        for absent in ("line1\n", "line2\n", "line5"):
            assert absent not in out["content"], out

        out = await s.ok("read_file", {"path": "~/data.bin", "encoding": "base64"})
        assert base64.b64decode(out["content"]) == blob

        out = await s.ok("read_files", {"paths": ["~/notes.txt", "~/missing.txt"]})
        text = json.dumps(out)
        assert "hello\\nworld\\n" in text, f"the readable file's text is there: {out}"
        assert "file_not_found" in text, f"the missing file fails on its own: {out}"
        # The policy judges every path before anything is read: one denied path refuses all.
        r = await s.call("read_files", {"paths": ["~/notes.txt", "~/.ssh/id_rsa"]})
        err(r, "path_denied_by_pattern")
        assert "not a real key" not in json.dumps(r.model_dump(mode="json"))


async def test_patches_apply_and_patch_set_is_all_or_nothing(world):
    app, cfg = world.home / "src" / "app.py", world.home / "src" / "config.json"
    patch_app = (
        "--- a/src/app.py\n+++ b/src/app.py\n@@ -1,3 +1,3 @@\n"
        " def main():\n-    print('hi')\n+    print('hello')\n     return 0\n"
    )
    patch_cfg = (
        '--- a/src/config.json\n+++ b/src/config.json\n@@ -1 +1 @@\n'
        '-{"name": "demo", "debug": false}\n+{"name": "demo", "debug": true}\n'
    )
    bad_patch = "--- a/src/config.json\n+++ b/src/config.json\n@@ -1 +1 @@\n-no such line\n+x\n"
    before_app, before_cfg = app.read_text(), cfg.read_text()
    async with world.session() as s:
        await s.ok("apply_patch", {"path": "~/src/app.py", "patch": patch_app, "dry_run": True})
        assert app.read_text() == before_app, "dry run writes nothing"

        # The first patch applies, the second does not: neither file changes.
        await s.err(
            "patch_set",
            {"patches": [{"path": "~/src/app.py", "patch": patch_app}, {"path": "~/src/config.json", "patch": bad_patch}]},
            "patch_failed",
        )
        assert app.read_text() == before_app and cfg.read_text() == before_cfg

        await s.ok(
            "patch_set",
            {"patches": [{"path": "~/src/app.py", "patch": patch_app}, {"path": "~/src/config.json", "patch": patch_cfg}]},
        )
        assert "print('hello')" in app.read_text()
        assert json.loads(cfg.read_text())["debug"] is True

        await s.err("apply_patch", {"path": "~/src/app.py", "patch": patch_app}, "patch_failed")  # already applied


async def test_checksum_stat_info_validate(world):
    data = (world.home / "notes.txt").read_bytes()
    (world.home / "bad.json").write_text('{"a": 1,,}\n')
    async with world.session() as s:
        out = await s.ok("checksum", {"path": "~/notes.txt"})
        assert out["algorithm"] == "blake3" and out["digest"] == blake3.blake3(data).hexdigest()
        out = await s.ok("checksum", {"path": "~/notes.txt", "algorithm": "sha256"})
        assert out["digest"] == hashlib.sha256(data).hexdigest()

        out = await s.ok("stat_files", {"paths": ["~/notes.txt", "~/src", "~/nope"]})
        files = out["files"]
        assert len(files) == 3
        assert files[0]["exists"] is True and files[0]["kind"] == "file" and files[0]["size"] == len(data)
        assert files[1]["exists"] is True and files[1]["kind"] in ("dir", "directory")
        assert files[2]["exists"] is False

        out = await s.ok("file_info", {"path": "~/notes.txt"})
        assert out["size"] == len(data)

        await s.ok("validate", {"path": "~/src/config.json", "format": "json"})
        await s.ok("validate", {"path": "~/src/settings.toml", "format": "toml"})
        await s.err("validate", {"path": "~/bad.json", "format": "json"}, "validation_failed")
        await s.err("validate", {"path": "~/src/app.py", "format": "toml"}, "validation_failed")


# ---------------------------------------------------------------------------------------------
# The policy: denials, walls, escapes
# ---------------------------------------------------------------------------------------------


async def test_reading_ssh_key_is_denied_with_gate_code_reason(world):
    async with world.session() as s:
        r = await s.call("read_file", {"path": "~/.ssh/id_rsa"})
        sc = err(r, "path_denied_by_pattern")
        assert sc["gate"] == "deny_patterns"
        assert isinstance(sc.get("reason"), str) and sc["reason"]
        # Every refusal names the setting that decides it, in the structure and the text.
        assert sc["setting"] == "[paths] deny", sc
        assert "(setting: [paths] deny)" in text_of(r), text_of(r)
        assert "not a real key" not in json.dumps(r.model_dump(mode="json")), "the key never leaves the server"
        assert text_of(r), "the error also has a text for the agent"

        sc = await s.err("write_file", {"path": "~/proj/.env", "content": "X=1"}, "path_denied_by_pattern")
        assert (world.home / "proj" / ".env").read_text() == "SECRET=hunter2\n"
        await s.err("write_file", {"path": "~/.ssh/authorized_keys", "content": "ssh-ed25519 AAAA"}, "path_denied_by_pattern")
        assert not (world.home / ".ssh" / "authorized_keys").exists()
        await s.err("move_to_trash", {"path": "~/.ssh"}, "path_denied_by_pattern")
        assert (world.home / ".ssh" / "id_rsa").exists()

        sc = await s.err("read_file", {"path": "/etc/passwd"}, "path_outside_walls")
        assert sc["gate"] == "path_walls" and "[paths] read" in sc["setting"], sc
        await s.err("read_file", {"path": "/etc/shadow"})
        # AIDO_HOME holds the journal: off limits whatever the walls say.
        await s.err("read_file", {"path": str(world.aido_home / "config.toml")}, "path_in_aido_home")
        await s.err("write_file", {"path": str(world.aido_home / "x"), "content": "x"}, "path_in_aido_home")
        assert not (world.aido_home / "x").exists()
        await s.err("read_file", {"path": "~nobody/x"}, "path_invalid")

        # After all that the session still works.
        assert (await s.ok("read_file", {"path": "~/notes.txt"}))["content"] == "hello\nworld\n"


async def test_aido_home_inside_home_is_still_off_limits(world):
    inner = world.home / ".aido"
    inner.mkdir()
    world.aido_home = inner
    async with world.session() as s:
        await s.ok("write_file", {"path": "~/ok.txt", "content": "ok"})
        await s.err("write_file", {"path": "~/.aido/config.toml", "content": "mode = 'normal'"}, "path_in_aido_home")
        await s.err("move_to_trash", {"path": "~/.aido"}, "path_in_aido_home")
    assert not (inner / "config.toml").exists()
    assert inner.is_dir() and any(inner.iterdir()), "the journal lives there"


async def test_path_escapes_are_refused(world):
    before_outside = world.snapshot(world.outside)
    async with world.session() as s:
        for path in ("../outside/secret.txt", "~/../outside/secret.txt", "src/../../outside/secret.txt"):
            sc = await s.err("read_file", {"path": path}, "path_outside_walls")
            assert sc["gate"] == "path_walls", sc
        # Symlinks made by the test: a directory link and a file link pointing outside HOME.
        await s.err("read_file", {"path": "~/link_out/secret.txt"}, "path_outside_walls")
        await s.err("read_file", {"path": "~/secret_link"}, "path_outside_walls")
        await s.err("write_file", {"path": "~/link_out/planted.txt", "content": "x"}, "path_outside_walls")
        await s.err("write_file", {"path": "~/secret_link", "content": "overwritten"}, "path_outside_walls")
        await s.err("edit_file", {"path": "~/secret_link", "old_string": "top", "new_string": "bottom"}, "path_outside_walls")
        await s.err("write_file", {"path": "../outside/new.txt", "content": "x"}, "path_outside_walls")
        await s.err("move_to_trash", {"path": "~/link_out/secret.txt"}, "path_outside_walls")
        # A link planted inside the walls that points inside the walls is fine.
        (world.home / "inner_link").symlink_to(world.home / "notes.txt")
        assert (await s.ok("read_file", {"path": "~/inner_link"}))["content"] == "hello\nworld\n"
    assert world.snapshot(world.outside) == before_outside, "nothing outside HOME changed"
    assert (world.home / "secret_link").is_symlink() and (world.home / "link_out").is_symlink()


async def test_policy_check_reports_verdicts_without_running(world):
    async with world.session() as s:
        out = await s.ok("policy_check", {"action": {"type": "read_file", "path": "~/.ssh/id_rsa"}})
        v = out["verdict"]
        assert v["verdict"] == "deny" and v["code"] == "path_denied_by_pattern" and v["gate"] == "deny_patterns"
        assert v["reason"]
        out = await s.ok("policy_check", {"action": {"type": "write_file", "path": "~/new.txt", "content": "x"}})
        assert out["verdict"]["verdict"] == "allow"
        assert not (world.home / "new.txt").exists()


async def test_readonly_mode_and_disabled_actions(world):
    async with world.session(config='mode = "readonly"\n') as s:
        sc = await s.err("write_file", {"path": "~/new.txt", "content": "x"}, "mode_readonly")
        assert sc["gate"] == "mode"
        await s.err("move_to_trash", {"path": "~/notes.txt"}, "mode_readonly")
        assert (await s.ok("read_file", {"path": "~/notes.txt"}))["content"] == "hello\nworld\n"
    assert not (world.home / "new.txt").exists() and (world.home / "notes.txt").exists()

    async with world.session(config="[actions]\nenabled = { move_to_trash = false }\n") as s:
        sc = await s.err("move_to_trash", {"path": "~/notes.txt"}, "action_disabled")
        assert sc["gate"] == "action_enabled"
        await s.ok("write_file", {"path": "~/new.txt", "content": "x"})
    assert (world.home / "notes.txt").exists() and (world.home / "new.txt").read_text() == "x"


async def test_config_paths_deny_and_workdir(world):
    (world.home / "app" / "secrets").mkdir(parents=True)
    (world.home / "app" / "secrets" / "token").write_text("t0k3n")
    (world.home / "app" / "readme.md").write_text("# app\n")
    config = f'workdir = "{world.home / "app"}"\n[paths]\ndeny = ["**/secrets/**"]\n'
    async with world.session(config=config) as s:
        # Relative paths start at the configured workdir.
        assert (await s.ok("read_file", {"path": "readme.md"}))["content"] == "# app\n"
        await s.err("read_file", {"path": "secrets/token"}, "path_denied_by_pattern")
        await s.ok("write_file", {"path": "out.txt", "content": "o"})
        # The built-in denies still hold next to the configured one.
        await s.err("read_file", {"path": "~/.ssh/id_rsa"}, "path_denied_by_pattern")
    assert (world.home / "app" / "out.txt").read_text() == "o"


async def test_config_toml_in_aido_home_is_loaded(world):
    (world.aido_home / "config.toml").write_text('mode = "readonly"\n')
    async with world.session() as s:
        await s.err("write_file", {"path": "~/new.txt", "content": "x"}, "mode_readonly")
    assert not (world.home / "new.txt").exists()


# ---------------------------------------------------------------------------------------------
# Bad input: the server answers with an error result and keeps serving
# ---------------------------------------------------------------------------------------------


async def test_malformed_arguments_are_invalid_arguments_and_the_server_keeps_serving(world):
    async with world.session() as s:
        cases = [
            ("read_file", {}),  # missing field
            ("read_file", {"path": 7}),  # wrong type
            ("write_file", {"path": "~/x.txt"}),  # missing content
            ("write_file", {"path": "~/x.txt", "content": ["a"]}),
            ("read_file", {"path": "~/notes.txt", "surprise": True}),  # unknown field
            ("read_file", {"path": "~/notes.txt", "encoding": "rot13"}),
            ("checksum", {"path": "~/notes.txt", "algorithm": "md5"}),
            ("pipeline", {"steps": [{"type": "no_such_tool"}]}),
            ("pipeline", {"steps": "not a list"}),
            ("if", {"condition": {"kind": "file_smells", "path": "x"}, "then": {"type": "read_file", "path": "x"}}),
        ]
        for name, args in cases:
            r = await s.call(name, args)
            assert r.is_error is True, f"{name} {args}: {dump(r)}"
            assert r.structured_content["code"] == "invalid_arguments", f"{name} {args}: {dump(r)}"
            assert r.structured_content["message"]
            # ... and the very next call is served normally.
            assert (await s.ok("read_file", {"path": "~/notes.txt"}))["content"] == "hello\nworld\n"
    assert not (world.home / "x.txt").exists()


async def test_unknown_tool_is_a_protocol_error(world):
    async with world.session() as s:
        with pytest.raises(MCPError) as caught:
            await s.call("rm_rf", {"path": "~"})
        assert caught.value.code == types.INVALID_PARAMS, caught.value.error
        assert "unknown_primitive" in json.dumps(caught.value.error.model_dump(mode="json")), caught.value.error
        await s.ok("read_file", {"path": "~/notes.txt"})
    assert (world.home / "notes.txt").exists()


async def test_oversized_arguments_are_refused_and_the_server_keeps_serving(world):
    async with world.session(config="[limits]\nargument_bytes_max = 4096\n") as s:
        sc = await s.err("write_file", {"path": "~/big.txt", "content": "x" * 20_000}, "arguments_too_large")
        assert sc["message"]
        assert not (world.home / "big.txt").exists()
        # A nested pipeline counts too.
        steps = [{"type": "write_file", "path": f"~/p{i}.txt", "content": "y" * 500} for i in range(20)]
        await s.err("pipeline", {"steps": steps}, "arguments_too_large")
        assert not (world.home / "p0.txt").exists()
        out = await s.ok("write_file", {"path": "~/small.txt", "content": "fits"})
        assert out["bytes"] == 4
    assert (world.home / "small.txt").read_text() == "fits"


async def test_binary_file_read_is_refused(world):
    (world.home / "image.bin").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    async with world.session() as s:
        await s.err("read_file", {"path": "~/image.bin"}, "binary_file")
        await s.ok("read_file", {"path": "~/notes.txt"})


async def test_file_bigger_than_read_bytes_max_is_refused(world):
    (world.home / "big.log").write_text("0123456789abcdef\n" * 512)  # 8704 bytes
    (world.home / "small.log").write_text("tiny\n")
    async with world.session(config="[limits]\nread_bytes_max = 4096\n") as s:
        sc = await s.err("read_file", {"path": "~/big.log"}, "file_too_large")
        assert sc["message"]
        assert (await s.ok("read_file", {"path": "~/small.log"}))["content"] == "tiny\n"
        # Hashing streams, so size is no object there.
        out = await s.ok("checksum", {"path": "~/big.log"})
        assert out["digest"] == blake3.blake3((world.home / "big.log").read_bytes()).hexdigest()


# ---------------------------------------------------------------------------------------------
# Composites and simulation
# ---------------------------------------------------------------------------------------------


async def test_pipeline_with_a_denied_step_writes_nothing(world):
    before = world.snapshot()
    async with world.session() as s:
        r = await s.call(
            "pipeline",
            {
                "steps": [
                    {"type": "write_file", "path": "~/step0.txt", "content": "zero"},
                    {"type": "edit_file", "path": "~/notes.txt", "old_string": "hello", "new_string": "bye"},
                    {"type": "read_file", "path": "~/.ssh/id_rsa"},
                ]
            },
        )
        sc = err(r, "path_denied_by_pattern")
        assert sc.get("leaf") == "steps[2]", dump(r)
        assert sc["gate"] == "deny_patterns"
    assert not (world.home / "step0.txt").exists(), "no step ran: the pipeline was judged whole first"
    assert (world.home / "notes.txt").read_text() == "hello\nworld\n"
    assert world.snapshot() == before, "the disk is as it was"


async def test_pipeline_runs_steps_in_order_and_stops_at_a_failure(world):
    async with world.session() as s:
        out = await s.ok(
            "pipeline",
            {
                "steps": [
                    {"type": "write_file", "path": "~/a.txt", "content": "A\n"},
                    {"type": "edit_file", "path": "~/a.txt", "old_string": "A", "new_string": "AA"},
                    {"type": "read_file", "path": "~/a.txt"},
                ]
            },
        )
        assert len(out["steps"]) == 3
        assert out["steps"][2]["output"]["content"] == "AA\n", out["steps"]
        assert (world.home / "a.txt").read_text() == "AA\n"

        sc = await s.err(
            "pipeline",
            {
                "steps": [
                    {"type": "write_file", "path": "~/b.txt", "content": "B"},
                    {"type": "edit_file", "path": "~/b.txt", "old_string": "zzz", "new_string": "y"},
                    {"type": "write_file", "path": "~/c.txt", "content": "C"},
                ]
            },
            "edit_no_match",
        )
        # The error shape names the failing leaf at the top level, as a policy denial does.
        assert sc.get("leaf") == "steps[1]", sc
    assert (world.home / "b.txt").read_text() == "B", "the step before the failure ran"
    assert not (world.home / "c.txt").exists(), "the step after the failure did not"


async def test_try_if_assert(world):
    async with world.session() as s:
        await s.ok(
            "try",
            {
                "action": {"type": "read_file", "path": "~/missing.txt"},
                "fallback": {"type": "write_file", "path": "~/fallback.txt", "content": "fb"},
            },
        )
        assert (world.home / "fallback.txt").read_text() == "fb"

        await s.ok(
            "if",
            {
                "condition": {"kind": "file_contains", "path": "~/notes.txt", "text": "world"},
                "then": {"type": "write_file", "path": "~/then.txt", "content": "t"},
                "else": {"type": "write_file", "path": "~/else.txt", "content": "e"},
            },
        )
        assert (world.home / "then.txt").exists() and not (world.home / "else.txt").exists()

        await s.ok(
            "if",
            {
                "condition": {"kind": "not", "condition": {"kind": "file_exists", "path": "~/nope"}},
                "then": {"type": "write_file", "path": "~/then2.txt", "content": "t"},
            },
        )
        assert (world.home / "then2.txt").exists()

        digest = blake3.blake3((world.home / "notes.txt").read_bytes()).hexdigest()
        await s.ok("assert", {"condition": {"kind": "checksum_equals", "path": "~/notes.txt", "digest": digest}})
        await s.ok(
            "assert",
            {"condition": {"kind": "all", "conditions": [
                {"kind": "file_exists", "path": "~/notes.txt"},
                {"kind": "any", "conditions": [{"kind": "file_exists", "path": "~/nope"}, {"kind": "file_exists", "path": "~/src"}]},
            ]}},
        )  # fmt: skip
        sc = await s.err(
            "assert",
            {"condition": {"kind": "file_contains", "path": "~/notes.txt", "text": "absent"}, "message": "needs absent"},
            "assertion_failed",
        )
        assert "needs absent" in sc["message"] or "needs absent" in json.dumps(sc)
        # A condition is a read the policy judges like any other.
        await s.err(
            "if",
            {
                "condition": {"kind": "file_contains", "path": "~/.ssh/id_rsa", "text": "KEY"},
                "then": {"type": "write_file", "path": "~/leak.txt", "content": "it has KEY"},
            },
            "path_denied_by_pattern",
        )
    assert not (world.home / "leak.txt").exists()


async def test_simulate_mutates_nothing(world):
    (world.home / "old.txt").write_text("old\n")
    before = world.snapshot()
    action = {
        "type": "pipeline",
        "steps": [
            {"type": "write_file", "path": "~/sim/new.txt", "content": "new"},
            {"type": "edit_file", "path": "~/notes.txt", "old_string": "hello", "new_string": "bye"},
            {"type": "move_to_trash", "path": "~/old.txt"},
            {"type": "read_file", "path": "~/lines.txt"},
        ],
    }
    async with world.session() as s:
        out = await s.ok("simulate", {"action": action})
        assert out["verdict"]["verdict"] == "allow"
        assert out["would_execute"] is True
        leaves = out["leaves"]
        assert [leaf["primitive"] for leaf in leaves] == ["write_file", "edit_file", "move_to_trash", "read_file"]
        assert [leaf["leaf"] for leaf in leaves] == ["steps[0]", "steps[1]", "steps[2]", "steps[3]"]
        assert all(leaf["would_execute"] is True for leaf in leaves), leaves
        assert any("sim/new.txt" in w for w in leaves[0]["writes"]), leaves[0]
        assert any("old.txt" in d for d in leaves[2]["deletes"]), leaves[2]
        assert any("lines.txt" in r for r in leaves[3]["reads"]), leaves[3]

        # A denied tree simulates to a denial naming the leaf, and still changes nothing.
        denied = {"type": "pipeline", "steps": [action["steps"][0], {"type": "read_file", "path": "~/.ssh/id_rsa"}]}
        out = await s.ok("simulate", {"action": denied})
        assert out["verdict"]["verdict"] == "deny"
        assert out["would_execute"] is False
        assert verdict_name(out["leaves"][0]["verdict"]) == "allow", out["leaves"]
        assert verdict_name(out["leaves"][1]["verdict"]) == "deny", out["leaves"]
    assert world.snapshot() == before, "simulate changed the disk"


# ---------------------------------------------------------------------------------------------
# The trash
# ---------------------------------------------------------------------------------------------


async def test_move_to_trash_and_restore_round_trip(world):
    doc = world.home / "my doc.txt"
    doc.write_text("keep me\n")
    trash = world.home / ".local" / "share" / "Trash"
    async with world.session() as s:
        out = await s.ok("move_to_trash", {"path": "~/my doc.txt"})
        assert not doc.exists(), "the file left its place"
        trashed = Path(out["trashed_to"])
        assert trashed.parent == trash / "files", out
        assert trashed.read_text() == "keep me\n"
        infos = list((trash / "info").glob("*.trashinfo"))
        assert [i.name for i in infos] == [trashed.name + ".trashinfo"], infos
        info = infos[0].read_text()
        lines = info.splitlines()
        assert lines[0] == "[Trash Info]", info
        path_line = next(l for l in lines if l.startswith("Path="))
        # The freedesktop spec: Path is the absolute original path, URL-escaped.
        assert path_line == "Path=" + str(doc).replace(" ", "%20"), info
        date_line = next(l for l in lines if l.startswith("DeletionDate="))
        assert re.fullmatch(r"DeletionDate=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", date_line), info

        await s.err("move_to_trash", {"path": "~/my doc.txt"}, "file_not_found")

        out = await s.ok("restore_from_trash", {"path": "~/my doc.txt"})
        assert doc.read_text() == "keep me\n", "the file is back with its contents"
        assert not trashed.exists()
        assert list((trash / "info").glob("*.trashinfo")) == []

        # A directory goes and comes back whole.
        out = await s.ok("move_to_trash", {"path": "~/src"})
        assert not (world.home / "src").exists()
        # Restoring over something that exists is refused and changes nothing.
        (world.home / "src").mkdir()
        await s.err("restore_from_trash", {"path": "~/src"})
        assert list((world.home / "src").iterdir()) == []
        (world.home / "src").rmdir()
        await s.ok("restore_from_trash", {"path": "~/src"})
        assert (world.home / "src" / "app.py").read_text().startswith("def main():")


async def test_a_link_goes_to_the_trash_as_a_link_never_its_target(world):
    """move_to_trash of a symbolic link takes the link (as `rm` and `mv` do); what it points
    at stays, also when it leads out of the walls; a rewind puts the link back."""
    (world.home / "real.txt").write_text("stays\n")
    (world.home / "alias.txt").symlink_to("real.txt")
    (world.home / "away").symlink_to(str(world.outside / "secret.txt"))
    before = world.snapshot()
    async with world.session() as s:
        trashed = await s.call("move_to_trash", {"path": "~/alias.txt"})
        out = ok(trashed)
        assert not os.path.lexists(world.home / "alias.txt")
        assert (world.home / "real.txt").read_text() == "stays\n"
        assert Path(out["trashed_to"]).is_symlink(), out
        await s.ok("move_to_trash", {"path": "~/away"})
        assert (world.outside / "secret.txt").exists(), "nothing outside the walls moved"
        await s.ok("rewind", {"before_seq": seq_of(trashed)})
        # Everything outside the trash is as it was (the trash keeps its .trashinfo files: a
        # rewind does not journal them yet).
        after = {k: v for k, v in world.snapshot().items() if not k.startswith(".local")}
        assert after == before
        assert list((world.home / ".local" / "share" / "Trash" / "files").iterdir()) == []


# ---------------------------------------------------------------------------------------------
# Confirmation by elicitation
# ---------------------------------------------------------------------------------------------


def answering(action: str, content: dict[str, Any] | None = None):
    asked: list[Any] = []

    async def callback(context, params):
        asked.append(params)
        return types.ElicitResult(action=action, content=content)

    return callback, asked


async def test_confirm_mode_accepted_runs(world):
    callback, asked = answering("accept", {"approve": True})
    async with world.session(config='mode = "confirm"\n', elicitation_callback=callback) as s:
        out = await s.ok("write_file", {"path": "~/approved.txt", "content": "yes"})
        assert out["created"] is True
        assert len(asked) == 1
        params = asked[0]
        assert getattr(params, "mode", "form") == "form"
        assert "write_file" in params.message, params.message
        schema = params.requested_schema
        if hasattr(schema, "model_dump"):
            schema = schema.model_dump(by_alias=True, exclude_none=True, mode="json")
        assert "approve" in schema.get("properties", {}), schema
        # Reads need no confirmation.
        await s.ok("read_file", {"path": "~/notes.txt"})
        assert len(asked) == 1
    assert (world.home / "approved.txt").read_text() == "yes"


@pytest.mark.parametrize(
    "action,content",
    [("decline", None), ("cancel", None), ("accept", {"approve": False})],
    ids=["decline", "cancel", "accept-but-not-approved"],
)
async def test_confirm_mode_declined_does_not_run(world, action, content):
    callback, asked = answering(action, content)
    async with world.session(config='mode = "confirm"\n', elicitation_callback=callback) as s:
        await s.err("write_file", {"path": "~/declined.txt", "content": "no"}, "confirm_declined")
        await s.err("move_to_trash", {"path": "~/notes.txt"}, "confirm_declined")
        assert len(asked) == 2
    assert not (world.home / "declined.txt").exists()
    assert (world.home / "notes.txt").exists()


async def test_confirm_without_elicitation_capability_waits_for_another_surface(world):
    # The question waits in the store for aido answer, aido watch or Mission Control
    # (tests/e2e/test_confirm.py answers it); nobody does here, so it times out.
    config = 'mode = "confirm"\n[limits]\nconfirm_timeout_ms = 500\n'
    async with world.session(config=config) as s:  # no elicitation_callback
        assert s.init.protocol_version == "2025-11-25"
        await s.err("write_file", {"path": "~/x.txt", "content": "x"}, "confirm_declined")
        await s.ok("read_file", {"path": "~/notes.txt"})
    assert not (world.home / "x.txt").exists()


async def test_actions_confirm_asks_only_for_the_listed_primitive(world):
    callback, asked = answering("decline")
    async with world.session(config='[actions]\nconfirm = ["edit_file"]\n', elicitation_callback=callback) as s:
        await s.ok("write_file", {"path": "~/free.txt", "content": "a"})
        assert asked == []
        await s.err("edit_file", {"path": "~/free.txt", "old_string": "a", "new_string": "b"}, "confirm_declined")
        assert len(asked) == 1 and "edit_file" in asked[0].message
    assert (world.home / "free.txt").read_text() == "a"


# ---------------------------------------------------------------------------------------------
# Notifications
# ---------------------------------------------------------------------------------------------


async def test_pipeline_sends_progress_when_asked(world):
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    steps = [{"type": "write_file", "path": f"~/prog/{i}.txt", "content": str(i)} for i in range(4)]
    async with world.session() as s:
        await s.ok("pipeline", {"steps": steps}, progress_callback=on_progress)
        assert await eventually(lambda: len(progress) >= 1), "no notifications/progress arrived"
        values = [p[0] for p in progress]
        assert values == sorted(values) and len(set(values)) == len(values), f"progress only grows: {progress}"
        totals = {p[1] for p in progress if p[1] is not None}
        assert totals <= {4.0}, f"total is the number of steps: {progress}"
    assert sorted(p.name for p in (world.home / "prog").iterdir()) == ["0.txt", "1.txt", "2.txt", "3.txt"]


async def test_logging_notifications_per_action(world):
    logs: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    async with world.session(logging_callback=on_log) as s:
        # At the default level a denial is still worth a (warning) message.
        await s.err("read_file", {"path": "~/.ssh/id_rsa"})
        assert await eventually(lambda: len(logs) >= 1), "a denial is logged at the default level"
        assert logs[0].level in ("warning", "error", "notice"), logs
        assert "read_file" in json.dumps(logs[0].model_dump(mode="json")), logs

        # Asked for info, every action is logged.
        logs.clear()
        await s.session.set_logging_level("info")
        await s.ok("write_file", {"path": "~/logged.txt", "content": "x"})
        await s.ok("read_file", {"path": "~/logged.txt"})
        await s.err("read_file", {"path": "~/.ssh/id_rsa"})
        assert await eventually(lambda: len(logs) >= 3), f"expected a log message per action, got {logs}"
        blob = json.dumps([l.model_dump(mode="json") for l in logs])
        assert "write_file" in blob and "read_file" in blob, blob[:2000]

        # Asked for errors only, a successful action is not logged.
        logs.clear()
        await s.session.set_logging_level("error")
        await s.ok("read_file", {"path": "~/logged.txt"})
        await s.ok("read_file", {"path": "~/notes.txt"})
        assert not await eventually(lambda: len(logs) > 0, timeout=0.5), logs


# ---------------------------------------------------------------------------------------------
# The journal, as the session saw it and as `aido replay` shows it afterwards
# ---------------------------------------------------------------------------------------------


async def test_session_history_lists_this_sessions_actions(world):
    async with world.session() as s:
        s1 = seq_of(await s.call("write_file", {"path": "~/h.txt", "content": "h"}))
        s2 = seq_of(await s.call("read_file", {"path": "~/.ssh/id_rsa"}))
        s3 = seq_of(await s.call("read_file", {"path": "~/h.txt"}))
        out = await s.ok("session_history", {})
        actions = out["actions"]
        by_seq = {a["seq"]: a for a in actions}
        assert {s1, s2, s3} <= set(by_seq), actions
        assert by_seq[s1]["primitive"] == "write_file" and by_seq[s1]["verdict"] == "allow"
        assert by_seq[s2]["primitive"] == "read_file" and by_seq[s2]["verdict"] == "deny"
        assert by_seq[s2].get("code") == "path_denied_by_pattern", by_seq[s2]
        assert by_seq[s1]["status"] != by_seq[s2]["status"], actions
        out = await s.ok("session_history", {"limit": 1, "before_seq": s3})
        assert [a["seq"] for a in out["actions"]] == [s2], out


def _sessions(world) -> list[dict[str, Any]]:
    listed = world.run_json("replay", "sessions", "--json")
    if isinstance(listed, dict):
        listed = listed.get("sessions")
    assert isinstance(listed, list), listed
    return listed


async def test_replay_sees_the_session(world):
    async with world.session() as s:
        r_write = await s.call("write_file", {"path": "~/j.txt", "content": "journal me"})
        r_deny = await s.call("read_file", {"path": "~/.ssh/id_rsa"})
        r_read = await s.call("read_file", {"path": "~/j.txt"})
        ok(r_write)
        err(r_deny, "path_denied_by_pattern")
        ok(r_read)
        seqs = {"write": seq_of(r_write), "deny": seq_of(r_deny), "read": seq_of(r_read)}

    sessions = _sessions(world)
    assert len(sessions) == 1, sessions
    sid = sessions[0]["id"]
    assert re.fullmatch(r"[0-9a-f]{32}", sid), sessions
    assert sessions[0]["records"] >= 7, sessions  # started, 3 proposals, 3 outcomes

    proc = world.run("replay", "verify", sid)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = world.run("replay", "verify", sid[:12])  # a unique prefix works too
    assert proc.returncode == 0, proc.stdout + proc.stderr

    proc = world.run("replay", "sessions")  # the human form
    assert proc.returncode == 0 and sid[:8] in proc.stdout, describe(proc)
    proc = world.run("replay", "show", sid[:12])
    assert proc.returncode == 0 and "write_file" in proc.stdout and "deny" in proc.stdout, describe(proc)
    proc = world.run("replay", "show", sid[:12], "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shown = json.loads(proc.stdout)
    assert "write_file" in json.dumps(shown)

    proc = world.run("replay", "export", sid, "--jsonl")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1)), "gap-free seqs from 1"
    for r in records:
        assert {"v", "session", "seq", "time_ms", "prev", "event"} <= set(r), r
        assert r["session"] == sid
        assert re.fullmatch(r"[0-9a-f]{64}", r["prev"]), r
    assert records[0]["prev"] == ZEROS and records[0]["event"] == "session_started"
    assert all(a["prev"] != b["prev"] for a, b in zip(records, records[1:])), "prev chains the records"
    by_seq = {r["seq"]: r for r in records}

    w = by_seq[seqs["write"]]
    assert w["event"] == "action_proposed" and w["action"]["type"] == "write_file", w
    assert w["action"]["path"] == "~/j.txt" and w["verdict"]["verdict"] == "allow", w
    d = by_seq[seqs["deny"]]
    assert d["event"] == "action_proposed" and d["action"]["type"] == "read_file", d
    assert d["verdict"]["verdict"] == "deny" and d["verdict"]["code"] == "path_denied_by_pattern", d
    rd = by_seq[seqs["read"]]
    assert rd["verdict"]["verdict"] == "allow", rd

    completed = {r["proposal"] for r in records if r["event"] == "action_completed"}
    assert {seqs["write"], seqs["read"]} <= completed, records
    assert seqs["deny"] not in completed, "a denied proposal never completes"
    written = [r for r in records if r["event"] == "action_completed" and r["proposal"] == seqs["write"]][0]
    assert written["outcome"]["output"]["bytes"] == len("journal me"), written
    assert "not a real key" not in proc.stdout
    assert records[-1]["event"] == "session_ended", "the server closed the session when stdin closed"


async def test_replay_records_confirmations(world):
    callback, _ = answering("accept", {"approve": True})
    async with world.session(config='mode = "confirm"\n', elicitation_callback=callback) as s:
        seq = seq_of(await s.call("write_file", {"path": "~/c.txt", "content": "c"}))
    sid = _sessions(world)[0]["id"]
    proc = world.run("replay", "export", sid, "--jsonl")
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    answers = [r for r in records if r["event"] == "confirm_answered"]
    assert len(answers) == 1 and answers[0]["proposal"] == seq and answers[0]["approved"] is True, records
    proposal = next(r for r in records if r["seq"] == seq)
    assert proposal["verdict"]["verdict"] == "confirm", proposal
    assert world.run("replay", "verify", sid).returncode == 0


async def test_each_session_is_its_own_journal_session(world):
    for i in range(2):
        async with world.session() as s:
            await s.ok("write_file", {"path": f"~/s{i}.txt", "content": str(i)})
    sessions = _sessions(world)
    assert len(sessions) == 2 and sessions[0]["id"] != sessions[1]["id"], sessions
    for sess in sessions:
        assert world.run("replay", "verify", sess["id"]).returncode == 0
    proc = world.run("replay", "verify", "f" * 32)
    assert proc.returncode != 0, "an unknown session does not verify"


# ---------------------------------------------------------------------------------------------
# More ground: timeouts, concurrency, encodings, sizes
# ---------------------------------------------------------------------------------------------


async def test_a_confirmation_that_times_out_does_not_run(world):
    async def too_slow(context, params):
        await anyio.sleep(2)
        return types.ElicitResult(action="accept", content={"approve": True})

    config = 'mode = "confirm"\n[limits]\nconfirm_timeout_ms = 300\n'
    async with world.session(config=config, elicitation_callback=too_slow) as s:
        await s.err("write_file", {"path": "~/late.txt", "content": "late"}, "confirm_declined")
        await anyio.sleep(2.2)  # the late "approve" arrives now and must change nothing
        await s.ok("read_file", {"path": "~/notes.txt"})
    assert not (world.home / "late.txt").exists()


async def test_concurrent_calls(world):
    results: dict[int, types.CallToolResult] = {}

    async with world.session(config="[limits]\nin_flight_actions_max = 8\n") as s:

        async def write(i: int) -> None:
            results[i] = await s.call("write_file", {"path": f"~/conc/{i}.txt", "content": f"{i}\n" * 200})

        # As many as the limit: all run.
        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(write, i)
        seqs = [seq_of(results[i]) for i in range(8)]
        assert all(not results[i].is_error for i in range(8)), [dump(r) for r in results.values()]
        assert len(set(seqs)) == 8, seqs

        # A burst past the limit: every call is answered, either run or refused as a whole.
        results.clear()
        async with anyio.create_task_group() as tg:
            for i in range(100, 140):
                tg.start_soon(write, i)
        codes = {i: (r.structured_content or {}).get("code") if r.is_error else "ok" for i, r in results.items()}
        assert set(codes.values()) <= {"ok", "too_many_in_flight"}, codes
        for i, code in codes.items():
            f = world.home / "conc" / f"{i}.txt"
            assert f.exists() == (code == "ok"), (i, code)
            if code == "ok":
                assert f.read_text() == f"{i}\n" * 200
        # And the session goes on.
        await s.ok("read_file", {"path": "~/conc/0.txt"})


async def test_unicode_and_base64_writes(world):
    text = "héllo wörld ✓ — 日本語 🚀\n"
    blob = bytes(range(256)) + b"\x00\xff" * 100
    async with world.session() as s:
        out = await s.ok("write_file", {"path": "~/ünïcødé/ファイル.txt", "content": text})
        assert out["bytes"] == len(text.encode())
        assert (world.home / "ünïcødé" / "ファイル.txt").read_bytes() == text.encode()
        assert (await s.ok("read_file", {"path": "~/ünïcødé/ファイル.txt"}))["content"] == text

        out = await s.ok("write_file", {"path": "~/blob.bin", "content": base64.b64encode(blob).decode(), "encoding": "base64"})
        assert out["bytes"] == len(blob)
        assert (world.home / "blob.bin").read_bytes() == blob
        await s.err("read_file", {"path": "~/blob.bin"}, "binary_file")
        assert base64.b64decode((await s.ok("read_file", {"path": "~/blob.bin", "encoding": "base64"}))["content"]) == blob
        await s.err("write_file", {"path": "~/bad.bin", "content": "not base64 !!!", "encoding": "base64"})
    assert not (world.home / "bad.bin").exists()


async def test_create_parents_false_refuses_a_missing_directory(world):
    async with world.session() as s:
        await s.err("write_file", {"path": "~/no/such/dir/f.txt", "content": "x", "create_parents": False})
        await s.ok("write_file", {"path": "~/src/f.txt", "content": "x", "create_parents": False})
    assert not (world.home / "no").exists()
    assert (world.home / "src" / "f.txt").read_text() == "x"


async def test_a_multi_megabyte_file_round_trips_and_the_journal_verifies(world):
    line = "0123456789abcdefghijklmnopqrstuvwxyz" * 2 + "\n"  # 73 bytes
    text = line * 45_000  # about 3.3 MB: past record_bytes_max, so the journal keeps it as a blob
    async with world.session() as s:
        out = await s.ok("write_file", {"path": "~/big.txt", "content": text})
        assert out["bytes"] == len(text)
        assert (world.home / "big.txt").read_text() == text
        out = await s.ok("read_file", {"path": "~/big.txt"})
        assert out["content"] == text and out["lines"] == 45_000
        out = await s.ok("checksum", {"path": "~/big.txt", "algorithm": "sha256"})
        assert out["digest"] == hashlib.sha256(text.encode()).hexdigest()
    sid = _sessions(world)[0]["id"]
    proc = world.run("replay", "verify", sid)
    assert proc.returncode == 0, proc.stdout + proc.stderr


async def test_replay_verify_refuses_a_journal_altered_on_disk(world):
    """Bytes changed in the journal's files from outside (the Rust tests alter a record through
    the store itself and check the chain; this is the black-box version): verify must fail."""
    marker = b"tamper-target-0123"
    async with world.session() as s:
        await s.ok("read_file", {"path": "~/notes.txt"})
        await s.ok("write_file", {"path": "~/tamper-target-0123.txt", "content": "t"})
        await s.ok("read_file", {"path": "~/notes.txt"})
    sid = _sessions(world)[0]["id"]
    proc = world.run("replay", "verify", sid)
    assert proc.returncode == 0, describe(proc)

    touched = []
    for f in (world.aido_home / "journal").rglob("*"):
        if f.is_file() and marker in f.read_bytes():
            f.write_bytes(f.read_bytes().replace(marker, b"tamper-target-9999"))
            touched.append(f.name)
    assert touched, "the journal keeps the action's path somewhere under AIDO_HOME/journal"

    proc = world.run("replay", "verify", sid)
    assert proc.returncode != 0, f"an altered journal must not verify (changed {touched}):\n{describe(proc)}"
    assert "intact" not in proc.stdout, describe(proc)


async def test_toolsets_give_a_client_part_of_the_list_and_refuse_the_rest_by_name(world):
    """Issue 28, point 2 (stdio): `--toolsets coding` lists a small set under 8,000 tokens;
    a tool outside it is refused `tool_not_enabled` when called by name, and so is a
    composite's step naming one; `--tools` adds one, `--read-only` keeps only tools that
    change nothing; `[mcp]` in a config says the same; an unknown toolset stops aido."""
    async with world.session(extra_args=("--toolsets", "coding")) as s:
        listed = (await s.session.list_tools()).tools
        names = {t.name for t in listed}
        size = len(json.dumps([t.model_dump(mode="json", exclude_none=True) for t in listed]))
        print(f"coding: {len(names)} tools, {size} bytes, ~{size // 4} tokens")
        assert len(names) <= 35 and size // 4 < 8000, (len(names), size)
        assert {"read_file", "edit_file", "run_command", "search_code", "rewind"} <= names, names
        assert "remember" not in names and "vm_start" not in names
        refused = await s.err("remember", {"text": "v"}, "tool_not_enabled")
        assert "memory toolset" in refused["message"], refused
        step = await s.err("pipeline", {"steps": [{"type": "write_file", "path": "~/p.txt", "content": "x"},
                                                  {"type": "remember", "text": "v"}]},
                           "tool_not_enabled")
        assert "at steps[1]" in step["message"], step
        assert not (world.home / "p.txt").exists(), "nothing of a refused pipeline ran"
        await s.ok("write_file", {"path": "~/ok.txt", "content": "ok\n"})
    async with world.session(extra_args=("--toolsets", "files", "--tools", "recall", "--read-only")) as s:
        names = {t.name for t in (await s.session.list_tools()).tools}
        assert "read_file" in names and "recall" in names, names
        assert "write_file" not in names and "run_command" not in names, names
        await s.err("write_file", {"path": "~/no.txt", "content": "x"}, "tool_not_enabled")
    async with world.session(config='[mcp]\ntoolsets = ["search"]\n') as s:
        names = {t.name for t in (await s.session.list_tools()).tools}
        assert names == {"search_code", "search_and_read"}, names
    assert not (world.home / "no.txt").exists()
    bad = world.run("mcp", "--toolsets", "nope")
    assert bad.returncode != 0 and "config_value" in bad.stderr and "coding" in bad.stderr, bad.stderr
    # The refusals are journaled as rejected calls.
    sessions = world.run_json("replay", "sessions", "--json")
    shown = "".join(world.run("replay", "show", x["id"], "--json").stdout for x in sessions)
    assert shown.count('"tool_not_enabled"') >= 3, shown[-2000:]
