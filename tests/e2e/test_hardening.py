"""The attack table's rows for the hardening issue (26): each class an outside attacker found,
run both ways a command reaches aido (the `run_command` primitive over the MCP SDK, and
`aido exec`), each asserting the refusal *and* that nothing happened on the host. aido runs
as root here, so the command runs as the unprivileged sandbox user with its walls idmapped."""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import stat
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from helpers import dump, ok
from test_attacks import Ran, via_exec, via_mcp

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["run_command", "aido_exec"])
def run(request, world):
    """Run a shell line the chosen way; returns a Ran."""

    async def runner(shell: str, timeout_ms: int = 20_000) -> Ran:
        if request.param == "run_command":
            return await via_mcp(world, shell, timeout_ms)
        return via_exec(world, shell, timeout_ms)

    return runner


@pytest.fixture
def host_dir():
    """A directory outside the walls and outside /tmp (which is private in the sandbox), on
    every Linux host: /var/tmp. Removed afterwards."""
    path = Path("/var/tmp") / f"aido-hardening-{uuid.uuid4().hex[:12]}"
    path.mkdir(mode=0o755)
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=False)


# ---- the sandbox is not host root -----------------------------------------------------------


def _add_root_key(secret: bytes) -> int:
    """A key in root's user keyring (add_key(2)); its serial."""
    libc = ctypes.CDLL(None, use_errno=True)
    add_key = 248  # x86_64
    serial = libc.syscall(add_key, b"user", b"aido-hardening-key", secret, len(secret), -4)
    assert serial > 0, f"add_key failed: errno {ctypes.get_errno()}"
    return serial


def _revoke_key(serial: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall(250, 3, serial)  # keyctl(KEYCTL_REVOKE, serial)


async def test_root_only_files_and_keys_are_out_of_reach_by_the_kernels_checks(world, run, host_dir):
    """Not a deny list: a 0600 file of root's outside the walls, a 0700 directory of root's,
    and root's keyring are refused by the kernel because the command is not host root."""
    secret = f"root-only-{uuid.uuid4().hex}"
    (host_dir / "token").write_text(secret)
    (host_dir / "token").chmod(0o600)
    private = host_dir / "private"
    private.mkdir(mode=0o700)
    (private / "key.pem").write_text(secret)
    serial = _add_root_key(secret.encode())
    try:
        ran = await run(
            f"id -u; cat {host_dir}/token; ls {private}; cat {private}/key.pem; "
            f"cat /proc/keys; grep -c aido-hardening-key /proc/keys; exit 0"
        )
    finally:
        _revoke_key(serial)
    assert ran.code is None and ran.exit == 0, ran
    assert secret not in ran.out, ran.out
    assert "aido-hardening-key" not in ran.out.replace("grep -c aido-hardening-key", ""), ran.out
    assert ran.out.count("Permission denied") >= 3, ran.out
    # Inside, the command is its user namespace's root; on the host its processes are not.
    assert ran.out.splitlines()[0] == "0", ran.out


async def test_no_host_unix_socket_is_reachable_of_any_type(world, run, host_dir):
    """A world-writable stream socket and datagram socket on the host, named by no policy: the
    connect is refused (EACCES, and the command told which socket and which setting), a
    datagram socket or socketpair is not made (its sendto could address any path), and a
    stream or seqpacket pair cannot be pointed elsewhere. The host sockets receive nothing."""
    host_dir.chmod(0o755)
    stream_path = host_dir / "stream.sock"
    dgram_path = host_dir / "dgram.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(stream_path))
    listener.listen(4)
    listener.settimeout(0.5)
    dgram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dgram.bind(str(dgram_path))
    dgram.settimeout(0.5)
    for path in (stream_path, dgram_path):
        path.chmod(0o777)
    probe = (
        "import socket\n"
        "def attempt(what, f):\n"
        "    try:\n"
        "        f(); print(what, 'REACHED')\n"
        "    except OSError as e: print(what, 'refused', e.errno)\n"
        f"attempt('stream', lambda: socket.socket(socket.AF_UNIX).connect('{stream_path}'))\n"
        f"attempt('dgram', lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b'x', '{dgram_path}'))\n"
        "def pair_dgram():\n"
        "    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
        f"    a.sendto(b'x', '{dgram_path}')\n"
        "attempt('dgram pair', pair_dgram)\n"
        "def pair_stream():\n"
        "    a, b = socket.socketpair()\n"
        f"    a.connect('{stream_path}')\n"
        "attempt('stream pair', pair_stream)\n"
        "def pair_seq():\n"
        "    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n"
        f"    a.connect('{stream_path}')\n"
        "attempt('seqpacket pair', pair_seq)\n"
        "a, b = socket.socketpair(); a.send(b'ok'); print('own pair', b.recv(2))\n"
    )
    script = host_dir / "probe.py"
    script.write_text(probe)
    script.chmod(0o644)
    try:
        ran = await run(f"python3 {script}")
        assert ran.code is None and ran.exit == 0, ran
        assert "REACHED" not in ran.out, ran.out
        for what in ("stream", "dgram", "dgram pair", "stream pair", "seqpacket pair"):
            assert f"{what} refused" in ran.out, ran.out
        assert f"stream refused {errno.EACCES}" in ran.out, ran.out
        assert f"dgram refused {errno.EPERM}" in ran.out, "a datagram Unix socket is not made"
        # The refusal teaches: which socket, which setting.
        assert f"{stream_path} refused" in ran.out and "[processes] unix_sockets" in ran.out, ran.out
        assert "unix_socket_denied" in ran.out, ran.out
        assert "own pair b'ok'" in ran.out, "pipes between the command's own processes still work"
        with pytest.raises(socket.timeout):
            listener.accept()
        with pytest.raises(socket.timeout):
            dgram.recv(16)
    finally:
        listener.close()
        dgram.close()


OWN_AND_NAMED = r"""
import os, socket, sys, threading
named = sys.argv[1]
def attempt(what, f):
    try:
        print(what, f())
    except OSError as e:
        print(what, "refused", e.errno)
def to_named():
    s = socket.socket(socket.AF_UNIX)
    s.connect(named)
    s.sendall(b"hello from the sandbox")
    return "sent"
def own(path):
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(1)
    def serve():
        c, _ = server.accept()
        c.sendall(c.recv(5).upper())
    t = threading.Thread(target=serve); t.start()
    c = socket.socket(socket.AF_UNIX)
    c.connect(path)
    c.sendall(b"hello")
    got = c.recv(5).decode()
    t.join()
    return got
attempt("named", to_named)
attempt("own workspace", lambda: own("own.sock"))
attempt("own tmp", lambda: own("/tmp/own.sock"))
attempt("session server", lambda: (lambda s: (s.connect("/tmp/server.sock"), s.recv(6).decode())[1])(socket.socket(socket.AF_UNIX)))
"""

SERVER = r"""
import os, socket
s = socket.socket(socket.AF_UNIX)
s.bind("/tmp/server.sock")
s.listen(1)
print("listening", flush=True)
c, _ = s.accept()
c.sendall(b"served")
c.close()
"""


async def test_a_socket_the_policy_names_is_reached_and_the_commands_own_always_are(world, host_dir):
    """`[processes] unix_sockets` names a host socket (an agent's): the command reaches it
    through the sandbox's judge, as its unprivileged user. Its own sockets work wherever it
    binds them (the workspace's layer, its /tmp) and so does a server of its session running in
    the background; the socket file it left in the workspace is not applied. A session whose
    policy names nothing is refused the same socket."""
    host_dir.chmod(0o755)
    named = host_dir / "agent.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(named))
    listener.listen(4)
    listener.settimeout(5)
    named.chmod(0o777)
    script = host_dir / "probe.py"
    script.write_text(OWN_AND_NAMED)
    script.chmod(0o644)
    server = host_dir / "server.py"
    server.write_text(SERVER)
    server.chmod(0o644)
    config = f'[processes]\nunix_sockets = ["{named}"]\n'
    try:
        async with world.session(config=config) as s:
            started = await s.ok("run_command", {"argv": ["python3", str(server)], "background": True})
            for _ in range(50):
                seen = await s.ok("check_handle", {"handle": started["handle"], "wait_ms": 200})
                if "listening" in "".join(f.get("text", "") for f in seen["frames"]):
                    break
            out = await s.ok("run_command", {"argv": ["python3", str(script), str(named)], "timeout_ms": 30_000})
            await s.ok("stop_handle", {"handle": started["handle"]})
        assert out["exit_code"] == 0, out
        lines = out["stdout"].splitlines()
        assert lines == [
            "named sent",
            "own workspace HELLO",
            "own tmp HELLO",
            "session server served",
        ], out
        conn, _ = listener.accept()
        conn.settimeout(5)
        assert conn.recv(64) == b"hello from the sandbox"
        conn.close()
        assert not (world.home / "own.sock").exists(), "a socket file left in the layer is not applied"

        async with world.session() as s:
            out = await s.ok("run_command", {"argv": ["python3", str(script), str(named)], "timeout_ms": 30_000})
        assert out["stdout"].splitlines()[0] == f"named refused {errno.EACCES}", out
        assert "unix_socket_denied" in out["stderr"], out
        with pytest.raises(socket.timeout):
            listener.settimeout(0.5)
            listener.accept()
    finally:
        listener.close()


# ---- privilege-carrying metadata ------------------------------------------------------------


def _caps_xattr() -> bytes:
    """security.capability v2: cap_net_raw permitted and effective."""
    import struct

    magic_v2_effective = 0x02000001
    return struct.pack("<IIIII", magic_v2_effective, 1 << 13, 0, 0, 0)


async def test_set_id_bits_and_file_capabilities_never_reach_the_host(world, run):
    """A copied shell made setuid and setgid root, a directory made setgid, and a file given a
    capability: what lands on the host has none of it (stripped, and said so)."""
    ran = await run(
        "cp /bin/sh rootsh && chmod 6755 rootsh && mkdir shared && chmod 2775 shared && "
        "cp /bin/true capped && "
        "python3 -c \"import os,struct; os.setxattr('capped','security.capability',"
        "struct.pack('<IIIII',0x02000001,1<<13,0,0,0))\" ; ls -l rootsh capped; exit 0"
    )
    assert ran.code is None and ran.exit == 0, ran
    sh = world.home / "rootsh"
    assert sh.exists(), ran.out
    mode = sh.stat().st_mode
    assert not mode & (stat.S_ISUID | stat.S_ISGID), oct(mode)
    assert sh.stat().st_uid == os.getuid()
    assert not (world.home / "shared").stat().st_mode & (stat.S_ISUID | stat.S_ISGID)
    assert "security.capability" not in os.listxattr(world.home / "capped")
    # The host's root running it gets no root from it either way: it is an ordinary file.
    assert os.stat(world.home / "capped").st_mode & 0o777 in (0o755, 0o775, 0o777)


# ---- the policy a command runs under --------------------------------------------------------


async def test_a_policy_file_inside_the_walls_is_protected_from_the_commands_it_governs(world):
    """`--config` naming a file in the workspace: a command that rewrites it (to make its next
    run unconfined) is refused whole, and so is write_file; the file is unchanged."""
    policy = world.home / "aido-policy.toml"
    text = '[processes]\nunconfined = "never"\n'
    policy.write_text(text)
    async with world.session(extra_args=("--config", str(policy))) as s:
        r = await s.call(
            "run_command",
            {"shell": f"printf '[processes]\\nunconfined = \"always\"\\n' > {policy}; echo done"},
        )
        assert r.is_error, dump(r)
        sc = r.structured_content
        assert sc["code"] == "command_changes_refused", sc
        assert [x["code"] for x in sc["details"]["refused"]] == ["path_protected"], sc
        w = await s.call("write_file", {"path": str(policy), "content": "[processes]\n"})
        assert w.is_error and w.structured_content["code"] == "path_protected", dump(w)
        gone = await s.call("run_command", {"shell": f"rm {policy}"})
        assert gone.is_error and gone.structured_content["code"] == "command_changes_refused", dump(gone)
    assert policy.read_text() == text
    # The same through aido exec --config.
    proc = subprocess.run(
        [str(world.bin), "--config", str(policy), "exec", "--", "sh", "-c", f"echo x >> {policy}"],
        env=world.env(), cwd=world.home, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 125 and "command_changes_refused" in proc.stderr, proc.stderr
    assert policy.read_text() == text


# ---- the layer directory --------------------------------------------------------------------


async def test_a_planted_layer_directory_is_never_used(world):
    """With AIDO_HOME inside a write root, layers go to a directory of aido's own made with a
    name no one could take first; the old, guessable name planted by another user is never
    read from. A layer base that is not aido's own is refused with a code."""
    planted = Path("/tmp") / f"aido-layers-{os.getuid()}"
    made_here = not planted.exists()
    if made_here:
        planted.mkdir(mode=0o777)
        os.chown(planted, 65534, 65534)
        (planted / "planted.txt").write_text("from another user\n")
    aido_home = world.home / ".aido-inside"
    env = world.env()
    env["AIDO_HOME"] = str(aido_home)
    try:
        proc = subprocess.run(
            [str(world.bin), "exec", "--", "sh", "-c", "echo mine > result.txt"],
            env=env, cwd=world.home, capture_output=True, text=True, timeout=120,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert (world.home / "result.txt").read_text() == "mine\n"
        if made_here:
            assert sorted(os.listdir(planted)) == ["planted.txt"], os.listdir(planted)
    finally:
        if made_here:
            subprocess.run(["rm", "-rf", str(planted)], check=False)
    # A layer base another user owns (or others may enter) is refused, nothing runs from it.
    base = world.aido_home / "layers"
    world.aido_home.mkdir(exist_ok=True)
    base.mkdir(mode=0o777, exist_ok=True)
    base.chmod(0o777)
    os.chown(base, 65534, 65534)
    async with world.session() as s:
        r = await s.call("run_command", {"shell": "echo x > refused.txt"})
        assert r.is_error, dump(r)
        assert "sandbox_layers_unsafe" in dump(r), dump(r)
    assert not (world.home / "refused.txt").exists()


# ---- the apply cannot be steered ------------------------------------------------------------


async def test_a_link_flipped_during_the_apply_never_steers_a_file(world):
    """Once a command's 300 files under `out/` are staged (its recovery marker is on disk), a
    host process flips `out` between the real directory and a link to `.git/hooks` while they
    are applied (each step slowed so the race is real): no file ever lands in the protected
    directory; the apply either completes in the real directory or stops and puts back."""
    repo = world.home / "repo"
    hooks = repo / ".git" / "hooks"
    hooks.mkdir(parents=True)
    (repo / "out").mkdir()
    markers = world.aido_home / "journal" / "main.recovery"
    stop = threading.Event()
    flips = [0]

    def flipper():
        aside = repo / "out.real"
        while not stop.is_set() and not (markers.is_dir() and any(p.suffix == ".json" for p in markers.iterdir())):
            time.sleep(0.0005)
        while not stop.is_set():
            try:
                os.rename(repo / "out", aside)
                os.symlink(hooks, repo / "out")
                time.sleep(0.0005)
                os.unlink(repo / "out")
                os.rename(aside, repo / "out")
                flips[0] += 1
            except OSError:
                pass

    async with world.session(env={"AIDO_FAULTS": "apply_step_us=2000"}) as s:
        t = threading.Thread(target=flipper, daemon=True)
        t.start()
        try:
            r = await s.call(
                "run_command",
                {"shell": "cd repo && for i in $(seq 300); do echo x > out/f$i; done", "timeout_ms": 60000},
            )
        finally:
            stop.set()
            t.join(5)
    assert flips[0] > 0, "the flipper ran during the apply"
    assert os.listdir(hooks) == [], os.listdir(hooks)
    landed = [p for p in world.home.rglob("f*") if p.is_file()]
    assert all(p.parent == repo / "out" for p in landed), landed
    if not r.is_error:
        assert len(landed) == 300, len(landed)
    else:
        assert r.structured_content["code"] == "command_changes_rolled_back", dump(r)
        print(f"stopped and put back: {len(landed)} of 300 left by the race ({flips[0]} flips)")


# ---- names ----------------------------------------------------------------------------------


async def test_names_that_are_not_utf8_are_refused_whole_and_long_names_apply(world, run):
    """A name that is not UTF-8 refuses the change set whole with `path_not_utf8` (before
    anything lands; a look-alike UTF-8 file is untouched); a valid 255-byte name applies."""
    lookalike = world.home / "n\ufffd"
    lookalike.write_text("keep me\n")
    raw = bytes(world.home) + b"/n\xff"
    with open(raw, "wb") as f:
        f.write(b"raw\n")
    ran = await run("rm \"$(printf 'n\\377')\"; echo new > fresh.txt; echo done")
    assert ran.code == "command_changes_refused", ran
    assert "path_not_utf8" in ran.out, ran.out
    assert lookalike.read_text() == "keep me\n"
    assert os.path.exists(raw)
    assert not (world.home / "fresh.txt").exists(), "refused whole: nothing applied"
    os.unlink(raw)
    long_name = "L" * 255
    ran = await run(f"echo long > {long_name} && mkdir -p d && echo in > d/{long_name}")
    assert ran.code is None and ran.exit == 0, ran
    assert (world.home / long_name).read_text() == "long\n"
    assert (world.home / "d" / long_name).read_text() == "in\n"
    leftovers = [p for p in world.home.rglob("*") if ".aido-" in p.name]
    assert leftovers == [], leftovers


# ---- size lands on the command, not on aido -------------------------------------------------


async def test_sparse_gigabyte_files_cost_aido_no_memory_and_land_sparse(world):
    """Three sparse 1 GiB files: aido's peak memory stays small (contents are streamed, never
    held whole) and the files land sparse on the host and in the journal."""
    # The peak RSS of aido exec and what it waited for, read by a fresh process of its own
    # (this one's children include every earlier test's).
    wrapper = (
        "import resource, subprocess, sys\n"
        "rc = subprocess.run(sys.argv[1:]).returncode\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "sys.exit(rc)\n"
    )
    shell = "for i in 1 2 3; do truncate -s 1G s$i && echo data$i | dd of=s$i bs=1 seek=500000000 conv=notrunc 2>/dev/null; done"
    proc = subprocess.run(
        ["python3", "-c", wrapper, str(world.bin), "exec", "--timeout-ms", "120000", "--", "sh", "-c", shell],
        env=world.env(), cwd=world.home, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    peak_kb = int(proc.stdout.strip().splitlines()[-1])
    base = subprocess.run(
        ["python3", "-c", wrapper, str(world.bin), "exec", "--", "true"],
        env=world.env(), cwd=world.home, capture_output=True, text=True, timeout=300,
    )
    base_kb = int(base.stdout.strip().splitlines()[-1])
    print(f"peak RSS of aido exec: {peak_kb} KiB for 3 GiB of sparse files, {base_kb} KiB for `true`")
    assert peak_kb - base_kb < 64 * 1024, f"aido grew by {peak_kb - base_kb} KiB"
    for i in (1, 2, 3):
        f = world.home / f"s{i}"
        st = f.stat()
        assert st.st_size == 1 << 30
        assert st.st_blocks * 512 < 1 << 20, f"s{i} landed dense: {st.st_blocks} blocks"
        with open(f, "rb") as fh:
            fh.seek(500_000_000)
            assert fh.read(6) == f"data{i}\n".encode()
    journal = sum(
        p.stat().st_blocks * 512 for p in world.aido_home.rglob("*") if p.is_file()
    )
    assert journal < 64 << 20, f"the journal took {journal} bytes for sparse files"
