"""The `aido` command line outside of `mcp`: config show, policy check, gc and du.

(`aido replay ...` is checked in test_mcp_sdk.py, right after real sessions.)
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from conftest import describe

DENY_SSH = json.dumps({"type": "read_file", "path": "~/.ssh/id_rsa"})
ALLOW_READ = json.dumps({"type": "read_file", "path": "~/notes.txt"})
WRITE = json.dumps({"type": "write_file", "path": "~/new.txt", "content": "x"})


def effective(shown: Any) -> dict[str, Any]:
    """The effective config from `config show --json` (bare, or under "config")."""
    assert isinstance(shown, dict), shown
    cfg = shown.get("config", shown)
    assert isinstance(cfg, dict) and "mode" in cfg, shown
    return cfg


def test_config_show_defaults(world):
    cfg = effective(world.run_json("config", "show", "--json"))
    assert cfg["mode"] == "normal"
    deny = cfg["paths"]["deny"]
    for pattern in ("**/.ssh/**", "/etc/shadow", "**/.env"):
        assert pattern in deny, deny
    assert cfg["limits"]["argument_bytes_max"] == 8388608
    proc = world.run("config", "show")
    assert proc.returncode == 0 and "mode" in proc.stdout, describe(proc)


def test_config_show_merges_a_config_file(world):
    cfg = effective(
        world.run_json(
            "config", "show", "--json",
            config='mode = "confirm"\n[paths]\ndeny = ["**/secrets/**"]\n[limits]\nread_bytes_max = 1234\n',
        )
    )  # fmt: skip
    assert cfg["mode"] == "confirm"
    assert "**/secrets/**" in cfg["paths"]["deny"] and "**/.ssh/**" in cfg["paths"]["deny"], "denies add up"
    assert cfg["limits"]["read_bytes_max"] == 1234
    assert cfg["limits"]["argument_bytes_max"] == 8388608, "untouched keys keep their defaults"


def test_config_in_aido_home_is_loaded_by_the_cli(world):
    (world.aido_home / "config.toml").write_text('mode = "readonly"\n')
    assert effective(world.run_json("config", "show", "--json"))["mode"] == "readonly"


def test_a_bad_config_is_refused(world):
    proc = world.run("config", "show", "--json", config="colour = true\n")
    assert proc.returncode != 0, describe(proc)
    assert "colour" in proc.stderr + proc.stdout, describe(proc)
    proc = world.run("policy", "check", ALLOW_READ, config='mode = "yolo"\n')
    assert proc.returncode != 0 and proc.returncode not in (1, 3), describe(proc)


def test_policy_check_exit_codes(world):
    proc = world.run("policy", "check", ALLOW_READ)
    assert proc.returncode == 0, describe(proc)
    assert "allow" in proc.stdout, describe(proc)

    proc = world.run("policy", "check", DENY_SSH)
    assert proc.returncode == 1, describe(proc)
    assert "path_denied_by_pattern" in proc.stdout + proc.stderr, describe(proc)

    proc = world.run("policy", "check", WRITE, config='mode = "confirm"\n')
    assert proc.returncode == 3, describe(proc)
    assert "confirm" in proc.stdout, describe(proc)

    proc = world.run("policy", "check", WRITE, config='mode = "readonly"\n')
    assert proc.returncode == 1 and "mode_readonly" in proc.stdout + proc.stderr, describe(proc)

    pipeline = json.dumps({"type": "pipeline", "steps": [json.loads(WRITE), json.loads(DENY_SSH)]})
    proc = world.run("policy", "check", pipeline)
    assert proc.returncode == 1 and "steps[1]" in proc.stdout + proc.stderr, describe(proc)
    assert not (world.home / "new.txt").exists(), "policy check runs nothing"


def test_policy_check_rejects_a_malformed_action(world):
    proc = world.run("policy", "check", '{"type": "read_file"}')
    assert proc.returncode not in (0, 1, 3), describe(proc)
    proc = world.run("policy", "check", "not json")
    assert proc.returncode not in (0, 1, 3), describe(proc)


def test_replay_on_a_fresh_aido_home_lists_no_sessions(world):
    proc = world.run("replay", "sessions", "--json")
    assert proc.returncode == 0, describe(proc)
    assert json.loads(proc.stdout) == [], describe(proc)
    proc = world.run("replay", "show", "0123")
    assert proc.returncode == 2 and "[session_not_found]" in proc.stderr, describe(proc)


def _disk(path) -> int:
    """Bytes a tree takes on disk (blocks, directories included), measured here."""
    total = 0
    for root, dirs, files in os.walk(path):
        total += os.lstat(root).st_blocks * 512
        total += sum(os.lstat(os.path.join(root, f)).st_blocks * 512 for f in files)
    return total


@pytest.mark.anyio
async def test_gc_keeps_what_the_newer_session_needs_and_du_adds_up(world):
    """Two agents' sessions over the MCP SDK sharing a file's contents: `aido gc --keep-sessions
    1` removes the older one, AIDO_HOME shrinks by at least what only it held, the newer
    session verifies and rewinds from the shared contents; `aido du --json` adds up to what is
    on disk; bad arguments are coded."""
    (world.aido_home / "config.toml").write_text("[retention]\nat_start = false\n")
    shared = "".join(f"shared line {i}\n" for i in range(8000))
    old_only = "".join(f"old line {i}\n" for i in range(20000))
    async with world.session() as s:
        await s.ok("write_file", {"path": "~/shared.txt", "content": shared})
        await s.ok("write_file", {"path": "~/old.txt", "content": old_only})
        await s.ok("write_file", {"path": "~/old.txt", "content": "small\n"})
    async with world.session() as s:
        await s.ok("write_file", {"path": "~/shared.txt", "content": "gone\n"})
    old, new = (s["id"] for s in world.run_json("replay", "sessions", "--json"))

    du = world.run_json("du", "--json")
    measured = _disk(world.aido_home)
    assert abs(du["total_bytes"] - measured) * 100 <= measured, (du["total_bytes"], measured)
    kinds = du["kinds"]
    parts = du["journal_bytes"] + kinds["snapshots_dir"] + kinds["layers"] + kinds["audit"] + kinds["other"]
    assert parts == du["total_bytes"], du
    alone = {s["id"]: s["alone_bytes"] for s in du["sessions"]}
    assert alone[old] >= len(old_only) // 2, du

    before = _disk(world.aido_home / "journal")
    report = world.run_json("gc", "--keep-sessions", "1", "--json")
    assert report["summary"]["sessions_removed"] == 1, report
    assert [p["session"] for p in report["sessions"]] == [old], report
    after = _disk(world.aido_home / "journal")
    assert after + len(old_only) // 2 < before, (before, after)
    ids = [s["id"] for s in world.run_json("replay", "sessions", "--json")]
    assert old not in ids and new in ids, ids

    proc = world.run("replay", "verify", new)
    assert proc.returncode == 0 and "every blob and file hash checks out" in proc.stdout, describe(proc)
    proposal = next(r["seq"] for r in world.run_json("replay", "show", new, "--json") if r["event"] == "action_proposed")
    proc = world.run("replay", "rewind", new, "--before", str(proposal))
    assert proc.returncode == 0, describe(proc)
    assert (world.home / "shared.txt").read_text() == shared, "the shared contents came back"

    proc = world.run("gc", "--older-than", "3y")
    assert proc.returncode == 2 and "[retention_argument_invalid]" in proc.stderr, describe(proc)
