"""Background commands (issue 9 point 4) through the real aido binary: `run_command` with
`background` returns a handle; check_handle reads output frames by cursor with a bounded
long-poll; write_stdin feeds `cat`; stop_handle kills a whole tree (a double-forked child
that ignores TERM included) and applies the command's file changes as journaled effects,
which a rewind undoes; a 1 GiB flood keeps aido's memory flat while other calls answer; a
handle outlives its client (a second client of the same `aido serve`), and after aido is
killed and started again it is reported `handle_lost`, with a journal record. Playback
reproduces every handle result without spawning anything."""

from __future__ import annotations

import os
import signal
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import anyio
import pytest

from helpers import err, ok, seq_of
from test_run_command import played_back, session_ids
from test_serve import sdk, serve

pytestmark = pytest.mark.anyio


def processes_with(marker: str) -> int:
    count = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    count += 1
        except OSError:
            pass
    return count


def wait_until(what: str, cond, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


async def read_until(call, handle: str, done, cursor: int = 0, timeout: float = 90.0):
    """check_handle from `cursor` with long-polls until `done(text, last)` holds."""
    text = ""
    deadline = time.monotonic() + timeout
    while True:
        out = await call("check_handle", {"handle": handle, "cursor": cursor, "wait_ms": 2000})
        text += "".join(f["text"] for f in out["frames"])
        cursor = out["next_cursor"]
        if done(text, out):
            return text, out
        assert time.monotonic() < deadline, (text[-500:], out)


async def test_cat_takes_input_and_check_handle_reads_frames_by_cursor(world):
    async with world.session() as s:
        tools = {t.name: t for t in (await s.session.list_tools()).tools}
        for name in ("check_handle", "write_stdin", "stop_handle", "list_handles"):
            assert name in tools, name
        assert tools["check_handle"].annotations.read_only_hint is True
        assert tools["stop_handle"].annotations.read_only_hint is False
        started = await s.ok("run_command", {"argv": ["cat"], "background": True})
        handle = started["handle"]
        assert started["background"] is True and handle.startswith("h"), started
        empty = await s.ok("check_handle", {"handle": handle, "wait_ms": 200})
        assert empty["state"] == "running" and empty["frames"] == [] and empty["next_cursor"] == 0
        wrote = await s.ok("write_stdin", {"handle": handle, "text": "hello\n"})
        assert wrote["bytes_written"] == 6
        text, first = await read_until(s.ok, handle, lambda t, _: "hello" in t)
        assert text == "hello\n" and first["frames"][0]["stream"] == "stdout", first
        await s.ok("write_stdin", {"handle": handle, "text": "bye\n", "close": True})
        text, last = await read_until(s.ok, handle, lambda _, o: o["state"] == "exited", cursor=first["next_cursor"])
        assert text == "bye\n" and last["exit_code"] == 0, last
        await s.err("write_stdin", {"handle": handle, "text": "late"}, "handle_ended")
        stopped = await s.ok("stop_handle", {"handle": handle})
        assert stopped["stopped_by"] == "already_ended" and stopped["exit_code"] == 0, stopped
        listed = await s.ok("list_handles", {})
        assert [h["state"] for h in listed["handles"] if h["handle"] == handle] == ["stopped"], listed
        await s.err("check_handle", {"handle": "h999"}, "handle_unknown")
    played_back(world)


async def test_stop_handle_kills_a_double_forked_tree_that_ignores_term(world):
    script = "M=8766; trap '' TERM; (setsid sh -c \"trap '' TERM; exec sleep ${M}01\" &); sleep ${M}02; sleep ${M}02"
    async with world.session() as s:
        handle = (await s.ok("run_command", {"shell": script, "background": True}))["handle"]
        wait_until("both sleeps", lambda: processes_with("876601") == 1 and processes_with("876602") == 1)
        stopped = await s.ok("stop_handle", {"handle": handle, "grace_ms": 300})
        assert stopped["stopped_by"] == "kill" and stopped["signal"] == 9, stopped
        wait_until("no sleep left", lambda: processes_with("876601") == 0 and processes_with("876602") == 0)
    played_back(world)


async def test_file_changes_are_applied_at_stop_and_a_rewind_undoes_them(world):
    (world.home / "kept.txt").write_text("before\n")
    script = "echo made > made.txt; echo after > kept.txt; echo ready; exec sleep 876603"
    async with world.session() as s:
        handle = (await s.ok("run_command", {"shell": script, "background": True}))["handle"]
        await read_until(s.ok, handle, lambda t, _: "ready" in t)
        # While it runs, its writes stay in its layer.
        assert not (world.home / "made.txt").exists()
        assert (world.home / "kept.txt").read_text() == "before\n"
        r = await s.call("stop_handle", {"handle": handle})
        stopped = ok(r)
        assert stopped["file_changes_journaled"] is True, stopped
        assert (world.home / "made.txt").read_text() == "made\n"
        assert (world.home / "kept.txt").read_text() == "after\n"
        await s.ok("rewind", {"before_seq": seq_of(r)})
        assert not (world.home / "made.txt").exists()
        assert (world.home / "kept.txt").read_text() == "before\n"
    played_back(world)


async def test_a_pty_command_reads_its_terminal(world):
    script = "test -t 0 && test -t 1 && echo is-a-tty; read line; echo got $line"
    async with world.session() as s:
        out = await s.ok("run_command", {"shell": script, "background": True, "pty": True})
        await s.ok("write_stdin", {"handle": out["handle"], "text": "hi\n"})
        text, last = await read_until(s.ok, out["handle"], lambda _, o: o["state"] == "exited")
        assert "is-a-tty" in text and "got hi" in text, text
        await s.ok("stop_handle", {"handle": out["handle"]})
        await s.err("run_command", {"argv": ["true"], "pty": True}, "command_invalid")
    played_back(world)


@asynccontextmanager
async def client(served) -> AsyncIterator[Any]:
    async with sdk(served) as session:
        async def call_ok(name: str, args: dict[str, Any]) -> dict[str, Any]:
            return ok(await session.call_tool(name, args))

        async def call(name: str, args: dict[str, Any]):
            return await session.call_tool(name, args)

        call_ok.raw = call  # type: ignore[attr-defined]
        yield call_ok


async def test_a_flood_keeps_aido_flat_and_other_calls_answer(world):
    (world.home / "note.txt").write_text("still here\n")
    with serve(world) as served:
        async with client(served) as call:
            before = peak_rss_kib(served.proc.pid)
            handle = (await call("run_command", {"shell": "yes | head -c 1073741824", "background": True}))["handle"]
            # Other calls answer while it floods (results asserted, not times).
            read = await call("read_file", {"path": "note.txt"})
            assert "still here" in str(read), read
            listed = await call("list_handles", {})
            assert any(h["handle"] == handle for h in listed["handles"]), listed
            # Wait for the end without reading the flood: a cursor past the end long-polls
            # until the command ends (reading it all would journal a GiB of results).
            deadline = time.monotonic() + 180
            while True:
                last = await call("check_handle", {"handle": handle, "cursor": 1 << 62, "wait_ms": 8000})
                if last["state"] == "exited":
                    break
                assert time.monotonic() < deadline, last
            # From the start: the oldest frames were dropped and are counted.
            tail = await call("check_handle", {"handle": handle, "cursor": 0})
            assert tail["missed_frames"] > 0 and tail["frames"][0]["text"].startswith("y"), tail["missed_frames"]
            assert last["stdout_bytes_total"] == 1 << 30, last
            assert last["buffer_bytes"] <= last["buffer_bytes_max"] == 1 << 20, last
            assert last["dropped_bytes"] > (1 << 30) - (2 << 20), last
            growth = peak_rss_kib(served.proc.pid) - before
            print(f"1 GiB flood: aido's peak RSS grew {growth} KiB; ring {last['buffer_bytes']} bytes")
            assert growth < 64 << 10, f"aido's peak RSS grew {growth} KiB"
            await call("stop_handle", {"handle": handle})


async def test_a_handle_outlives_its_client_and_is_lost_with_its_aido(world):
    script = "echo never > lost.txt; echo started; exec sleep 876604"
    with serve(world) as served:
        async with client(served) as call:
            handle = (await call("run_command", {"shell": script, "background": True}))["handle"]
            await read_until(call, handle, lambda t, _: "started" in t)
        # A new client of the same aido: the handle is still there, still running.
        async with client(served) as call:
            out = await call("check_handle", {"handle": handle})
            assert out["state"] == "running" and "started" in out["frames"][0]["text"], out
        # aido is killed: its command dies with it.
        served.proc.send_signal(signal.SIGKILL)
        served.proc.wait(timeout=10)
    wait_until("the command gone with aido", lambda: processes_with("876604") == 0)
    with serve(world) as served:
        async with client(served) as call:
            lost = err(await call.raw("check_handle", {"handle": handle}), "handle_lost")
            assert lost["details"]["changes_discarded"] >= 1, lost
            listed = await call("list_handles", {})
            assert [h["handle"] for h in listed["lost"]] == [handle], listed
            err(await call.raw("stop_handle", {"handle": handle}), "handle_lost")
    # Never applied, and the journal says so.
    assert not (world.home / "lost.txt").exists()
    shown = "".join(world.run("replay", "show", x["id"], "--json").stdout for x in session_ids(world))
    assert '"handle_lost"' in shown and handle in shown, shown[-2000:]
    played_back(world)


async def test_a_dev_server_in_the_background_serves_the_sessions_later_commands(world):
    """Issue 27, point 3: a session's background command and its later commands share one
    network namespace (the command's own loopback, nothing else): a dev server started with
    `background: true` answers the tests a later `run_command` runs against 127.0.0.1:PORT;
    another session does not see it; once `stop_handle` ends it, the session's next command
    has a namespace of its own again. The shared namespace is in the journaled results."""
    (world.home / "site").mkdir()
    (world.home / "site" / "index.html").write_text("<h1>dev server</h1>\n")
    fetch = ("python3 -c 'import urllib.request as u; "
             "print(u.urlopen(\"http://127.0.0.1:8123/index.html\", timeout=5).read().decode(), end=\"\")' 2>&1 | tail -1")
    async with world.session() as s, world.session() as other:
        started = await s.ok("run_command", {"shell": "exec python3 -m http.server 8123 --bind 127.0.0.1",
                                             "cwd": "~/site", "background": True})
        handle = started["handle"]
        for _ in range(100):
            out = await s.ok("run_command", {"shell": fetch})
            if out["stdout"] == "<h1>dev server</h1>\n":
                break
            await anyio.sleep(0.1)
        assert out["stdout"] == "<h1>dev server</h1>\n", out
        assert out["network"]["session_namespace"].startswith("net:["), out
        # Another session's command has its own loopback: nothing listens there.
        alone = await other.ok("run_command", {"shell": fetch})
        assert "Connection refused" in alone["stdout"] and "network" not in alone, alone
        await s.ok("stop_handle", {"handle": handle})
        after = await s.ok("run_command", {"shell": fetch})
        assert "Connection refused" in after["stdout"] and "network" not in after, after
    played_back(world)


async def test_a_dev_servers_port_is_exposed_on_the_hosts_loopback_only_when_the_policy_says(world):
    """Issue 27, point 3 (second part): `expose_ports` on a background command binds the
    host's 127.0.0.1:PORT to the command's own loopback while it runs, only for a port the
    policy's `[processes] expose_ports` lists; the exposure is in the journaled start; a port
    the policy does not list is refused whole (`expose_port_refused`, naming the setting) and
    nothing starts; stopping the handle closes the host port."""
    import socket
    import urllib.request

    (world.home / "site").mkdir()
    (world.home / "site" / "index.html").write_text("<h1>seen from the host</h1>\n")
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    server = {"shell": f"exec python3 -m http.server {port} --bind 127.0.0.1", "cwd": "~/site",
              "background": True, "expose_ports": [port]}
    async with world.session() as s:
        refused = await s.err("run_command", server, "expose_port_refused")
        assert "[processes] expose_ports" in refused["message"], refused
        assert (await s.ok("list_handles", {}))["handles"] == []
    async with world.session(config=f"[processes]\nexpose_ports = [{port}]\n") as s:
        alone = await s.err("run_command", {"argv": ["true"], "expose_ports": [port]}, "expose_port_refused")
        assert "background" in alone["message"], alone
        started = await s.ok("run_command", server)
        assert started["exposed"] == [f"127.0.0.1:{port}"], started
        page = ""
        for _ in range(100):
            try:
                page = urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=5).read().decode()
                break
            except OSError:
                await anyio.sleep(0.1)
        assert page == "<h1>seen from the host</h1>\n", page
        # Only the loopback: the host's other addresses have nothing on that port.
        listening = Path("/proc/net/tcp").read_text().splitlines()[1:]
        local = [line.split()[1] for line in listening if line.split()[3] == "0A"]
        assert f"0100007F:{port:04X}" in local and f"00000000:{port:04X}" not in local, local
        await s.ok("stop_handle", {"handle": started["handle"]})
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=2)
    shown = "".join(world.run("replay", "show", x["id"], "--json").stdout for x in session_ids(world))
    assert f'"exposed":["127.0.0.1:{port}"]' in "".join(shown.split()), shown[-3000:]
    played_back(world)
