"""OpenTelemetry end to end: the real `aido` binary exporting over OTLP/HTTP to a real OTLP
receiver started here (oteltap, from PyPI: a native OTLP/HTTP protobuf receiver on
127.0.0.1), from both surfaces (`aido mcp` on stdio with `_meta.traceparent`, `aido serve`'s
`/actions` with a `traceparent` header); and `aido serve`'s `/metrics` scraped by a real
Prometheus (Debian's `prometheus`) started here on loopback with a temp config."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx2
import pytest
from oteltap import OtelTapHttpProtobufReceiver, OtelTapHttpProtobufReceiverSettings

from conftest import World
from helpers import ok, seq_of
from test_serve import serve

pytestmark = pytest.mark.anyio

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def attrs(item) -> dict[str, object]:
    out: dict[str, object] = {}
    for kv in item.attributes:
        kind = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, kind) if kind else None
    return out


class Tap:
    """Everything the receiver gets, kept from the start (its await_* see only later items)."""

    def __init__(self, tap: OtelTapHttpProtobufReceiver) -> None:
        self.spans: list = []
        self.logs: list = []
        self.metrics: list = []
        self.tasks = [
            asyncio.create_task(self._keep(tap.stream_traces(), self.spans)),
            asyncio.create_task(self._keep(tap.stream_logs(), self.logs)),
            asyncio.create_task(self._keep(tap.stream_metrics(), self.metrics)),
        ]

    @staticmethod
    async def _keep(stream, into: list) -> None:
        async for item in stream:
            into.append(item)

    async def started(self) -> None:
        # Each stream subscribes when its task first runs.
        for _ in range(3):
            await asyncio.sleep(0)

    async def find(self, items: list, predicate, timeout: float = 20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for item in items:
                if predicate(item):
                    return item
            await asyncio.sleep(0.05)
        raise AssertionError(f"nothing matched in {len(items)} items within {timeout} s")

    def stop(self) -> None:
        for task in self.tasks:
            task.cancel()


async def test_stdio_actions_become_spans_and_journal_records_log_records(world: World) -> None:
    port = free_port()
    settings = OtelTapHttpProtobufReceiverSettings(http_port=port)
    async with OtelTapHttpProtobufReceiver(settings) as receiver:
        tap = Tap(receiver)
        await tap.started()
        # The config names the endpoint (the standard environment is tried in the next test).
        config = f'[telemetry]\notlp_endpoint = "http://127.0.0.1:{port}"\n'
        async with world.session(config=config) as aido:
            result = await aido.call(
                "write_file",
                {"path": "traced.txt", "content": "hi\n"},
                meta={"traceparent": f"00-{TRACE_ID}-{PARENT}-01"},
            )
            ok(result)
            seq = seq_of(result)
            # Exported in the background while the session goes on (batches every 2 s).
            span = await tap.find(tap.spans, lambda s: s.name == "tools/call write_file")
            a = attrs(span)
            assert span.trace_id.hex() == TRACE_ID and span.parent_span_id.hex() == PARENT
            assert a["mcp.method.name"] == "tools/call"
            assert a["gen_ai.tool.name"] == "write_file"
            assert a["gen_ai.operation.name"] == "execute_tool"
            assert a["network.transport"] == "pipe"
            assert a["aido.journal.seq"] == seq
            session = a["mcp.session.id"]
            hash_ = a["aido.journal.hash"]
            assert isinstance(hash_, str) and len(hash_) == 64

            # The outcome record (seq + 1) as a log record: its hash is the span's, and its
            # prev_hash is the proposal's hash, which the proposal's own log record carries.
            def record(n: int):
                return lambda l: attrs(l).get("aido.journal.session") == session and attrs(l).get("aido.journal.seq") == n

            outcome = await tap.find(tap.logs, record(seq + 1))
            proposal = await tap.find(tap.logs, record(seq))
            assert attrs(outcome)["aido.journal.hash"] == hash_
            assert attrs(outcome)["aido.journal.prev_hash"] == attrs(proposal)["aido.journal.hash"]
            body = json.loads(outcome.body.string_value)
            assert body["seq"] == seq + 1 and body["hash"] == hash_
            print(f"oteltap on 127.0.0.1:{port}: span and log records of session {session} received")
        tap.stop()


async def test_serve_exports_by_the_standard_environment(world: World) -> None:
    port = free_port()
    settings = OtelTapHttpProtobufReceiverSettings(http_port=port)
    async with OtelTapHttpProtobufReceiver(settings) as receiver:
        tap = Tap(receiver)
        await tap.started()
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"}
        with serve(world, env=env) as served:
            async with httpx2.AsyncClient(timeout=30) as http:
                r = await http.post(
                    f"{served.base}/actions",
                    json={"primitive": "write_file", "arguments": {"path": "api.txt", "content": "x"}},
                    headers=served.headers(traceparent=f"00-{TRACE_ID}-{PARENT}-01"),
                )
                assert r.status_code == 200, r.text
                answer = r.json()
                assert answer["ok"], answer
            span = await tap.find(tap.spans, lambda s: s.name == "tools/call write_file")
            a = attrs(span)
            assert span.parent_span_id.hex() == PARENT
            assert a["network.transport"] == "tcp"
            assert a["aido.journal.seq"] == answer["seq"]
            assert a["mcp.session.id"] == answer["session"]
            metric = await tap.find(tap.metrics, lambda m: m.name == "aido.actions")
            assert metric.sum.data_points, metric
        tap.stop()
        # The instance id is kept in AIDO_HOME: the same runtime, the same identity.
        instance = (world.aido_home / "instance-id").read_text().strip()
        assert len(instance) == 32


def prometheus_config(path: Path, target: str, token_file: Path) -> None:
    path.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n"
        "  - job_name: aido\n"
        "    metrics_path: /metrics\n"
        "    authorization:\n"
        "      type: Bearer\n"
        f"      credentials_file: {token_file}\n"
        "    static_configs:\n"
        f"      - targets: ['{target}']\n"
    )


def start_prometheus(binary: str, config: Path, port: int, tsdb: Path, log: Path) -> subprocess.Popen:
    """Debian's prometheus on loopback with `config`, its stderr in `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as errlog:
        return subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--web.listen-address=127.0.0.1:{port}",
                f"--storage.tsdb.path={tsdb}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errlog,
        )


def query(base: str, promql: str) -> list[dict]:
    r = httpx2.get(f"{base}/api/v1/query", params={"query": promql}, timeout=5)
    r.raise_for_status()
    return r.json()["data"]["result"]


async def test_prometheus_scrapes_metrics_behind_the_token(world: World) -> None:
    with serve(world) as served:
        async with httpx2.AsyncClient(timeout=30) as http:
            for name in ("a.txt", "b.txt"):
                r = await http.post(
                    f"{served.base}/actions",
                    json={"primitive": "write_file", "arguments": {"path": name, "content": "x"}},
                    headers=served.headers(),
                )
                assert r.json()["ok"], r.text
            r = await http.post(
                f"{served.base}/actions",
                json={"primitive": "read_file", "arguments": {"path": "/etc/shadow"}},
                headers=served.headers(),
            )
            assert not r.json()["ok"]
            # /metrics is behind the bearer token like everything else.
            assert (await http.get(f"{served.base}/metrics")).status_code == 401
            deadline = time.monotonic() + 10
            while True:
                text = (await http.get(f"{served.base}/metrics", headers=served.headers())).text
                if 'aido_verdict="deny"' in text or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
            assert 'aido_actions_total{aido_class="fs_write"' in text, text
            assert "aido_policy_denials_total{" in text, text

        binary = shutil.which("prometheus")
        if binary is None:
            # Without Debian's prometheus (scripts/setup-debian installs it) the scrape above
            # is the test; say so.
            print("path: prometheus is not installed; /metrics was scraped by httpx only")
            pytest.fail("prometheus is not installed (apt-get install prometheus)")
        port = free_port()
        config = world.root / "prometheus.yml"
        prometheus_config(config, served.base.removeprefix("http://"), served.token_file)
        log = world.root / "logs" / "prometheus.stderr"
        proc = start_prometheus(binary, config, port, world.root / "tsdb", log)
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            up: list[dict] = []
            actions: list[dict] = []
            while time.monotonic() < deadline:
                try:
                    up = query(base, 'up{job="aido"} == 1')
                    actions = query(base, 'aido_actions_total{job="aido",aido_primitive="write_file"}')
                except httpx2.HTTPError:
                    pass
                if up and actions:
                    break
                await asyncio.sleep(0.5)
            assert up, f"prometheus never scraped aido: {log.read_text()[-2000:]}"
            assert float(actions[0]["value"][1]) == 2.0, actions
            denials = query(base, 'aido_policy_denials_total{job="aido",aido_gate="path_walls"}')
            assert denials and float(denials[0]["value"][1]) == 1.0, denials
            print(f"path: prometheus {binary} on {base} scraped {served.base}/metrics")
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


async def test_a_stdio_runtime_serves_metrics_on_loopback_for_prometheus(world: World) -> None:
    """`aido mcp` has no listener of its own: `[telemetry] metrics_listen` gives its /metrics
    one on loopback, which Debian's prometheus scrapes while an agent works over stdio. A
    request naming another Host (a rebound DNS name) is refused; a non-loopback address is a
    config error."""
    port = free_port()
    config = f'[telemetry]\nmetrics_listen = "127.0.0.1:{port}"\n'
    async with world.session(config=config) as s:
        await s.ok("write_file", {"path": "m.txt", "content": "x"})
        await s.ok("read_file", {"path": "m.txt"})
        await s.err("read_file", {"path": "/etc/shadow"})
        url = f"http://127.0.0.1:{port}/metrics"
        deadline = time.monotonic() + 10
        text = ""
        while time.monotonic() < deadline:
            text = httpx2.get(url, timeout=5).text
            if 'aido_primitive="read_file"' in text and "aido_policy_denials_total{" in text:
                break
            await asyncio.sleep(0.05)
        assert 'aido_actions_total{aido_class="fs_write"' in text, text
        assert "aido_policy_denials_total{" in text, text
        rebound = httpx2.get(url, headers={"Host": f"attacker.example:{port}"}, timeout=5)
        assert rebound.status_code == 403 and "serve_host_refused" in rebound.text
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail("prometheus is not installed (apt-get install prometheus)")
        prom_port = free_port()
        prom_config = world.root / "prometheus-stdio.yml"
        prom_config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n  - job_name: aido-stdio\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        )
        log = world.root / "logs" / "prometheus-stdio.stderr"
        proc = start_prometheus(binary, prom_config, prom_port, world.root / "tsdb-stdio", log)
        try:
            base = f"http://127.0.0.1:{prom_port}"
            deadline = time.monotonic() + 30
            writes: list[dict] = []
            while time.monotonic() < deadline:
                try:
                    writes = query(base, 'aido_actions_total{job="aido-stdio",aido_primitive="write_file"}')
                except httpx2.HTTPError:
                    pass
                if writes:
                    break
                await asyncio.sleep(0.5)
            assert writes and float(writes[0]["value"][1]) == 1.0, (writes, log.read_text()[-2000:])
            print(f"path: prometheus {binary} scraped aido mcp's /metrics on 127.0.0.1:{port}")
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
    bad = world.run("config", "show", config='[telemetry]\nmetrics_listen = "0.0.0.0:9464"\n')
    assert bad.returncode != 0 and "telemetry.metrics_listen" in bad.stderr, bad.stderr


async def test_a_downstream_call_is_a_span_named_by_its_tool_and_server(world: World) -> None:
    from test_gateway import everything

    script = everything()
    port = free_port()
    settings = OtelTapHttpProtobufReceiverSettings(http_port=port)
    async with OtelTapHttpProtobufReceiver(settings) as receiver:
        tap = Tap(receiver)
        await tap.started()
        config = f"""[telemetry]
otlp_endpoint = "http://127.0.0.1:{port}"

[[downstream]]
name = "everything"
command = "node"
args = ["{script}", "stdio"]
"""
        async with world.session(config=config) as aido:
            ok(await aido.call("everything__echo", {"message": "traced"}))
            span = await tap.find(tap.spans, lambda s: s.name == "tools/call everything__echo")
            a = attrs(span)
            assert a["gen_ai.tool.name"] == "everything__echo", a
            assert a["aido.downstream.server"] == "everything", a
            # Judged, and reported, by the class its annotations give (read-only).
            assert a["aido.class"] == "read_only", a
        tap.stop()
