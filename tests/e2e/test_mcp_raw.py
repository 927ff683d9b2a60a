"""`aido mcp` spoken to line by line over its stdin/stdout, without an SDK in between.

For what an SDK hides: the exact wire, a garbage line, and how the process ends (stdin closed,
SIGTERM, SIGKILL) with the journal still whole afterwards.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import threading
import time
from typing import Any

import pytest

from conftest import describe


class Raw:
    def __init__(self, world: Any, config: str | None = None):
        self.world = world
        log = world.root / "logs" / "raw.stderr"
        log.parent.mkdir(parents=True, exist_ok=True)
        world.logs.append(log)
        args = [str(world.bin), "mcp"]
        if config is not None:
            args += ["--config", str(world.write_config(config))]
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(log, "w"),
            bufsize=0,
            env=world.env(),
            cwd=world.home,
        )
        self.notifications: list[dict[str, Any]] = []
        self.other_responses: list[dict[str, Any]] = []
        self.buffer = b""

    def send_line(self, line: bytes, timeout: float = 30) -> None:
        """Write one line. In a thread, so a server that stops reading a big line fails the
        test after `timeout` instead of blocking it on a full pipe."""
        assert self.proc.stdin is not None
        stdin = self.proc.stdin

        def write() -> None:
            stdin.write(line + b"\n")
            stdin.flush()

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        writer.join(timeout)
        assert not writer.is_alive(), f"the server did not read a {len(line)}-byte line within {timeout}s"

    def send(self, message: dict[str, Any]) -> None:
        self.send_line(json.dumps({"jsonrpc": "2.0", **message}).encode())

    def read(self, timeout: float = 10) -> dict[str, Any]:
        """The next message. Reads the pipe unbuffered: select() on a buffered reader would
        miss a second line that already sits in Python's buffer."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no complete message from the server within {timeout}s (have {self.buffer[:200]!r})"
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 1 << 16)
                assert chunk, f"the server closed stdout (exit code {self.proc.poll()})"
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def response(self, id_: Any, timeout: float = 10) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            msg = self.read(max(0.1, deadline - time.monotonic()))
            if "method" in msg:
                self.notifications.append(msg)
            elif msg.get("id") == id_:
                return msg
            else:
                self.other_responses.append(msg)

    def request(self, id_: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.send({"id": id_, "method": method, **({"params": params} if params is not None else {})})
        return self.response(id_)

    def initialize(self) -> dict[str, Any]:
        init = self.request(
            0,
            "initialize",
            {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw-e2e", "version": "1"}},
        )
        self.send({"method": "notifications/initialized"})
        return init

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


@pytest.fixture
def raw(world):
    r = Raw(world)
    yield r
    r.close()


def test_the_wire(raw, world):
    init = raw.initialize()
    assert init["result"]["protocolVersion"] == "2025-11-25"
    assert init["result"]["serverInfo"]["name"] == "aido"

    resp = raw.request(1, "tools/call", {"name": "write_file", "arguments": {"path": "~/w.txt", "content": "wire"}})
    result = resp["result"]
    assert result["isError"] is False
    assert result["structuredContent"]["bytes"] == 4
    assert isinstance(result["_meta"]["aido/seq"], int)
    assert (world.home / "w.txt").read_text() == "wire"

    # An unknown method is a JSON-RPC error, not a crash.
    resp = raw.request("str-id", "no/such/method")
    assert resp["error"]["code"] == -32601, resp
    resp = raw.request(2, "tools/call", {"name": "no_such_tool", "arguments": {}})
    assert resp["error"]["code"] == -32602 and "unknown_primitive" in json.dumps(resp["error"]), resp
    assert raw.request(3, "ping") == {"jsonrpc": "2.0", "id": 3, "result": {}}


def test_a_garbage_line_does_not_kill_the_server(raw, world):
    raw.initialize()
    raw.send_line(b"{this is not json")
    raw.send_line(b"")
    raw.send_line(b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": 7}')
    # Arguments that are not an object at all: an error response (of some JSON-RPC code).
    resp = raw.request(2, "tools/call", {"name": "read_file", "arguments": "~/notes.txt"})
    assert "error" in resp or resp["result"]["isError"] is True, resp
    resp = raw.request(3, "tools/call", {"name": "read_file", "arguments": {"path": "~/notes.txt"}})
    assert resp["result"]["structuredContent"]["content"] == "hello\nworld\n", resp
    assert raw.proc.poll() is None


@pytest.mark.parametrize("how", ["stdin_closed", "SIGTERM", "SIGKILL"])
def test_the_journal_is_whole_however_the_server_ends(raw, world, how):
    raw.initialize()
    resp = raw.request(1, "tools/call", {"name": "write_file", "arguments": {"path": "~/end.txt", "content": "e"}})
    seq = resp["result"]["_meta"]["aido/seq"]
    if how == "stdin_closed":
        raw.proc.stdin.close()
        assert raw.proc.wait(10) == 0, "the server exits cleanly when its client goes away"
    elif how == "SIGTERM":
        raw.proc.send_signal(signal.SIGTERM)
        assert raw.proc.wait(10) == 0, "SIGTERM ends the session cleanly"
    else:
        raw.proc.send_signal(getattr(signal, how))
        raw.proc.wait(10)

    sessions = world.run_json("replay", "sessions", "--json")
    sessions = sessions.get("sessions") if isinstance(sessions, dict) else sessions
    assert len(sessions) == 1, sessions
    sid = sessions[0]["id"]
    proc = world.run("replay", "verify", sid)
    assert proc.returncode == 0, describe(proc)
    proc = world.run("replay", "export", sid, "--jsonl")
    assert proc.returncode == 0, describe(proc)
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    events = [r["event"] for r in records]
    assert "action_completed" in events and any(r.get("proposal") == seq for r in records), events
    if how in ("stdin_closed", "SIGTERM"):
        assert events[-1] == "session_ended", events
        if how == "SIGTERM":
            assert "SIGTERM" in records[-1]["reason"], records[-1]


def test_a_cancelled_pipeline_stops_between_steps_and_the_journal_says_so(raw, world):
    raw.initialize()
    steps = [{"type": "write_file", "path": f"~/cancel/f{i:03}.txt", "content": str(i)} for i in range(400)]
    raw.send({"id": 7, "method": "tools/call", "params": {"name": "pipeline", "arguments": {"steps": steps}}})
    # Let a few steps run, then cancel the request.
    deadline = time.monotonic() + 10
    while not (world.home / "cancel" / "f001.txt").exists():
        assert time.monotonic() < deadline, "the pipeline never started"
        time.sleep(0.001)
    raw.send({"method": "notifications/cancelled", "params": {"requestId": 7, "reason": "the user changed their mind"}})
    # The session keeps serving.
    resp = raw.request(8, "tools/call", {"name": "read_file", "arguments": {"path": "~/notes.txt"}})
    assert resp["result"]["isError"] is False, resp
    # The pipeline's outcome reaches the journal: cancelled, with the steps that did run.
    deadline = time.monotonic() + 20
    while True:
        sessions = world.run_json("replay", "sessions", "--json")
        sid = sessions[0]["id"]
        proc = world.run("replay", "export", sid, "--jsonl")
        records = [json.loads(line) for line in proc.stdout.splitlines()]
        proposal = next(r for r in records if r["event"] == "action_proposed" and r["action"]["type"] == "pipeline")
        ends = [r for r in records if r.get("proposal") == proposal["seq"]]
        if ends:
            break
        assert time.monotonic() < deadline, "the cancelled pipeline never recorded its end"
        time.sleep(0.05)
    end = ends[0]
    assert end["event"] == "action_failed" and end["failure"]["code"] == "cancelled", end
    written = sorted(p.name for p in (world.home / "cancel").iterdir())
    assert 0 < len(written) < 400, f"{len(written)} of 400 steps ran"
    files = [e for e in end["effects"] if e["effect"] == "file_written"]
    assert len(files) == len(written), "every step that ran is in the record, no more"
    # The directory the first write created is journaled too (a rewind removes it again).
    assert [e["effect"] for e in end["effects"]][0] == "dir_created"


# ---- every request gets an answer (issue point 16) ----------------------------------------

# The default policy's limit: 3 x argument_bytes_max (8388608) + 64 KiB for the envelope.
REQUEST_BYTES_MAX_DEFAULT = 3 * 8388608 + 65536

DEEP = 100_000
BAD_LINES = [
    # (name, line, JSON-RPC code, data.code, the id the answer carries)
    ("not_json", b"{this is not json", -32700, "parse_error", None),
    ("not_json_after_the_id", b'{"jsonrpc":"2.0","id":"n1","method":"tools/list",', -32700, "parse_error", "n1"),
    (
        "invalid_utf8",
        b'{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"~/\xff\xfe.txt"}}}',
        -32700,
        "invalid_utf8",
        12,
    ),
    ("deep_nesting", b"[" * DEEP + b"]" * DEEP, -32700, "nesting_too_deep", None),
    (
        "deep_nesting_with_an_id",
        b'{"jsonrpc":"2.0","method":"tools/list","params":{"cursor":' + b"[" * DEEP + b"]" * DEEP + b'},"id":13}',
        -32700,
        "nesting_too_deep",
        13,
    ),
    ("batch", b"[1,2]", -32600, "batch_not_supported", None),
    ("number", b"42", -32600, "not_an_object", None),
    ("no_jsonrpc_version", b'{"id":14,"method":"tools/list"}', -32600, "jsonrpc_version_invalid", 14),
    ("method_not_a_string", b'{"jsonrpc":"2.0","id":15,"method":7}', -32600, "method_not_string", 15),
    ("params_not_an_object", b'{"jsonrpc":"2.0","id":16,"method":"tools/call","params":7}', -32602, "invalid_params", 16),
    (
        "arguments_not_an_object",
        b'{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"read_file","arguments":"~/notes.txt"}}',
        -32602,
        "invalid_params",
        17,
    ),
]


def next_answer(raw: Raw, timeout: float = 10) -> dict[str, Any]:
    """The next response (notifications set aside): the one a bad line must get."""
    deadline = time.monotonic() + timeout
    while True:
        msg = raw.read(max(0.1, deadline - time.monotonic()))
        if "method" in msg:
            raw.notifications.append(msg)
        else:
            return msg


def assert_serving(raw: Raw, id_: Any) -> None:
    """The connection still serves: a normal call right after is answered normally."""
    resp = raw.request(id_, "tools/call", {"name": "read_file", "arguments": {"path": "~/notes.txt"}})
    assert resp["result"]["structuredContent"]["content"] == "hello\nworld\n", resp
    assert raw.other_responses == [], f"answers nobody asked for: {raw.other_responses}"


@pytest.mark.parametrize("name, line, rpc_code, code, id_", BAD_LINES, ids=[c[0] for c in BAD_LINES])
def test_every_bad_line_gets_exactly_one_coded_answer(raw, world, name, line, rpc_code, code, id_):
    raw.initialize()
    raw.send_line(line)
    resp = next_answer(raw)
    assert resp.get("id", "missing") == id_, resp
    assert resp["jsonrpc"] == "2.0" and "result" not in resp, resp
    assert resp["error"]["code"] == rpc_code, resp
    assert resp["error"]["data"]["code"] == code, resp
    assert resp["error"]["message"], resp
    assert_serving(raw, 100)
    # ... and again, for a server that answered once and then stopped reading.
    raw.send_line(line)
    assert next_answer(raw)["error"]["data"]["code"] == code
    assert_serving(raw, 101)


def test_a_bad_notification_gets_no_answer(raw, world):
    raw.initialize()
    raw.send_line(b'{"jsonrpc":"2.0","method":"notifications/progress","params":7}')
    raw.send_line(b"")
    raw.send_line(b"   ")
    assert_serving(raw, 1)


def test_a_50_mb_tools_call_is_refused_with_its_id_quickly_and_journaled(raw, world):
    raw.initialize()
    content = "x" * 50_000_000
    line = json.dumps(
        {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "write_file", "arguments": {"path": "~/huge.txt", "content": content}}, "id": "big-1"}
    ).encode()
    started = time.monotonic()
    raw.send_line(line)
    resp = next_answer(raw, timeout=60)
    took = time.monotonic() - started
    assert resp["id"] == "big-1", resp
    assert resp["error"]["code"] == -32600, resp
    data = resp["error"]["data"]
    assert data == {"code": "request_too_large", "bytes": len(line), "max": REQUEST_BYTES_MAX_DEFAULT}, resp
    assert not (world.home / "huge.txt").exists()
    assert_serving(raw, 2)
    print(f"the 50 MB line was answered {took:.2f}s after it was sent")

    # The journal shows the attempt.
    sessions = world.run_json("replay", "sessions", "--json")
    sessions = sessions.get("sessions") if isinstance(sessions, dict) else sessions
    proc = world.run("replay", "export", sessions[0]["id"], "--jsonl")
    assert proc.returncode == 0, describe(proc)
    records = [json.loads(l) for l in proc.stdout.splitlines()]
    rejected = [r for r in records if r["event"] == "call_rejected"]
    assert [(r["tool"], r["code"]) for r in rejected] == [("write_file", "request_too_large")], rejected


def test_the_largest_line_aido_accepts_is_request_bytes_max(raw, world):
    """With argument_bytes_max = 4096 the limit is 3 * 4096 + 65536 = 77824 bytes: a line of
    exactly that many bytes is served, one byte more is refused with its id."""
    raw.close()
    raw = Raw(world, config="[limits]\nargument_bytes_max = 4096\n")
    try:
        raw.initialize()
        limit = 3 * 4096 + 65536

        def padded(id_: int, size: int) -> bytes:
            head = json.dumps({"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "~/notes.txt"}}}).encode()
            return head[:-1] + b" " * (size - len(head)) + b"}"

        line = padded(1, limit)
        assert len(line) == limit
        raw.send_line(line)
        resp = raw.response(1)
        assert resp["result"]["structuredContent"]["content"] == "hello\nworld\n", resp

        line = padded(2, limit + 1)
        raw.send_line(line)
        resp = raw.response(2)
        assert resp["error"]["data"] == {"code": "request_too_large", "bytes": limit + 1, "max": limit}, resp
        assert_serving(raw, 3)
    finally:
        raw.close()


# ---- the lifecycle and ids in flight (hardening) ------------------------------------------


def test_a_call_before_initialize_gets_a_coded_answer_naming_the_offered_revisions(raw, world):
    raw.send({"id": 1, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "~/notes.txt"}}})
    resp = next_answer(raw)
    assert resp["id"] == 1, resp
    assert resp["error"]["code"] == -32600, resp
    data = resp["error"]["data"]
    assert data["code"] == "not_initialized", resp
    assert data["supported"] == ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"], resp
    message = resp["error"]["message"]
    assert "send initialize first" in message, message
    assert "2026" not in message and "_meta" not in message, message
    # A notification before initialize is dropped, not fatal; ping is answered.
    raw.send({"method": "notifications/initialized"})
    assert raw.request("p", "ping") == {"jsonrpc": "2.0", "id": "p", "result": {}}
    # Then the handshake and the call are served as ever.
    assert raw.initialize()["result"]["protocolVersion"] == "2025-11-25"
    assert_serving(raw, 2)


def test_a_request_whose_id_is_in_flight_is_refused_and_the_first_is_still_answered(raw, world):
    raw.initialize()
    steps = [{"type": "write_file", "path": f"~/dup/f{i:03}.txt", "content": str(i)} for i in range(200)]
    first = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "pipeline", "arguments": {"steps": steps}}}
    second = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "~/notes.txt"}}}
    # Both in one write: the second is read while the first is certainly still running.
    raw.send_line(json.dumps(first).encode() + b"\n" + json.dumps(second).encode())
    answers = [next_answer(raw, timeout=60), next_answer(raw, timeout=60)]
    assert [a["id"] for a in answers] == [7, 7], answers
    refused, answered = answers
    assert refused["error"]["code"] == -32600, refused
    assert refused["error"]["data"]["code"] == "request_id_in_flight", refused
    assert answered["result"]["isError"] is False, answered
    assert len(list((world.home / "dup").iterdir())) == 200
    # Answered: the id may be used again.
    resp = raw.request(7, "tools/call", {"name": "read_file", "arguments": {"path": "~/dup/f000.txt"}})
    assert resp["result"]["structuredContent"]["content"] == "0", resp
    assert_serving(raw, 8)
    # The refused call is in the journal as a rejected call.
    sessions = world.run_json("replay", "sessions", "--json")
    sessions = sessions.get("sessions") if isinstance(sessions, dict) else sessions
    proc = world.run("replay", "export", sessions[0]["id"], "--jsonl")
    assert proc.returncode == 0, describe(proc)
    records = [json.loads(l) for l in proc.stdout.splitlines()]
    rejected = [(r["tool"], r["code"]) for r in records if r["event"] == "call_rejected"]
    assert rejected == [("read_file", "request_id_in_flight")], rejected


# ---- memory is flat in the number of calls (hardening) ------------------------------------


def rss_bytes(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


CALLS = 2000
ARGUMENT_BYTES = 128 * 1024
# Generous: what stays resident is bounded (sled's page cache and the pages it has yet to page
# out, none over 4 KiB; a few megabytes of sled's own bookkeeping), not a copy of each call.
# Before the fix each call's records and blobs stayed in memory: ~0.5 MB a call at this size,
# ~750 MB more by call 2,000.
GROWTH_BYTES_MAX = 48 * 1024 * 1024


@pytest.mark.timeout(600)
def test_memory_is_flat_in_the_number_of_calls(raw, world):
    """2,000 calls of 128 KiB (stat_files with 128 KiB of paths, which stay in the record; a
    write_file of 128 KiB every tenth): resident memory between call 500 and call 2,000 grows
    by less than GROWTH_BYTES_MAX. A memory bound, not a timing one."""
    raw.initialize()
    component = "d" * 200
    rss = {}
    for i in range(1, CALLS + 1):
        if i % 10 == 0:
            params = {"name": "write_file", "arguments": {"path": f"~/soak/w{i % 7}.txt", "content": f"{i:08}" * (ARGUMENT_BYTES // 8)}}
        else:
            count = ARGUMENT_BYTES // 1024
            paths = [f"~/nope/{i}/{j}/{component}/{component}/{component}/{component}/{'e' * 170}" for j in range(count)]
            params = {"name": "stat_files", "arguments": {"paths": paths}}
        raw.send({"id": i, "method": "tools/call", "params": params})
        resp = raw.response(i, timeout=60)
        assert resp["result"]["isError"] is False, str(resp)[:500]
        if i in (500, CALLS):
            rss[i] = rss_bytes(raw.proc.pid)
    grown = rss[CALLS] - rss[500]
    print(f"aido mcp RSS: {rss[500] / 1e6:.1f} MB at call 500, {rss[CALLS] / 1e6:.1f} MB at call {CALLS}")
    assert grown < GROWTH_BYTES_MAX, f"RSS grew by {grown / 1e6:.1f} MB between call 500 and call {CALLS}"
