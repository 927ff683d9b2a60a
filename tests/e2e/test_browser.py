"""The browser body over real MCP: `aido mcp` driven by the official Python SDK client, its
headless Chromium (Debian's package) reading pages this test serves on 127.0.0.1.

Every request the page makes goes through aido's egress proxy and is judged by `[net]`: a
login form is filled and submitted, the welcome text found; a navigation to a host the policy
does not name is refused before the browser is asked, a link to it is refused by the proxy
(the answer names the refusal), and a redirect to the metadata address is refused at the
proxy and never fetched. Script evaluation is off by default. `aido replay playback`
reproduces every result after the server is gone.
"""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import anyio
import pytest

from helpers import err, ok, text_of

pytestmark = pytest.mark.anyio

CHROMIUM = "/usr/bin/chromium"

LOGIN = """<!doctype html><html><head><title>Login</title></head><body>
<h1>Sign in</h1>
<form method="post" action="/welcome">
<label for="user">User</label> <input id="user" name="user">
<label for="password">Password</label> <input id="password" name="password" type="password">
<button type="submit">Sign in</button>
</form></body></html>"""

LINKS = """<!doctype html><html><head><title>Links</title></head><body>
<a href="http://denied.example/page">Elsewhere</a></body></html>"""


class Site:
    """An HTTP server on 127.0.0.1 that records every request it gets."""

    def __init__(self) -> None:
        seen: list[str] = []
        posted: list[str] = []
        self.seen, self.posted = seen, posted

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def reply(self, status: int, body: str = "", **headers: str) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                seen.append(f"GET {self.path}")
                if self.path == "/login":
                    self.reply(200, LOGIN)
                elif self.path == "/links":
                    self.reply(200, LINKS)
                elif self.path == "/to-metadata":
                    self.reply(302, "", Location="http://169.254.169.254/latest/meta-data/")
                else:
                    self.reply(404, "<title>missing</title>")

            def do_POST(self) -> None:  # noqa: N802
                seen.append(f"POST {self.path}")
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length).decode()
                posted.append(body)
                user = dict(p.split("=", 1) for p in body.split("&") if "=" in p).get("user", "")
                self.reply(200, f"<title>Welcome</title><p>Welcome, {user}</p>")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def site() -> Iterator[Site]:
    served = Site()
    yield served
    served.close()


def chromium_ready() -> bool:
    if Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK):
        return True
    print(f"the browser body cannot run: {CHROMIUM} is missing (scripts/setup-debian installs chromium)")
    assert os.environ.get("CI") is None, "CI must have chromium"
    return False


def ref_of(snapshot: dict[str, Any], role: str, name: str) -> str:
    for node in snapshot["answer"]["nodes"]:
        if node["role"] == role and node["name"] == name and node.get("ref"):
            return node["ref"]
    raise AssertionError(f"no {role} {name!r} in the snapshot: {json.dumps(snapshot)[:3000]}")


def requests_of(result: Any) -> list[dict[str, Any]]:
    """The connections a browser call's answer (or failure) says the page made."""
    sc = result.structured_content or {}
    return sc.get("requests") or (sc.get("details") or {}).get("requests") or []


async def test_a_login_form_is_filled_and_every_request_is_judged(world, site):
    if not chromium_ready():
        pytest.fail("chromium is missing (see above)")
    config = f'[net]\nallow = ["127.0.0.1:{site.port}"]\n'
    async with world.session(config=config) as s:
        tools = {t.name: t for t in (await s.session.list_tools()).tools}
        assert {"browser_navigate", "browser_snapshot", "browser_fill", "browser_click"} <= set(tools)
        assert tools["browser_snapshot"].annotations.read_only_hint is True
        assert tools["browser_click"].annotations.read_only_hint is False

        err(await s.call("browser_snapshot"), "browser_not_open")
        opened = await s.call("browser_navigate", {"url": site.url("/login")})
        page = ok(opened)
        assert page["answer"]["title"] == "Login", page
        # The page's own request went through the proxy, admitted.
        assert any(r["host"] == "127.0.0.1" and r["port"] == site.port and "code" not in r for r in page["requests"]), page

        snapshot = ok(await s.call("browser_snapshot"))
        user, password = ref_of(snapshot, "textbox", "User"), ref_of(snapshot, "textbox", "Password")
        submit = ref_of(snapshot, "button", "Sign in")
        ok(await s.call("browser_fill", {"ref": user, "value": "alice"}))
        ok(await s.call("browser_fill", {"ref": password, "value": "hunter2"}))
        ok(await s.call("browser_click", {"ref": submit}))
        ok(await s.call("browser_wait_for", {"text": "Welcome, alice", "timeout_ms": 10000}))
        text = await s.call("browser_text")
        assert "Welcome, alice" in text_of(text), text_of(text)
        assert site.posted == ["user=alice&password=hunter2"], site.posted

        # A host the policy does not name: refused before the browser is asked.
        refused = err(await s.call("browser_navigate", {"url": "http://denied.example/"}), "net_denied")
        assert refused["gate"] == "net_allowlist", refused

        # A link to it: the page asks, the proxy refuses, the answer says so.
        ok(await s.call("browser_navigate", {"url": site.url("/links")}))
        link = ref_of(ok(await s.call("browser_snapshot")), "link", "Elsewhere")
        seen = requests_of(await s.call("browser_click", {"ref": link}))
        for _ in range(50):
            if any(r["host"] == "denied.example" for r in seen):
                break
            await anyio.sleep(0.1)
            seen += requests_of(await s.call("browser_tabs"))
        denied = [r for r in seen if r["host"] == "denied.example"]
        assert denied and all(r.get("code") == "net_denied" for r in denied), seen

        err(await s.call("browser_evaluate", {"script": "1 + 1"}), "browser_script_disabled")
        shot = await s.call("browser_screenshot")
        ok(shot)
        assert any(getattr(c, "type", None) == "image" for c in shot.content), "a screenshot is an image"

        closed = ok(await s.call("browser_close"))
        assert closed["answer"] == {"closed": True}, closed
        profiles = world.aido_home / "browser"
        assert not profiles.exists() or list(profiles.iterdir()) == [], list(profiles.iterdir())
        err(await s.call("browser_text"), "browser_not_open")

    # The site saw only what the policy admitted (and the browser's own favicon fetches).
    pages = [seen for seen in site.seen if seen != "GET /favicon.ico"]
    assert pages == ["GET /login", "POST /welcome", "GET /links"], site.seen
    site.close()
    played = world.played_back()
    assert played >= 12, played


async def test_a_redirect_to_the_metadata_address_is_refused_at_the_proxy(world, site):
    if not chromium_ready():
        pytest.fail("chromium is missing (see above)")
    # "*" admits every public host; the metadata range stays refused after resolution.
    config = f'[net]\nallow = ["127.0.0.1:{site.port}", "*"]\n'
    async with world.session(config=config) as s:
        result = await s.call("browser_navigate", {"url": site.url("/to-metadata")})
        seen = requests_of(result)
        metadata = [r for r in seen if r["host"] == "169.254.169.254"]
        assert metadata and all(r.get("code") == "net_address_refused" for r in metadata), seen
        assert all("address" not in r for r in metadata), "the metadata address was never connected to"
    assert [seen for seen in site.seen if seen != "GET /favicon.ico"] == ["GET /to-metadata"], site.seen
    site.close()
    assert world.played_back() >= 1

