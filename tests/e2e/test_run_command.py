"""run_command and `aido exec`: commands confined by aido's sandbox, judged, journaled and
played back (issue 9). Each test drives the real aido binary through the official MCP SDK or
the CLI; nothing is skipped: a host without the sandbox's layers fails these tests with
`sandbox_unavailable`, which is the refusal aido gives there."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import anyio
import pytest

from helpers import err, ok, seq_of

pytestmark = pytest.mark.anyio


def session_ids(world) -> list[dict]:
    sessions = world.run_json("replay", "sessions", "--json")
    assert sessions, "the journal has sessions"
    return sessions


def played_back(world) -> None:
    """Every session's results are reproduced from the journal without spawning anything."""
    for s in session_ids(world):
        proc = world.run("replay", "playback", s["id"])
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "0 mismatch(es)" in proc.stdout, proc.stdout


async def test_run_command_is_a_tool_with_the_process_spawn_class(world):
    async with world.session() as s:
        tools = {t.name: t for t in (await s.session.list_tools()).tools}
        assert "run_command" in tools
        tool = tools["run_command"]
        assert "argv" in tool.input_schema["properties"]
        assert "shell" in tool.input_schema["properties"]
        assert tool.annotations.read_only_hint is False


async def test_echo_runs_confined_and_playback_reproduces_it(world):
    async with world.session() as s:
        r = await s.call("run_command", {"argv": ["echo", "hello from the sandbox"]})
        out = ok(r)
        assert out["exit_code"] == 0, out
        assert out["stdout"] == "hello from the sandbox\n"
        assert out["timed_out"] is False
        shell = await s.ok("run_command", {"shell": "echo $((6 * 7)); echo oops >&2; exit 3"})
        assert shell["exit_code"] == 3 and shell["stdout"] == "42\n" and shell["stderr"] == "oops\n"
        # A cleared environment: aido's own variables do not reach the command.
        env = await s.ok("run_command", {"shell": "env", "env": {"MODE": "x"}})
        assert "MODE=x" in env["stdout"] and "AIDO_HOME" not in env["stdout"], env
        await s.ok("run_command", {"argv": ["true"], "env": {"API_TOKEN": "t0ps3cret"}})
    played_back(world)
    # Secret-looking values are journaled only as their hash.
    shown = "".join(world.run("replay", "show", x["id"], "--json").stdout for x in session_ids(world))
    assert "API_TOKEN" in shown and "MODE" in shown
    assert "t0ps3cret" not in shown


async def test_a_denied_secret_is_hidden_and_the_call_journaled(world):
    key = world.home / ".ssh" / "id_x"
    key.write_text("PRIVATE KEY MATERIAL\n")
    async with world.session() as s:
        r = await s.call("run_command", {"shell": f"cat {key}; ls -A {key.parent}"})
        out = ok(r)
        assert "PRIVATE KEY MATERIAL" not in out["stdout"] + out["stderr"], out
        seq = seq_of(r)
        history = await s.ok("session_history", {"limit": 10})
        assert any(a.get("seq") == seq for a in history["actions"]), history
        # A cwd outside the walls is refused by the policy before anything runs.
        await s.err("run_command", {"argv": ["true"], "cwd": str(world.outside)}, "path_outside_walls")
    assert key.read_text() == "PRIVATE KEY MATERIAL\n"
    played_back(world)


async def test_a_command_past_its_timeout_is_killed(world):
    async with world.session() as s:
        # Issue 27, point 5: a timeout is an isError result with a code and the output so far.
        result = await s.call("run_command", {"shell": "echo started; echo so-far > partial.txt; sleep 30",
                                              "timeout_ms": 1500})
        assert result.is_error is True, result
        out = result.structured_content
        assert out["code"] == "command_timed_out" and "timeout_ms" in out["message"], out
        assert out["timed_out"] is True and out["exit_code"] is None, out
        assert out["stdout"] == "started\n" and out["duration_ms"] < 10_000, out
        assert result.content[0].text.startswith("[command_timed_out]"), result
        await s.err("run_command", {"argv": ["true"], "shell": "true"}, "command_invalid")
    played_back(world)


def test_aido_exec_passes_the_exit_status_through_and_is_journaled(world):
    proc = world.run("exec", "--", "sh", "-c", "echo out; exit 3")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stdout == "out\n"
    sessions = session_ids(world)
    assert len(sessions) == 1
    shown = world.run("replay", "show", sessions[0]["id"])
    assert shown.returncode == 0 and "run_command" in shown.stdout, shown.stdout + shown.stderr
    played_back(world)


def test_aido_exec_starts_from_the_kept_deny_index_and_still_hides_what_appeared_since(world):
    """Each `aido exec` is a new process: it starts from the deny globs' expansion the last one
    kept in AIDO_HOME and checks every directory by its stamp. A secret that appeared since,
    deep in an old tree, is hidden all the same; one removed is no longer hidden."""
    deep = world.home / "proj" / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (world.home / "proj" / "a" / "x.env.txt").write_text("plain\n")
    old = time.time() - 3600
    for d in [deep, deep.parent, deep.parent.parent, deep.parent.parent.parent, world.home]:
        os.utime(d, (old, old))
    first = world.run("exec", "--", "sh", "-c", "cat proj/a/x.env.txt")
    assert first.returncode == 0 and first.stdout == "plain\n", first.stdout + first.stderr
    kept = world.aido_home / "cache" / "deny-globs"
    assert kept.is_file() and (kept.stat().st_mode & 0o777) == 0o600
    (deep / ".env").write_text("TOKEN=appeared\n")
    second = world.run("exec", "--", "sh", "-c", "cat proj/a/b/c/.env; echo rc=$?")
    # Hidden (an empty file in its place), never read.
    assert "appeared" not in second.stdout and "rc=" in second.stdout, second.stdout + second.stderr
    (deep / ".env").unlink()
    (deep / "plain.txt").write_text("seen\n")
    third = world.run("exec", "--", "sh", "-c", "cat proj/a/b/c/plain.txt")
    assert third.returncode == 0 and third.stdout == "seen\n", third.stdout + third.stderr
    # A damaged index is a cold start, never a wrong answer.
    kept.write_bytes(b"aido-deny-2\n" + b"\xff" * 64)
    (deep / ".env").write_text("TOKEN=again\n")
    fourth = world.run("exec", "--", "sh", "-c", "cat proj/a/b/c/.env; echo rc=$?")
    assert "again" not in fourth.stdout and "rc=" in fourth.stdout, fourth.stdout + fourth.stderr


async def test_a_dry_run_returns_the_commands_changes_and_leaves_the_tree_alone(world):
    (world.home / "notes.txt").write_text("one\ntwo\n")
    (world.home / "old").mkdir()
    (world.home / "old" / "x.txt").write_text("x\n")
    before = world.snapshot()
    script = (
        "set -e; printf 'one\\nTWO\\n' > notes.txt; rm -r old; mkdir -p new/sub; "
        "echo hi > new/sub/hi.txt; chmod +x new/sub/hi.txt; head -c 64 /dev/urandom > blob.bin; "
        "echo TOKEN=x > new/.env; ln -s sub/hi.txt new/ok_link; ln -s .env new/env_link"
    )
    async with world.session() as s:
        out = await s.ok("run_command", {"shell": script, "dry_run": True})
        assert out["exit_code"] == 0 and out["dry_run"] is True, out
        home = str(world.home.resolve())
        changes = {(c["change"], c["path"].removeprefix(home + "/")): c for c in out["changes"]}
        assert set(changes) == {
            ("file_changed", "notes.txt"),
            ("dir_removed", "old"),
            ("dir_created", "new"),
            ("dir_created", "new/sub"),
            ("file_created", "new/sub/hi.txt"),
            ("file_created", "blob.bin"),
            ("file_created", "new/.env"),
            ("link_created", "new/ok_link"),
            ("link_created", "new/env_link"),
        }, out["changes"]
        # Judged as an apply would judge it: the deny glob `**/.env` refuses the file, and the
        # link that points at it.
        refused = {k[1]: c["refused"] for k, c in changes.items() if "refused" in c}
        assert refused == {"new/.env": "path_denied_by_pattern", "new/env_link": "path_denied_by_pattern"}, refused
        assert changes[("link_created", "new/ok_link")]["target"] == "sub/hi.txt"
        diff = changes[("file_changed", "notes.txt")]["diff"]
        assert "-two\n+TWO\n" in diff, diff
        assert changes[("file_created", "new/sub/hi.txt")]["mode"].endswith("755")
        assert "+hi\n" in changes[("file_created", "new/sub/hi.txt")]["diff"]
        assert changes[("file_created", "blob.bin")]["binary"] is True
        # The command ran over a throwaway layer: the tree is exactly as it was, and no layer
        # is left behind.
        assert world.snapshot() == before
        layers = world.aido_home / "layers"
        assert not layers.exists() or list(layers.iterdir()) == [], list(layers.iterdir())
        # Without dry_run the same command writes the tree.
        await s.ok("run_command", {"shell": "echo applied > applied.txt"})
    assert (world.home / "applied.txt").read_text() == "applied\n"
    played_back(world)


def rel_changes(world, out) -> dict:
    home = str(world.home.resolve())
    return {(c["change"], c["path"].removeprefix(home + "/")): c for c in out["changes"]}


async def test_a_commands_file_changes_are_journaled_effects_a_rewind_undoes(world):
    (world.home / "notes.txt").write_text("one\ntwo\n")
    (world.home / "gone.txt").write_text("bye\n")
    (world.home / "old" / "x" / "empty").mkdir(parents=True)
    (world.home / "old" / "x" / "f.txt").write_text("f\n")
    (world.home / "old" / "top.txt").write_text("top\n")
    # Modes a rewind must give back: a removed script's and directory's, a chmod of a file and
    # of a directory that stay.
    (world.home / "run.sh").write_text("#!/bin/sh\n")
    (world.home / "run.sh").chmod(0o755)
    (world.home / "old" / "x").chmod(0o700)
    (world.home / "keep").mkdir()
    (world.home / "keep" / "secret.txt").write_text("s\n")
    before = world.snapshot()
    script = (
        "set -e; printf 'one\\nTWO\\n' > notes.txt; rm gone.txt; mkdir -p new/sub; "
        "echo hi > new/sub/hi.txt; chmod +x new/sub/hi.txt; head -c 64 /dev/urandom > blob.bin; "
        "rm -r old; rm run.sh; chmod 600 keep/secret.txt; chmod 711 keep; mkdir -m 750 tight"
    )
    async with world.session() as s:
        r = await s.call("run_command", {"shell": script})
        out = ok(r)
        assert out["exit_code"] == 0 and out["file_changes_journaled"] is True, out
        assert set(rel_changes(world, out)) == {
            ("file_changed", "notes.txt"),
            ("removed", "gone.txt"),
            ("dir_created", "new"),
            ("dir_created", "new/sub"),
            ("file_created", "new/sub/hi.txt"),
            ("file_created", "blob.bin"),
            ("removed", "old/x/f.txt"),
            ("dir_removed", "old/x/empty"),
            ("dir_removed", "old/x"),
            ("removed", "old/top.txt"),
            ("dir_removed", "old"),
            ("removed", "run.sh"),
            ("file_changed", "keep/secret.txt"),
            ("mode_changed", "keep"),
            ("dir_created", "tight"),
        }, out["changes"]
        assert (world.home / "keep" / "secret.txt").stat().st_mode & 0o777 == 0o600
        assert (world.home / "keep").stat().st_mode & 0o777 == 0o711
        assert (world.home / "tight").stat().st_mode & 0o777 == 0o750
        # Applied to the tree, modes included.
        assert not (world.home / "old").exists()
        assert (world.home / "notes.txt").read_text() == "one\nTWO\n"
        assert not (world.home / "gone.txt").exists()
        hi = world.home / "new" / "sub" / "hi.txt"
        assert hi.read_text() == "hi\n" and hi.stat().st_mode & 0o111, oct(hi.stat().st_mode)
        assert len((world.home / "blob.bin").read_bytes()) == 64
        layers = world.aido_home / "layers"
        assert not layers.exists() or list(layers.iterdir()) == [], "no layer is left behind"
        # A rewind to before the command gives back exactly the tree it found.
        await s.ok("rewind", {"before_seq": seq_of(r)})
        assert world.snapshot() == before
    for x in session_ids(world):
        proc = world.run("replay", "verify", x["id"])
        assert proc.returncode == 0, proc.stdout + proc.stderr
    played_back(world)


async def test_a_command_whose_changes_the_walls_refuse_changes_nothing(world):
    before = world.snapshot()
    async with world.session() as s:
        e = await s.err(
            "run_command",
            {"shell": "echo a > kept.txt; mkdir d; echo TOKEN=x > d/.env; ln -s d/.env link; echo done"},
            "command_changes_refused",
        )
        refused = {r["path"].removeprefix(str(world.home.resolve()) + "/"): r["code"] for r in e["details"]["refused"]}
        # The denied file, and a link to it (a link into a denied path is refused too).
        assert refused == {"d/.env": "path_denied_by_pattern", "link": "path_denied_by_pattern"}, e
        # The command ran (its output is in the details); nothing of it reached the tree.
        assert e["details"]["command"]["stdout"] == "done\n", e
        assert world.snapshot() == before
    played_back(world)


async def test_links_a_command_makes_are_journaled_and_a_rewind_removes_them(world):
    """A venv (bin/python leads out of the walls, lib64 -> lib), a relative link, and a file
    replaced by a link are `link_created` effects: the tree is exactly what the command left,
    a rewind takes the links away and gives the replaced file back, and replay verifies it."""
    (world.home / "was_a_file").write_text("kept\n")
    before = world.snapshot()
    async with world.session() as s:
        r = await s.call(
            "run_command",
            {"shell": "python3 -m venv --without-pip v && echo hi > t.txt && ln -s t.txt rel "
                      "&& rm was_a_file && ln -s t.txt was_a_file && v/bin/python -c 'print(40+2)'"},
        )
        out = ok(r)
        assert out["exit_code"] == 0 and out["stdout"] == "42\n", out
        made = {c["path"].removeprefix(str(world.home.resolve()) + "/"): c.get("target")
                for c in out["changes"] if c["change"] == "link_created"}
        assert made["rel"] == "t.txt" and made["was_a_file"] == "t.txt", made
        assert os.path.isabs(made["v/bin/python3"]), made  # the host's python, outside the walls
        assert os.readlink(world.home / "was_a_file") == "t.txt"
        assert (world.home / "rel").read_text() == "hi\n"
        # What the tree holds now is what the command left: the venv's python runs from it.
        ran = subprocess.run([str(world.home / "v/bin/python"), "-c", "print(1)"], capture_output=True, text=True)
        assert ran.stdout == "1\n", ran
        await s.ok("rewind", {"before_seq": seq_of(r)})
        assert world.snapshot() == before
        assert (world.home / "was_a_file").read_text() == "kept\n"
    for x in session_ids(world):
        proc = world.run("replay", "verify", x["id"])
        assert proc.returncode == 0, proc.stdout + proc.stderr
    played_back(world)


async def test_a_removed_link_goes_as_a_link_and_a_rewind_makes_it_again(world):
    """`rm link` removes the link, never what it points at (also inside a removed directory,
    and a link that leads out of the walls); the journal keeps what each pointed at, so a
    rewind makes them again exactly."""
    (world.home / "target.txt").write_text("kept\n")
    (world.home / "link.txt").symlink_to("target.txt")
    (world.home / "tree" / "x").mkdir(parents=True)
    (world.home / "tree" / "x" / "f.txt").write_text("f\n")
    (world.home / "tree" / "x" / "ln").symlink_to("f.txt")
    (world.home / "out").symlink_to(str(world.outside))
    before = world.snapshot()
    async with world.session() as s:
        r = await s.call("run_command", {"shell": "rm link.txt out; rm -r tree"})
        out = ok(r)
        assert out["exit_code"] == 0, out
        assert not os.path.lexists(world.home / "link.txt") and not os.path.lexists(world.home / "out")
        assert (world.home / "target.txt").read_text() == "kept\n", "the target is untouched"
        assert world.outside.is_dir(), "what a link leads to outside the walls is untouched"
        assert not (world.home / "tree").exists()
        kinds = sorted(c["change"] for c in out["changes"])
        assert kinds.count("link_removed") == 3, out["changes"]
        await s.ok("rewind", {"before_seq": seq_of(r)})
        assert world.snapshot() == before
        assert os.readlink(world.home / "link.txt") == "target.txt"
    for x in session_ids(world):
        proc = world.run("replay", "verify", x["id"])
        assert proc.returncode == 0, proc.stdout + proc.stderr
    played_back(world)


def _http_server(body: bytes):
    """A real HTTP server on the host's loopback, in a thread; (port, hits, stop)."""
    import http.server
    import threading

    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the stdlib's name)
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1], hits, server.shutdown


FETCH = (
    "import sys, urllib.request, urllib.error\n"
    "for url in sys.argv[1:]:\n"
    "    try:\n"
    "        print(url, urllib.request.urlopen(url, timeout=10).read().decode())\n"
    "    except urllib.error.HTTPError as e:\n"
    "        print(url, e.code, e.headers.get('X-Aido-Code'))\n"
)


async def test_egress_goes_through_the_proxy_the_policy_names_and_is_journaled(world):
    port, hits, stop = _http_server(b"fetched through aido")
    other_port, other_hits, stop_other = _http_server(b"never")
    config = (
        "[processes]\n"
        f'egress = ["localhost:{port}"]\n'
        'egress_allow_ranges = ["127.0.0.1/32"]\n'
    )
    try:
        async with world.session(config=config) as s:
            out = await s.ok(
                "run_command",
                {
                    "argv": [
                        "python3",
                        "-c",
                        FETCH,
                        f"http://localhost:{port}/ok",
                        f"http://localhost:{other_port}/no",
                        "http://169.254.169.254/latest/meta-data/",
                        f"http://127.0.0.1:{port}/spelled-otherwise",
                    ],
                },
            )
            assert out["exit_code"] == 0, out
            lines = out["stdout"].splitlines()
            assert lines[0] == f"http://localhost:{port}/ok fetched through aido", out
            assert lines[1:] == [
                f"http://localhost:{other_port}/no 403 net_denied",
                "http://169.254.169.254/latest/meta-data/ 403 net_denied",
                f"http://127.0.0.1:{port}/spelled-otherwise 403 net_denied",
            ], out
            egress = out["egress"]
            assert [e.get("code") for e in egress] == [None, "net_denied", "net_denied", "net_denied"], egress
            assert egress[0]["address"] == f"127.0.0.1:{port}" and egress[0]["bytes_down"] > 0
            # Issue 27, point 6: the refusal names the setting that would allow it, and how.
            assert egress[1]["message"] == (
                f'localhost:{other_port} is not on the network allowlist ([processes] egress); '
                f'add "localhost:{other_port}" there to allow it'), egress[1]
            # A direct connection, around the proxy, reaches nothing.
            direct = await s.ok(
                "run_command",
                {"shell": f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\""},
            )
            assert direct["exit_code"] != 0 and "egress" not in direct, direct
        assert hits == ["/ok"] and other_hits == []
        # The journal holds each attempt; playback reproduces the result without the network.
        shown = "".join(
            world.run("replay", "show", x["id"], "--json").stdout for x in session_ids(world)
        )
        assert "net_denied" in shown and "169.254.169.254" in shown, shown[-2000:]
        played_back(world)
    finally:
        stop()
        stop_other()
    # Under `aido exec` the same policy gives the same way out, and the same refusals.
    port2, hits2, stop2 = _http_server(b"exec fetched")
    try:
        config = (
            "[processes]\n"
            f'egress = ["localhost:{port2}"]\n'
            'egress_allow_ranges = ["127.0.0.1/32"]\n'
        )
        proc = world.run(
            "exec", "--policy", str(world.write_config(config)), "--", "python3", "-c", FETCH,
            f"http://localhost:{port2}/e", "http://10.1.2.3/",
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert proc.stdout.splitlines() == [
            f"http://localhost:{port2}/e exec fetched",
            "http://10.1.2.3/ 403 net_denied",
        ], proc.stdout + proc.stderr
        assert hits2 == ["/e"]
    finally:
        stop2()


async def test_a_background_command_reaches_the_network_through_a_proxy_of_its_own(world):
    """With `[processes] egress`, a handle's command has its own proxy for as long as it runs:
    check_handle shows every attempt so far, stop_handle's answer all of them, and playback
    serves the same answers without the network."""
    port, hits, stop = _http_server(b"served to a handle")
    config = (
        "[processes]\n"
        f'egress = ["localhost:{port}"]\n'
        'egress_allow_ranges = ["127.0.0.1/32"]\n'
    )
    script = (
        FETCH.replace("for url in sys.argv[1:]:", "for url in sys.argv[1:2]:")
        + "print('FIRST-DONE', flush=True)\n"
        + "sys.stdin.readline()\n"
        + "for url in sys.argv[2:]:\n"
        + "    try:\n"
        + "        print(url, urllib.request.urlopen(url, timeout=10).read().decode(), flush=True)\n"
        + "    except urllib.error.HTTPError as e:\n"
        + "        print(url, e.code, e.headers.get('X-Aido-Code'), flush=True)\n"
        + "sys.stdin.readline()\n"
    )
    try:
        async with world.session(config=config) as s:
            started = await s.ok(
                "run_command",
                {
                    "argv": [
                        "python3", "-c", script,
                        f"http://localhost:{port}/first",
                        f"http://localhost:{port}/second",
                        "http://169.254.169.254/",
                    ],
                    "background": True,
                },
            )
            handle = started["handle"]
            cursor, text = 0, ""

            async def read_until(marker: str):
                nonlocal cursor, text
                for _ in range(30):
                    out = await s.ok("check_handle", {"handle": handle, "cursor": cursor, "wait_ms": 2000})
                    text += "".join(f.get("text", "") for f in out["frames"])
                    cursor = out["next_cursor"]
                    if marker in text:
                        break
                return out

            out = await read_until("FIRST-DONE")
            assert f"/first served to a handle" in text, text
            assert [e.get("code") for e in out["egress"]] == [None], out
            await s.ok("write_stdin", {"handle": handle, "text": "go\n"})
            await read_until("169.254.169.254")
            assert "/second served to a handle" in text and "403 net_denied" in text, text
            stopped = await s.ok("stop_handle", {"handle": handle})
            codes = [e.get("code") for e in stopped["egress"]]
            assert codes == [None, None, "net_denied"], stopped
        assert hits == ["/first", "/second"]
        played_back(world)
    finally:
        stop()


async def test_a_name_on_the_egress_list_that_resolves_to_loopback_is_refused(world):
    port, hits, stop = _http_server(b"must not be reached")
    try:
        config = f'[processes]\negress = ["localhost:{port}"]\n'
        async with world.session(config=config) as s:
            out = await s.ok(
                "run_command", {"argv": ["python3", "-c", FETCH, f"http://localhost:{port}/"]}
            )
            assert out["stdout"] == f"http://localhost:{port}/ 403 net_address_refused\n", out
            assert out["egress"][0]["code"] == "net_address_refused"
            assert "loopback" in out["egress"][0]["message"]
            assert "([processes] egress_allow_ranges does not name it; add \"127.0.0.0/8\"" in out["egress"][0]["message"], out
            # A bad egress entry is a config error that names the key.
        bad = world.run(
            "exec", "--policy", str(world.write_config('[processes]\negress = ["https://x/"]\n')),
            "--", "true",
        )
        assert bad.returncode != 0 and "processes.egress" in bad.stderr, bad.stderr
        assert hits == []
    finally:
        stop()


async def test_unconfined_runs_only_when_the_policy_says_so_and_every_run_says_it(world):
    """`[processes] unconfined = "always"` is the explicit escape hatch: the command runs as a
    plain process (the host's namespaces: it sees aido's own pid), its writes land directly and
    are not journaled effects, and every result and journaled record says `unconfined` and why.
    A dry run is refused (it needs the sandbox's layer). Without the setting nothing of this
    happens: the same command runs confined."""
    script = "echo made > plain.txt; cat /proc/1/comm"
    host_init = Path("/proc/1/comm").read_text()
    async with world.session() as s:
        confined = await s.ok("run_command", {"shell": script})
        assert "unconfined" not in confined and confined["file_changes_journaled"] is True, confined
        # Confined, pid 1 is the sandbox's own init, not the host's.
        assert confined["stdout"] != host_init, (confined, host_init)
    (world.home / "plain.txt").unlink()
    config = '[processes]\nunconfined = "always"\n'
    async with world.session(config=config) as s:
        out = await s.ok("run_command", {"shell": script})
        assert out["unconfined"]["why"] == '[processes] unconfined = "always"', out
        assert out["file_changes_journaled"] is False, out
        assert out["stdout"] == host_init, "the host's pid namespace"
        assert (world.home / "plain.txt").read_text() == "made\n"
        await s.err("run_command", {"shell": "true", "dry_run": True}, "command_invalid")
    shown = "".join(world.run("replay", "show", x["id"], "--json").stdout for x in session_ids(world))
    assert '"unconfined"' in shown and "[processes] unconfined" in shown, shown[-1500:]
    played_back(world)
    proc = world.run("exec", "--policy", str(world.write_config(config)), "--", "sh", "-c", "echo via-exec; exit 3")
    assert proc.returncode == 3 and proc.stdout == "via-exec\n", proc.stdout + proc.stderr


def test_an_unknown_unconfined_setting_is_a_config_error(world):
    proc = world.run("exec", "--policy", str(world.write_config('[processes]\nunconfined = "sometimes"\n')), "--", "true")
    assert proc.returncode != 0 and "processes.unconfined" in proc.stderr, proc.stdout + proc.stderr


async def test_what_if_judges_a_commands_file_changes_under_the_other_policy(world):
    """`aido replay what-if` re-judges what each command changed, not only its command line: a
    policy whose deny globs cover a file the command wrote (or a link it made into one) would
    have refused the command's changes, and says so naming the path."""
    async with world.session() as s:
        await s.ok("run_command", {"shell": "mkdir -p reports && echo r > reports/out.txt"})
        await s.ok("run_command", {"shell": "echo fine > ok.txt && ln -s ok.txt ok.link"})
        await s.ok("run_command", {"shell": "ln -s reports/out.txt peek"})
    [session] = session_ids(world)
    strict = world.write_config('[paths]\ndeny = ["**/reports/**"]\n')
    proc = world.run("replay", "what-if", session["id"], "--policy", str(strict), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    changed = json.loads(proc.stdout)
    home = str(world.home.resolve())
    said = {c["seq"]: c["other"] for c in changed}
    assert len(changed) == 2, changed
    first, third = sorted(said)
    assert said[first]["code"] == "path_denied_by_pattern", said
    assert said[first]["leaf"] in (f"changes[{home}/reports]", f"changes[{home}/reports/out.txt]"), said
    # The link is refused for where it points.
    assert said[third]["leaf"] == f"changes[{home}/peek]", said
    assert all(c["primitive"] == "run_command" and c["recorded"]["verdict"] == "allow" for c in changed), changed
    # Under the policy it ran with, nothing differs.
    same = world.run("replay", "what-if", session["id"], "--policy", str(world.write_config("")), "--json")
    assert same.returncode == 0 and json.loads(same.stdout) == [], same.stdout + same.stderr


async def test_the_policys_change_set_caps_refuse_a_command_whole_and_bound_its_largest_file(world):
    """Issue 25, point 3: `[processes] change_files_max` and `change_bytes_max` refuse a
    command's change set whole with `command_changes_too_large`, before anything lands; the
    same cap is the largest file a command may write (RLIMIT_FSIZE follows the policy)."""
    config = "[processes]\nchange_files_max = 50\nchange_bytes_max = 1048576\n"
    async with world.session(config=config) as s:
        many = await s.call("run_command", {"shell": "mkdir many && for i in $(seq 100); do echo $i > many/$i; done"})
        assert err(many)["code"] == "command_changes_too_large", many
        assert not (world.home / "many").exists()
        heavy = await s.call("run_command", {"shell": "for i in 1 2 3; do head -c 400000 /dev/urandom > heavy.$i; done"})
        assert err(heavy)["code"] == "command_changes_too_large", heavy
        assert not list(world.home.glob("heavy.*"))
        # One file past the cap cannot even be written inside: the kernel stops it (SIGXFSZ).
        big = await s.ok("run_command", {"shell": "head -c 2000000 /dev/zero > big; echo $?"})
        assert big["stdout"].strip() == "153", big  # 128 + SIGXFSZ
        assert (world.home / "big").stat().st_size == 1048576, big
        # Within the caps, a command's changes land.
        fine = await s.ok("run_command", {"shell": "mkdir few && for i in $(seq 10); do echo $i > few/$i; done"})
        assert fine["exit_code"] == 0 and len(list((world.home / "few").iterdir())) == 10, fine


async def test_a_command_has_the_users_environment_and_toolchains_without_env(world, tmp_path):
    """Issue 27, point 1: with the default policy and no `env` argument, a command starts with
    the user's PATH, HOME, locale and toolchain homes (`[processes] env_inherit`), never a
    secret-looking variable; `~` and `$HOME` in `env` and `cwd` are the user's home; and the
    user's own toolchains work: cargo (wherever rustup put it), git, a venv's pytest."""
    cargo = shutil.which("cargo")
    assert cargo, "cargo is on the test's PATH (scripts/setup-debian installs the toolchain)"
    # The toolchain where the user's environment says it is. When it lies outside the user's
    # home (CI's rustup in /root while the test's HOME is a temp dir), the user's policy reads
    # it; a developer whose ~/.cargo is in HOME needs no line at all.
    cargo_home = Path(os.environ.get("CARGO_HOME", Path(cargo).resolve().parent.parent))
    rustup_home = Path(os.environ.get("RUSTUP_HOME", cargo_home.parent / ".rustup"))
    outside = [str(p) for p in (cargo_home, rustup_home) if not p.resolve().is_relative_to(world.home.resolve())]
    print("toolchain:", cargo_home, rustup_home, "read roots added:", outside)
    config = ("[paths]\nread = [\"~\", %s]\n" % ", ".join(json.dumps(p) for p in outside)) if outside else ""
    env = {"CARGO_HOME": str(cargo_home), "RUSTUP_HOME": str(rustup_home),
           "PATH": f"{Path(cargo).parent}:/usr/bin:/bin", "LC_TIME": "C.UTF-8",
           "GITHUB_TOKEN": "ghp_never_passed", "UNLISTED_VAR": "never"}
    crate = world.home / "proj"
    (crate / "src").mkdir(parents=True)
    (crate / "Cargo.toml").write_text('[package]\nname = "proj"\nversion = "0.1.0"\nedition = "2021"\n')
    (crate / "src" / "lib.rs").write_text("#[test]\nfn adds() { assert_eq!(1 + 1, 2); }\n")
    repo = world.home / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a.txt").write_text("a\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    web = world.home / "web"
    web.mkdir()
    (web / "package.json").write_text(json.dumps({"name": "web", "version": "1.0.0",
                                                  "scripts": {"test": "node test.js"}}))
    (web / "test.js").write_text("require('assert').strictEqual(1 + 1, 2); console.log('node ok');\n")
    gomod = world.home / "gomod"
    gomod.mkdir()
    (gomod / "go.mod").write_text("module example.com/gomod\n\ngo 1.19\n")
    (gomod / "add.go").write_text("package gomod\n\nfunc Add(a, b int) int { return a + b }\n")
    (gomod / "add_test.go").write_text('package gomod\n\nimport "testing"\n\n'
                                       'func TestAdd(t *testing.T) { if Add(1, 1) != 2 { t.Fatal("no") } }\n')
    go = shutil.which("go") or shutil.which("go", path="/usr/lib/go/bin")
    async with world.session(config=config, env=env) as s:
        npm = await s.ok("run_command", {"shell": "npm test 2>&1", "cwd": "~/web", "timeout_ms": 120000})
        assert npm["exit_code"] == 0 and "node ok" in npm["stdout"], npm
        if go:
            gone = await s.ok("run_command", {"shell": f"{go} test ./... 2>&1", "cwd": "~/gomod",
                                              "timeout_ms": 300000})
            assert gone["exit_code"] == 0 and "ok  \texample.com/gomod" in gone["stdout"], gone
        else:
            print("go is not installed (scripts/setup-debian installs golang-go): go test not run")
        shown = await s.ok("run_command", {"shell": "echo $HOME; echo $PATH; echo $LC_TIME; "
                                                    "echo token=${GITHUB_TOKEN:-none} unlisted=${UNLISTED_VAR:-none}"})
        assert shown["stdout"].splitlines() == [
            str(world.home), env["PATH"], "C.UTF-8", "token=none unlisted=none"], shown
        expanded = await s.ok("run_command", {"shell": "echo $WHERE; pwd", "cwd": "$HOME/proj",
                                              "env": {"WHERE": "~/proj:$HOME/x"}})
        assert expanded["stdout"].splitlines() == [
            f"{world.home}/proj:{world.home}/x", str(crate.resolve())], expanded
        built = await s.ok("run_command", {"shell": "cargo test --offline -q 2>&1", "cwd": "~/proj",
                                           "timeout_ms": 300000})
        assert built["exit_code"] == 0 and "1 passed" in built["stdout"], built
        gitted = await s.ok("run_command", {"shell": "echo b > a.txt && git status --short && git log --oneline | wc -l",
                                             "cwd": "~/repo"})
        assert gitted["exit_code"] == 0 and gitted["stdout"].split() == ["M", "a.txt", "1"], gitted
        venv = await s.ok("run_command", {"shell": "python3 -m venv .venv && .venv/bin/python -c 'import sys; print(sys.prefix)'",
                                          "cwd": "~/proj", "timeout_ms": 120000})
        assert venv["exit_code"] == 0 and venv["stdout"].strip() == str(crate / ".venv"), venv
    assert (crate / "target").is_dir() and (crate / ".venv" / "bin" / "python").exists()
    # The record holds the environment the command had, never the secret.
    dumped = world.run("replay", "export", session_ids(world)[0]["id"], "--jsonl")
    assert "ghp_never_passed" not in dumped.stdout and env["PATH"] in dumped.stdout


async def test_a_command_not_found_names_the_path_it_searched_and_the_setting(world):
    """Issue 27, point 6: a program that is not on the command's PATH is a coded error naming
    the program, the PATH the sandbox had, and the settings that change it — not "errno 2"."""
    async with world.session(env={"PATH": "/usr/local/bin:/usr/bin:/bin"}) as s:
        missing = err(await s.call("run_command", {"argv": ["cargo-that-is-not-here", "build"]}))
        assert missing["code"] == "sandbox_exec_failed", missing
        message = missing["message"]
        assert message.startswith("command not found: cargo-that-is-not-here"), message
        assert "(/usr/local/bin:/usr/bin:/bin)" in message and "env_inherit" in message, message


async def test_a_dev_server_and_its_tests_meet_on_the_commands_own_loopback(world):
    """Issue 27, point 3 (first part): every command has a loopback of its own, so a dev
    server started in the background of a shell and the tests run against it work; the host's
    loopback stays out of reach."""
    (world.home / "site").mkdir()
    (world.home / "site" / "index.html").write_text("<h1>dev</h1>\n")
    host = socket.socket()
    host.bind(("127.0.0.1", 0))
    host.listen()
    host.setblocking(False)
    script = (
        "python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 & "
        "for i in $(seq 50); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8000))' 2>/dev/null && break; sleep 0.1; done; "
        "python3 -c 'import urllib.request as u; print(u.urlopen(\"http://127.0.0.1:8000/index.html\").read().decode(), end=\"\")'; "
        f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {host.getsockname()[1]}), timeout=2)' 2>/dev/null && echo HOST || echo host-unreachable; "
        "kill %1"
    )
    async with world.session() as s:
        out = await s.ok("run_command", {"shell": script, "cwd": "~/site", "timeout_ms": 30000})
        assert out["stdout"] == "<h1>dev</h1>\nhost-unreachable\n", out
    with pytest.raises(BlockingIOError):
        host.accept()
    host.close()


async def test_the_project_is_the_directory_the_client_started_aido_in(world):
    """Issue 27, point 2: `aido mcp` started by a client in its project makes that directory
    the workdir: relative paths and commands start there; `--workdir` names another; a config
    file's `workdir` wins over where aido started; outside every write root it stays `~`."""
    proj = world.home / "project-dir"
    proj.mkdir()
    other = world.home / "other-dir"
    other.mkdir()
    async with world.session(cwd=proj) as s:
        await s.ok("write_file", {"path": "notes.txt", "content": "here\n"})
        out = await s.ok("run_command", {"shell": "pwd; cat notes.txt"})
        assert out["stdout"] == f"{proj.resolve()}\nhere\n", out
    assert (proj / "notes.txt").read_text() == "here\n"
    async with world.session(cwd=proj, extra_args=("--workdir", str(other))) as s:
        out = await s.ok("run_command", {"argv": ["pwd"]})
        assert out["stdout"] == f"{other.resolve()}\n", out
    async with world.session(cwd=proj, config=f'workdir = "{other}"\n') as s:
        out = await s.ok("run_command", {"argv": ["pwd"]})
        assert out["stdout"] == f"{other.resolve()}\n", out
    async with world.session(cwd=Path("/")) as s:
        out = await s.ok("run_command", {"argv": ["pwd"]})
        assert out["stdout"] == f"{world.home.resolve()}\n", out


async def test_a_command_without_network_is_told_why_a_name_did_not_resolve(world):
    """Issue 27, point 6: a command without network whose tool failed to resolve a name gets
    a hint in its result saying it has no network and which setting gives it some."""
    async with world.session() as s:
        out = await s.ok("run_command", {"argv": ["python3", "-c", "import socket; socket.getaddrinfo('pypi.org', 443)"]})
        assert out["exit_code"] != 0, out
        assert "[processes] egress" in out["hint"] and "no network" in out["hint"], out
        fine = await s.ok("run_command", {"argv": ["true"]})
        assert "hint" not in fine, fine
    played_back(world)


async def test_a_sessions_commands_share_a_tmp_that_goes_with_the_session(world):
    """Issue 27, point 4: `/tmp` is one per session, shared by its commands and its background
    commands, not by another session's; `private_tmp` (and a dry run) gets an empty one of its
    own; the directory is gone when the session ends."""
    layers = world.aido_home / "layers"
    async with world.session() as s, world.session() as other:
        await s.ok("run_command", {"shell": "echo built > /tmp/artifact"})
        later = await s.ok("run_command", {"shell": "cat /tmp/artifact"})
        assert later["stdout"] == "built\n", later
        own = await s.ok("run_command", {"shell": "cat /tmp/artifact 2>/dev/null || echo none",
                                         "private_tmp": True})
        assert own["stdout"] == "none\n", own
        dry = await s.ok("run_command", {"shell": "cat /tmp/artifact 2>/dev/null || echo none; echo x > /tmp/dry",
                                         "dry_run": True})
        assert dry["stdout"] == "none\n", dry
        theirs = await other.ok("run_command", {"shell": "cat /tmp/artifact 2>/dev/null || echo none"})
        assert theirs["stdout"] == "none\n", theirs
        # A background command and a later command meet in it too.
        handle = (await s.ok("run_command", {"shell": "echo served > /tmp/from-server; sleep 30",
                                             "background": True}))["handle"]
        seen = ""
        for _ in range(50):
            seen = (await s.ok("run_command", {"shell": "cat /tmp/from-server 2>/dev/null"}))["stdout"]
            if seen:
                break
            await anyio.sleep(0.1)
        assert seen == "served\n", seen
        await s.ok("stop_handle", {"handle": handle})
        kind = (await s.ok("run_command", {"shell": "stat -f -c %T /tmp"}))["stdout"].strip()
        dirs = sorted(p.name for p in layers.iterdir() if p.name.startswith("tmp-")) if layers.exists() else []
        if os.geteuid() == 0:
            # aido as root: a tmpfs of its own size, in no mount table of the host.
            print("aido as root: the session's /tmp is a detached tmpfs")
            assert kind == "tmpfs" and dirs == [], (kind, dirs)
            assert str(world.aido_home) not in Path("/proc/self/mountinfo").read_text()
        else:
            print("aido as a user: the session's /tmp is a directory in AIDO_HOME/layers")
            assert len(dirs) == 2, dirs
            assert not list(layers.glob("tmp-*/dry")), "a dry run's /tmp is its own"
    assert not layers.exists() or not [p for p in layers.iterdir() if p.name.startswith("tmp-")]
    played_back(world)


@pytest.mark.filterwarnings("ignore:The roots capability is deprecated")
async def test_the_clients_first_root_is_the_project_and_a_changed_list_is_followed(world):
    """Issue 27, point 2: a client that declares MCP roots has its first `file://` root as the
    session's working directory (inside a write root), journaled as `workdir_changed`;
    `roots/list_changed` is followed; a root outside every write root is not taken and the
    client is told why; what-if judges each action from where the session was."""
    from mcp import types

    first = world.home / "proj a"  # a space: the URI is percent-encoded
    second = world.home / "proj-b"
    for d in (first, second):
        d.mkdir()
    roots = [first]
    warnings: list[str] = []

    async def list_roots(_context):
        return types.ListRootsResult(roots=[types.Root(uri=r.as_uri()) for r in roots])

    async def logged(params):
        warnings.append(json.dumps(params.data))

    async with world.session(list_roots_callback=list_roots, logging_callback=logged) as s:
        await s.ok("write_file", {"path": "a.txt", "content": "in a\n"})
        where = await s.ok("run_command", {"argv": ["pwd"]})
        assert where["stdout"] == f"{first.resolve()}\n", where
        roots = [second]
        await s.session.send_roots_list_changed()
        for _ in range(50):
            where = await s.ok("run_command", {"argv": ["pwd"]})
            if where["stdout"] == f"{second.resolve()}\n":
                break
            await anyio.sleep(0.1)
        assert where["stdout"] == f"{second.resolve()}\n", where
        await s.ok("write_file", {"path": "b.txt", "content": "in b\n"})
        roots = [world.outside]
        await s.session.send_roots_list_changed()
        for _ in range(50):
            if warnings:
                break
            await anyio.sleep(0.1)
        assert any("not a directory inside a write root" in w for w in warnings), warnings
        still = await s.ok("run_command", {"argv": ["pwd"]})
        assert still["stdout"] == f"{second.resolve()}\n", still
    assert (first / "a.txt").read_text() == "in a\n" and (second / "b.txt").read_text() == "in b\n"
    sid = session_ids(world)[0]["id"]
    shown = world.run("replay", "show", sid)
    assert f"working directory now {first.resolve()} (from mcp_roots)" in shown.stdout, shown.stdout
    # Under a policy that may write only proj-b, what-if refuses a.txt (judged in proj a) and
    # keeps b.txt (judged in proj-b).
    other = world.write_config(f'[paths]\nwrite = ["{second}"]\n')
    changed = world.run_json("replay", "what-if", sid, "--policy", str(other), "--json")
    paths = json.dumps(changed)
    assert "a.txt" in paths and "b.txt" not in paths, changed


def test_node_s_own_fetch_runs_as_in_the_user_s_shell(world):
    """V8 reserves a large virtual range for every WebAssembly memory (node's fetch parses HTTP
    with one); the command's cgroup bounds its memory, not an address-space limit that would
    refuse the reservation."""
    script = (
        "WebAssembly.instantiate(new Uint8Array([0,97,115,109,1,0,0,0,5,3,1,0,1]))"
        ".then(() => console.log('wasm ok'), e => console.log('wasm failed: ' + e.message))"
    )
    proc = world.run("exec", "--", "node", "-e", script)
    assert proc.returncode == 0 and "wasm ok" in proc.stdout, (proc.stdout, proc.stderr)
