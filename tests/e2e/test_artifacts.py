"""Artifacts over real MCP: `aido mcp` driven by the official Python SDK client, and the
served page opened by headless Chromium (Debian's `chromium`, driven by playwright-core from
tests/node_modules through tests/artifacts/open_page.mjs).

artifact_create (inline and copied from the walls), artifact_serve, the page rendering (its
inline and external scripts write into the DOM, read back from Chromium), its fetch() and an
<img> to another origin (a server this test starts on 127.0.0.1) failing with that server
seeing no request at all, the same origin reached once `connect` names it and the policy
allows it; the Host check; artifact_save as journaled writes a rewind undoes; stop and
destroy; coded refusals; and `aido replay playback` reproducing every artifact result.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest

from conftest import REPO, describe
from helpers import err, ok

pytestmark = pytest.mark.anyio

ARTIFACT_TOOLS = {
    "artifact_create",
    "artifact_list",
    "artifact_serve",
    "artifact_save",
    "artifact_stop",
    "artifact_destroy",
}
OPEN_PAGE = REPO / "tests" / "artifacts" / "open_page.mjs"
PLAYWRIGHT = REPO / "tests" / "node_modules" / "playwright-core" / "package.json"
CHROMIUM = os.environ.get("CHROMIUM_BIN", "/usr/bin/chromium")


def browser_ready() -> bool:
    missing = []
    if not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)):
        missing.append(f"{CHROMIUM} (scripts/setup-debian installs chromium)")
    if not PLAYWRIGHT.is_file():
        missing.append("tests/node_modules/playwright-core (scripts/test installs it)")
    if shutil.which("node") is None:
        missing.append("node")
    if not missing:
        return True
    print(f"headless Chromium cannot run: {', '.join(missing)} missing")
    assert os.environ.get("CI") is None, "CI must have chromium and playwright-core"
    return False


class Witness:
    """An HTTP server on 127.0.0.1 (another origin than the artifact's) that records every
    request it gets and answers each with CORS open, so a fetch that reaches it succeeds."""

    def __init__(self) -> None:
        seen: list[str] = []
        self.seen = seen

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                seen.append(self.path)
                body = b"witnessed"
                self.send_response(200)
                self.send_header("Access-Control-Allow-Origin", "*")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.origin = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def page(witness: Witness) -> str:
    # The inline script renders; app.js (an external file of the artifact) reports the
    # sandbox (cookies and storage refused for an opaque origin) and tries the network.
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>aido artifact</title>
<link rel="stylesheet" href="css/style.css"></head>
<body>
<p id="static">static text</p>
<div id="inline">pending</div>
<div id="external">pending</div>
<div id="cookie">pending</div>
<div id="storage">pending</div>
<div id="fetch">pending</div>
<div id="violations"></div>
<img id="img" src="{witness.origin}/img-probe" alt="">
<script>document.getElementById('inline').textContent = 'rendered ' + (6 * 7);</script>
<script>window.TARGET = '{witness.origin}/fetch-probe';</script>
<script src="js/app.js"></script>
</body></html>
"""


APP_JS = r"""
const set = (id, text) => { document.getElementById(id).textContent = text; };
document.addEventListener('securitypolicyviolation', (e) => {
  document.getElementById('violations').textContent += e.violatedDirective + ' ' + e.blockedURI + '\n';
});
set('external', 'external script ran');
try { document.cookie = 'a=b'; set('cookie', 'readable: ' + document.cookie); }
catch (e) { set('cookie', 'refused: ' + e.name); }
try { localStorage.setItem('a', 'b'); set('storage', 'readable'); }
catch (e) { set('storage', 'refused: ' + e.name); }
fetch(window.TARGET).then(
  (r) => r.text().then((t) => set('fetch', 'reached: ' + t)),
  (e) => set('fetch', 'failed: ' + e.name),
);
"""


def open_page(url: str) -> dict[str, Any]:
    proc = subprocess.run(
        ["node", str(OPEN_PAGE), url, "#fetch"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "CHROMIUM_BIN": CHROMIUM, "HOME": os.environ.get("HOME", "/tmp")},
    )
    assert proc.returncode == 0, describe(proc)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def http_get(url: str, host: str | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url)
    if host is not None:
        request.add_unredirected_header("Host", host)
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()



async def make(s, witness: Witness) -> dict[str, Any]:
    return await s.ok(
        "artifact_create",
        {
            "title": "demo",
            "files": [
                {"name": "index.html", "content": page(witness)},
                {"name": "js/app.js", "content": APP_JS},
                {"name": "css/style.css", "from": "site/style.css"},
            ],
        },
    )


async def test_a_served_page_renders_in_chromium_and_cannot_reach_another_origin(world):
    if not browser_ready():
        pytest.skip("headless Chromium is not available here (see the output)")
    (world.home / "site").mkdir()
    (world.home / "site" / "style.css").write_text("body { color: #123456; }\n")
    witness = Witness()
    try:
        async with world.session() as s:
            tools = {t.name: t for t in (await s.session.list_tools()).tools}
            assert ARTIFACT_TOOLS <= set(tools)
            assert tools["artifact_list"].annotations.read_only_hint is True
            assert tools["artifact_destroy"].annotations.destructive_hint is True

            made = (await make(s, witness))["manifest"]
            artifact = made["id"]
            assert len(artifact) == 32 and int(artifact, 16) >= 0, "128 bits, hex"
            assert made["entry"] == "index.html"
            names = {f["name"]: f for f in made["files"]}
            assert set(names) == {"index.html", "js/app.js", "css/style.css"}
            assert names["css/style.css"]["bytes"] == len("body { color: #123456; }\n")
            assert len(names["index.html"]["blake3"]) == 64

            served = await s.ok("artifact_serve", {"id": artifact, "ttl_ms": 600000})
            url = served["url"]
            assert url.startswith("http://127.0.0.1:") and url.endswith(f"/a/{artifact}/")
            assert served["connect"] == []

            shown = await anyio.to_thread.run_sync(open_page, url)
            texts = shown["texts"]
            assert shown["status"] == 200, shown
            assert shown["title"] == "aido artifact"
            assert texts["static"] == "static text"
            assert texts["inline"] == "rendered 42", shown
            assert texts["external"] == "external script ran", shown
            # The CSP's sandbox: an opaque origin has no cookies and no storage.
            assert texts["cookie"].startswith("refused: "), shown
            assert texts["storage"].startswith("refused: "), shown
            assert texts["fetch"].startswith("failed: "), shown
            assert "connect-src" in texts["violations"], shown
            csp = shown["headers"]["content-security-policy"]
            assert "connect-src 'none'" in csp and csp.startswith("sandbox allow-scripts")
            assert "set-cookie" not in shown["headers"]
            # The other origin saw nothing: not the fetch, not the image.
            await anyio.sleep(0.5)
            assert witness.seen == [], witness.seen

            # Connecting needs both: the call names the origin, and the policy allows it.
            err(
                await s.call("artifact_serve", {"id": artifact, "connect": [witness.origin]}),
                "net_denied",
            )
            err(
                await s.call("artifact_serve", {"id": artifact, "connect": [witness.origin + "/x"]}),
                "net_url_invalid",
            )

            # The Host check (DNS rebinding): any other name is refused.
            port = served["port"]
            status, _, body = await anyio.to_thread.run_sync(
                lambda: http_get(url, host=f"rebound.example:{port}")
            )
            assert status == 403 and b"static text" not in body
            status, headers, _ = await anyio.to_thread.run_sync(lambda: http_get(url))
            assert status == 200 and headers["referrer-policy"] == "no-referrer"

            listed = await s.ok("artifact_list")
            [row] = listed["artifacts"]
            assert row["id"] == artifact and row["url"] == url

            stopped = await s.ok("artifact_stop", {"id": artifact})
            assert stopped["was_served"] is True
            status, _, _ = await anyio.to_thread.run_sync(lambda: http_get(url))
            assert status == 404

        # A policy that allows the witness: the page's fetch reaches it (and only that).
        allow = f'[net]\nallow = ["127.0.0.1:{witness.port}"]\n'
        async with world.session(config=allow) as s:
            served = await s.ok("artifact_serve", {"id": artifact, "connect": [witness.origin]})
            assert served["connect"] == [witness.origin]
            shown = await anyio.to_thread.run_sync(open_page, served["url"])
            assert shown["texts"]["fetch"] == "reached: witnessed", shown
            assert witness.seen == ["/fetch-probe"], "the <img> stays refused: img-src is 'self'"
    finally:
        witness.close()
    # create, serve, list, stop, and the second serve (refusals have no result to reproduce).
    assert world.played_back() == 5


async def test_save_writes_through_the_walls_and_rewind_undoes_it(world):
    async with world.session() as s:
        made = await s.ok(
            "artifact_create",
            {"files": [
                {"name": "page.html", "content": "<p>saved</p>"},
                {"name": "img/dot.png", "content": "iVBORw0KGgo=", "encoding": "base64"},
            ]},
        )
        artifact = made["manifest"]["id"]
        assert made["manifest"]["entry"] == "page.html"
        saved_result = await s.call("artifact_save", {"id": artifact, "to": "exported"})
        saved = ok(saved_result)
        assert (world.home / "exported" / "page.html").read_text() == "<p>saved</p>"
        assert (world.home / "exported" / "img" / "dot.png").read_bytes() == b"\x89PNG\r\n\x1a\n"
        assert len(saved["files"]) == 2
        seq = saved_result.meta["aido/seq"]

        # Outside the walls, and into AIDO_HOME: refused before anything is written.
        err(await s.call("artifact_save", {"id": artifact, "to": str(world.outside / "x")}),
            "path_outside_walls")

        await s.ok("rewind", {"before_seq": seq})
        assert not (world.home / "exported" / "page.html").exists()

        gone = await s.ok("artifact_destroy", {"id": artifact})
        assert gone["files"] == 2
        err(await s.call("artifact_serve", {"id": artifact}), "artifact_not_found")
        assert (await s.ok("artifact_list"))["artifacts"] == []
    assert world.played_back() >= 4


async def test_bad_input_gets_codes_and_the_server_keeps_serving(world):
    async with world.session() as s:
        one = lambda name, **kw: {"files": [{"name": name, **kw}]}  # noqa: E731
        err(await s.call("artifact_create", one("../x.html", content="x")), "artifact_name_invalid")
        err(await s.call("artifact_create", one("a/%2e.html", content="x")), "artifact_name_invalid")
        err(await s.call("artifact_create", one("a.html")), "artifact_file_source_invalid")
        err(await s.call("artifact_create", one("a.html", **{"content": "x", "from": "notes.txt"})),
            "artifact_file_source_invalid")
        err(await s.call("artifact_create", one("a.html", body="x")), "invalid_arguments")
        err(await s.call("artifact_create", one("a.png", content="!!", encoding="base64")),
            "artifact_content_invalid")
        err(await s.call("artifact_create", one("a.txt", **{"from": str(world.outside / "secret.txt")})),
            "path_outside_walls")
        err(await s.call("artifact_create", one("k", **{"from": ".ssh/id_rsa"})), "path_denied_by_pattern")
        err(await s.call("artifact_create", {"files": [{"name": "a", "content": "x"}], "entry": "b"}),
            "artifact_entry_missing")
        err(await s.call("artifact_serve", {"id": "0" * 32}), "artifact_not_found")
        made = await s.ok("artifact_create", one("index.html", content="ok"))
        artifact = made["manifest"]["id"]
        err(await s.call("artifact_serve", {"id": artifact, "ttl_ms": 0}), "artifact_ttl_invalid")
        err(await s.call("artifact_serve", {"id": artifact, "ttl_ms": 10**12}), "artifact_ttl_invalid")
        served = await s.ok("artifact_serve", {"id": artifact, "ttl_ms": 1000})
        status, _, body = await anyio.to_thread.run_sync(lambda: http_get(served["url"]))
        assert (status, body) == (200, b"ok")
        # Its lifetime ends: no longer served.
        await anyio.sleep(1.2)
        status, _, _ = await anyio.to_thread.run_sync(lambda: http_get(served["url"]))
        assert status == 404
        assert "url" not in (await s.ok("artifact_list"))["artifacts"][0]

    async with world.session(config="[artifacts]\nenabled = false\n") as s:
        err(await s.call("artifact_list"), "artifacts_disabled")
