"""run_in_sandbox and run_container_group over real MCP: `aido mcp` driven by the official
Python SDK client, running podman with an image built locally from Debian's busybox-static
(`scripts/podman-test-image`: `podman import` of a rootfs tarball, no registry, built once).

A command runs and its output comes back; the network is absent inside; the root is read-only;
the workspace is mounted read-only with the deny globs inside it hidden; a read-write mount
outside the write walls is refused; the pids limit stops a fork bomb; an image the policy does
not list is refused; a group shares only its loopback and its pod is removed; `aido replay
playback` reproduces every result without podman. Without podman the test prints what was
missing and, under CI=true, fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import describe
from helpers import err, ok

pytestmark = pytest.mark.anyio

IMAGE = "localhost/aido-test:latest"
REPO = Path(__file__).resolve().parents[2]


def podman_ready() -> bool:
    why = None
    if shutil.which("podman") is None:
        why = "no podman (scripts/setup-debian installs podman, runc and catatonit)"
    else:
        built = subprocess.run([str(REPO / "scripts" / "podman-test-image")], capture_output=True, text=True)
        if built.returncode != 0:
            why = f"scripts/podman-test-image failed: {built.stderr[-2000:]}"
    if why is None:
        return True
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must be able to run podman: {why}", pytrace=False)
    print(f"NOT RUN: {why}")
    return False


def policy(extra: str = "") -> str:
    return f'[containers]\nimages = ["{IMAGE}"]\npids_max = 64\nmemory_mb_max = 256\n{extra}'


def aido_containers() -> list[str]:
    out = subprocess.run(["podman", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True, check=True)
    return [n for n in out.stdout.split() if n.startswith("aido-")]


def aido_pods() -> list[str]:
    out = subprocess.run(["podman", "pod", "ls", "--format", "{{.Name}}"], capture_output=True, text=True, check=True)
    return [n for n in out.stdout.split() if n.startswith("aido-")]


async def test_run_in_sandbox_confines_mounts_as_the_walls_allow_and_plays_back(world):
    if not podman_ready():
        return
    before = set(aido_containers())
    async with world.session(config=policy()) as s:
        ran = ok(
            await s.call(
                "run_in_sandbox",
                {
                    "image": IMAGE,
                    "shell": "read l; echo \"in:$l:$MODE\"; grep -c : /proc/net/dev; "
                    "touch /rootfile 2>/dev/null && echo root-rw || echo root-ro; "
                    "cat /workspace/src/settings.toml; wc -c < /workspace/proj/.env; ls -A /workspace/.ssh | wc -l; "
                    "touch /workspace/x 2>/dev/null && echo ws-rw || echo ws-ro; "
                    "grep CapEff /proc/self/status; pwd; exit 4",
                    "stdin": "hello\n",
                    "env": {"MODE": "fast", "API_TOKEN": "tok-123"},
                },
            )
        )
        out = ran["stdout"]
        assert ran["exit_code"] == 4, ran
        assert "in:hello:fast" in out, out
        assert "\n1\n" in out, f"only loopback inside: {out}"
        assert "root-ro" in out and "ws-ro" in out, out
        assert 'title = "demo"' in out, out
        # The deny globs inside the workspace are covered: .env is empty, ~/.ssh is empty.
        assert "\n0\n0\n" in out, out
        assert "CapEff:\t0000000000000000" in out and "/workspace" in out, out
        assert ran["oom_killed"] is False and ran["pids_max"] == 64
        assert not (world.home / "x").exists()

        # Network is absent: no route anywhere.
        net = ok(await s.call("run_in_sandbox", {"image": IMAGE, "shell": "wget -T 2 -q -O- http://1.1.1.1/ || echo no-net", "mount": "none"}))
        assert "no-net" in net["stdout"], net

        # A fork bomb stops at the pids limit.
        bomb = ok(
            await s.call(
                "run_in_sandbox",
                {
                    "image": IMAGE,
                    "shell": "(while :; do sleep 20 & done) 2>/dev/null; n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo alive $n",
                    "pids_max": 16,
                    "mount": "none",
                },
            )
        )
        alive = int(bomb["stdout"].split()[-1])
        assert 2 <= alive <= 16, bomb

        # A read-write mount outside the write walls is refused by the walls.
        err(await s.call("run_in_sandbox", {"image": IMAGE, "argv": ["true"], "workspace": str(world.outside), "mount": "read_write"}), "path_outside_walls")
        # An image the policy does not list, and limits above the policy's.
        err(await s.call("run_in_sandbox", {"image": "docker.io/library/alpine:latest", "argv": ["true"]}), "container_image_not_allowed")
        err(await s.call("run_in_sandbox", {"image": IMAGE, "argv": ["true"], "pids_max": 1000}), "remote_call_invalid")
        # A read-write mount inside the walls: the container writes into a layer, and its
        # changes are applied after it as journaled effects.
        rw = ok(await s.call("run_in_sandbox", {"image": IMAGE, "shell": "echo made > /workspace/made.txt", "mount": "read_write"}))
        assert rw["exit_code"] == 0, rw
        assert (world.home / "made.txt").read_text() == "made\n"
        assert [c["change"] for c in rw["changes"]] == ["file_created"], rw
    assert set(aido_containers()) == before, "every container was removed"
    journal = subprocess.run(
        [str(world.bin), "journal", "export", "--jsonl"], env=world.env(), capture_output=True, text=True
    )
    if journal.returncode == 0:
        assert "tok-123" not in journal.stdout, "a secret value reached the journal"

    # Playback without podman on PATH: every result from the journal.
    plain_env = world.env
    world.env = lambda **extra: {**plain_env(**extra), "PATH": "/nonexistent"}  # type: ignore[method-assign]
    try:
        reproduced = 0
        for session in world.run_json("replay", "sessions", "--json"):
            proc = world.run("replay", "playback", session["id"], "--json")
            assert proc.returncode == 0, describe(proc)
            played = json.loads(proc.stdout)
            assert played["mismatches"] == [], describe(proc)
            assert played["not_reproducible"] == [], describe(proc)
            reproduced += played["reproduced"]
        assert reproduced >= 4, reproduced
    finally:
        world.env = plain_env  # type: ignore[method-assign]


async def test_a_read_write_workspace_is_a_layer_whose_changes_are_journaled_and_rewound(world):
    """A container's writes to a `read_write` workspace land in a copy-on-write layer (podman's
    `:O,upperdir=` volume), are judged by the walls like run_command's, applied as effects with
    before-images and undone by a rewind, which gives back exactly the tree it found (modes
    too); a write to a protected path refuses the lot."""
    if not podman_ready():
        return
    from helpers import seq_of

    (world.home / "keep.txt").write_text("old\n")
    (world.home / "gone.txt").write_text("bye\n")
    (world.home / "tool.sh").write_text("#!/bin/sh\n")
    (world.home / "tool.sh").chmod(0o755)
    (world.home / "dir" / "deep").mkdir(parents=True)
    (world.home / "dir" / "deep" / "f.txt").write_text("f\n")
    before = world.snapshot()
    async with world.session(config=policy()) as s:
        call = await s.call(
            "run_in_sandbox",
            {
                "image": IMAGE,
                "shell": "set -e; cd /workspace; echo new > keep.txt; rm gone.txt tool.sh; "
                "rm -r dir; mkdir -p made/sub; echo m > made/sub/m.txt; chmod 700 made",
                "mount": "read_write",
            },
        )
        rw = ok(call)
        assert rw["exit_code"] == 0, rw
        assert (world.home / "keep.txt").read_text() == "new\n"
        assert not (world.home / "gone.txt").exists() and not (world.home / "dir").exists()
        assert (world.home / "made" / "sub" / "m.txt").read_text() == "m\n"
        assert (world.home / "made").stat().st_mode & 0o777 == 0o700
        kinds = sorted(c["change"] for c in rw["changes"])
        assert kinds.count("removed") == 3 and "file_changed" in kinds, rw["changes"]
        # A rewind to before the call gives the tree back exactly.
        await s.ok("rewind", {"before_seq": seq_of(call)})
        assert world.snapshot() == before
        # A write to a protected path (a git hook) refuses every change; nothing is applied.
        (world.home / "repo" / ".git" / "hooks").mkdir(parents=True)
        refused = err(
            await s.call(
                "run_in_sandbox",
                {
                    "image": IMAGE,
                    "shell": "echo x > /workspace/fine.txt; echo evil > /workspace/repo/.git/hooks/pre-commit",
                    "mount": "read_write",
                },
            ),
            "command_changes_refused",
        )
        assert "pre-commit" in json.dumps(refused), refused
        assert not (world.home / "fine.txt").exists()
        assert not (world.home / "repo" / ".git" / "hooks" / "pre-commit").exists()
    for x in world.run_json("replay", "sessions", "--json"):
        proc = world.run("replay", "verify", x["id"])
        assert proc.returncode == 0, describe(proc)


async def test_a_container_group_shares_only_its_loopback_and_the_pod_goes(world):
    if not podman_ready():
        return
    async with world.session(config=policy()) as s:
        group = ok(
            await s.call(
                "run_container_group",
                {
                    "containers": [
                        {"image": IMAGE, "shell": "echo pong | nc -l -p 7000 127.0.0.1 >/dev/null; echo served", "mount": "none"},
                        {
                            "image": IMAGE,
                            "shell": "for i in $(seq 1 50); do r=$(nc 127.0.0.1 7000 </dev/null 2>/dev/null) && [ -n \"$r\" ] && break; sleep 0.2; done; echo \"got $r\"; grep -c : /proc/net/dev",
                            "mount": "none",
                        },
                    ]
                },
            )
        )
        first, second = group["containers"]
        assert "served" in first["stdout"], group
        assert "got pong" in second["stdout"] and second["stdout"].endswith("\n1\n"), group
        err(await s.call("run_container_group", {"containers": []}), "remote_call_invalid")
    assert aido_pods() == [], "the pod was removed"


async def test_missing_podman_is_sandbox_unavailable(world):
    async with world.session(config=policy('podman = "/nonexistent/podman"\n')) as s:
        refused = err(await s.call("run_in_sandbox", {"image": IMAGE, "argv": ["true"], "mount": "none"}), "sandbox_unavailable")
        assert "/nonexistent/podman" in refused["message"], refused
