"""The network primitives over real MCP: `aido mcp` driven by the official Python SDK client,
fetching pages from an HTTP server this test starts on 127.0.0.1.

The default policy refuses the server (net_denied); a policy naming it lets fetch_url read it
as markdown, a window at a time; a redirect from it to the metadata address is refused at that
hop; a proxy in the environment is ignored; and `aido replay playback` reproduces every
result after the server is gone.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest

from conftest import describe
from helpers import err, ok, text_of

pytestmark = pytest.mark.anyio

NET_TOOLS = {"http_request", "fetch_url", "port_check", "dns_lookup"}

PAGE = (
    "<!doctype html><html><head><title>t</title><style>body{}</style></head><body>"
    "<h1>Release notes</h1><p>Version <strong>2.0</strong> adds <a href='/docs'>docs</a>.</p>"
    + "".join(f"<p>Paragraph {n} of the long page.</p>" for n in range(200))
    + "</body></html>"
)


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:  # keep pytest's output clean
        pass

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        if self.path == "/page":
            body = PAGE.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path == "/to-metadata":
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()


@pytest.fixture
def site() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def allowing(port: int) -> str:
    return f'[net]\nallow = ["127.0.0.1:{port}", "*"]\n'


async def test_the_four_net_tools_are_listed_as_network(world):
    async with world.session() as s:
        tools = {t.name: t for t in (await s.session.list_tools()).tools}
        assert NET_TOOLS <= set(tools)
        for name in NET_TOOLS:
            assert tools[name].annotations.read_only_hint is False, name
        assert tools["fetch_url"].input_schema["required"] == ["url"]


async def test_the_default_policy_refuses_the_local_server(world, site):
    port = site.server_address[1]
    async with world.session() as s:
        refused = err(await s.call("fetch_url", {"url": f"http://127.0.0.1:{port}/page"}), "net_denied")
        assert f"127.0.0.1:{port}" in refused["message"]
        assert refused["gate"] == "net_allowlist" and refused["setting"] == "[net] allow", refused


async def test_fetch_url_through_aido_pages_and_playback_reproduces_it(world, site):
    port = site.server_address[1]
    url = f"http://127.0.0.1:{port}/page"
    # A proxy in aido's environment is ignored: aido connects to the judged address itself.
    plain_env = world.env
    world.env = lambda **extra: plain_env(  # type: ignore[method-assign]
        HTTP_PROXY="http://127.0.0.1:9", http_proxy="http://127.0.0.1:9", ALL_PROXY="http://127.0.0.1:9", **extra
    )
    async with world.session(config=allowing(port)) as s:
        first = await s.call("fetch_url", {"url": url, "length": 2000})
        page = ok(first)
        text = text_of(first)
        assert text.startswith("# Release notes\n\nVersion **2.0** adds [docs](/docs)."), text[:200]
        assert "body{}" not in text
        assert page["status"] == 200 and page["next_offset"] == 2000
        total = page["total_chars"]
        assert total > 5000
        # The next window starts where the first stopped; the last says there is no more.
        second = await s.call("fetch_url", {"url": url, "offset": page["next_offset"], "length": 100000})
        rest = ok(second)
        assert rest["next_offset"] is None and rest["offset"] == 2000
        assert text_of(second).endswith("Paragraph 199 of the long page.")
        # A redirect from the allowed server to the metadata address is refused at that hop.
        hop = err(
            await s.call("fetch_url", {"url": f"http://127.0.0.1:{port}/to-metadata"}), "net_address_refused"
        )
        assert "169.254.169.254" in hop["message"] and "metadata" in hop["message"]
        # Every spelling of loopback is refused for the public-web entry.
        for spelled in ("http://2130706433/", "http://0x7f.1/", "http://[::ffff:127.0.0.1]/"):
            err(await s.call("fetch_url", {"url": spelled}), "net_address_refused")
    world.env = plain_env  # type: ignore[method-assign]
    site.shutdown()

    # Playback with the server gone: every result from the journal.
    sessions = world.run_json("replay", "sessions", "--json")
    reproduced = 0
    for session in sessions:
        proc = world.run("replay", "playback", session["id"], "--json")
        assert proc.returncode == 0, describe(proc)
        played = json.loads(proc.stdout)
        assert played["mismatches"] == [], describe(proc)
        assert played["not_reproducible"] == [], describe(proc)
        reproduced += played["reproduced"]
    # 2 pages, 1 refused hop; the 3 refused spellings were denied by the policy (no result).
    assert reproduced == 3, reproduced
