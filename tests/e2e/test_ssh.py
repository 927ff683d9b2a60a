"""ssh_exec over real MCP: `aido mcp` driven by the official Python SDK client against an sshd
this test starts on 127.0.0.1 (a throwaway config on a free port, its own host key and an
authorized key made by ssh-keygen).

A host the policy names runs the command and its exit status passes through; a host whose key
is not the pinned one is refused before authenticating; a host the policy does not name is
refused by the remote_allowlist gate; `aido replay playback` reproduces every result after the
server is gone. Without sshd the test prints what was missing and, under CI=true, fails.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from conftest import describe
from helpers import err, ok

pytestmark = pytest.mark.anyio

SSHD = Path("/usr/sbin/sshd")


def _missing(why: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must be able to run sshd on loopback: {why}", pytrace=False)
    print(f"NOT RUN: {why}")


class Sshd:
    def __init__(self, root: Path):
        self.dir = root
        for key in ("hostkey", "client", "other"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", key, "-f", str(root / key)], check=True
            )
        (root / "authorized_keys").write_text((root / "client.pub").read_text())
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        # UsePAM yes: without PAM, sshd refuses every login to a locked account ("!" in shadow,
        # a common state of root on fresh machines), keys or not. HOME is the server's own
        # directory: the login shell runs none of the user's start-up files (where one runs
        # `pyenv init`, a rehash lock a killed shell left behind makes every later login wait
        # a minute, and its complaint lands in the command's stderr).
        (root / "sshd_config").write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {root / 'hostkey'}\n"
            f"AuthorizedKeysFile {root / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM yes\nStrictModes no\n"
            f"SetEnv HOME={root}\n"
        )
        self.proc = subprocess.Popen(
            [str(SSHD), "-D", "-f", str(root / "sshd_config"), "-E", str(root / "sshd.log")]
        )
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("sshd did not listen")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        # Shown with a failure's captured output: why sshd refused, if it did.
        print("sshd.log:\n" + (self.dir / "sshd.log").read_text(errors="replace"))

    def entry(self, name: str, host_key: str) -> str:
        user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
        return (
            f'{{ name = "{name}", host = "127.0.0.1", port = {self.port}, user = "{user}", '
            f'host_key = "{host_key}", key_file = "{self.dir / "client"}" }}'
        )


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[Sshd | None]:
    if not SSHD.exists():
        _missing("no /usr/sbin/sshd (scripts/setup-debian installs openssh-server)")
        yield None
        return
    root = tmp_path / "sshd"
    root.mkdir()
    server = Sshd(root)
    yield server
    server.stop()


def fingerprint(pub: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(pub)], capture_output=True, text=True, check=True)
    return out.stdout.split()[1]


async def test_ssh_exec_runs_on_the_pinned_host_refuses_the_rest_and_plays_back(world, sshd):
    if sshd is None:
        return
    real_key = (sshd.dir / "hostkey.pub").read_text().strip()
    config = (
        "[ssh]\nhosts = ["
        + sshd.entry("build", real_key)
        + ", "
        + sshd.entry("impostor", fingerprint(sshd.dir / "other.pub"))
        + "]\n"
    )
    async with world.session(config=config) as s:
        tools = {t.name: t for t in (await s.session.list_tools()).tools}
        assert tools["ssh_exec"].annotations.read_only_hint is False

        ran = ok(await s.call("ssh_exec", {"host": "build", "argv": ["sh", "-c", "cat; echo \"$1\"; exit 3", "x", "it's"], "stdin": "in-"}))
        assert ran["exit_code"] == 3, ran
        assert ran["stdout"] == "in-it's\n", ran
        assert ran["host_key"] == fingerprint(sshd.dir / "hostkey.pub"), ran
        assert ran["frames"] >= 1

        shell = ok(await s.call("ssh_exec", {"host": "build", "command": "echo err >&2; echo $((6*7))"}))
        assert shell["exit_code"] == 0 and shell["stdout"] == "42\n" and shell["stderr"] == "err\n", shell

        # The same server pinned to another key: refused before authenticating.
        wrong = err(await s.call("ssh_exec", {"host": "impostor", "command": "touch /tmp/pwned-by-aido"}), "ssh_host_key_mismatch")
        assert fingerprint(sshd.dir / "hostkey.pub") in wrong["message"], wrong

        # A host the policy does not name: the gate refuses it, nothing connects.
        refused = err(await s.call("ssh_exec", {"host": "127.0.0.1", "command": "true"}), "ssh_host_not_allowed")
        assert refused["message"]

        # Bad input is coded.
        err(await s.call("ssh_exec", {"host": "build", "argv": ["true"], "command": "true"}), "remote_call_invalid")
    log = (sshd.dir / "sshd.log").read_text(errors="replace")
    assert log.count("Accepted publickey") == 2, log
    sshd.stop()

    # Playback with the server gone: every result from the journal.
    reproduced = 0
    for session in world.run_json("replay", "sessions", "--json"):
        proc = world.run("replay", "playback", session["id"], "--json")
        assert proc.returncode == 0, describe(proc)
        played = json.loads(proc.stdout)
        assert played["mismatches"] == [], describe(proc)
        assert played["not_reproducible"] == [], describe(proc)
        reproduced += played["reproduced"]
    # Two runs, the mismatch and the invalid call (failures recorded as results); the gate's
    # refusal has no result.
    assert reproduced >= 3, reproduced
