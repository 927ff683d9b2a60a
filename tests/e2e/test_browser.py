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


TOOLSET = """<!doctype html><html><head><title>Order</title></head><body style="height:3000px">
<h1>Order</h1>
<label for="name">Name</label> <input id="name">
<label><input type="checkbox" id="agree"> I agree to the terms</label>
<label for="color">Color</label> <select id="color"><option value="r">Red</option><option value="b">Blue</option></select>
<label for="file">Attachment</label> <input type="file" id="file">
<button id="go">Place order</button>
<p id="out">nothing yet</p>
<script>
const $ = id => document.getElementById(id);
$('go').addEventListener('click', e => console.log('order shift=' + e.shiftKey + ' name=' + $('name').value
  + ' agree=' + $('agree').checked + ' color=' + $('color').value
  + ' files=' + [...$('file').files].map(f => f.name + ':' + f.size).join(',')));
document.addEventListener('keydown', e => { if (e.ctrlKey && e.key === 'a') console.log('chord ctrl+a'); });
$('out').addEventListener('dblclick', () => console.log('double clicked'));
document.addEventListener('contextmenu', e => { console.log('right clicked'); e.preventDefault(); });
document.addEventListener('scroll', () => { $('out').textContent = 'scrolled ' + window.scrollY; });
</script>
</body></html>"""


DIALOGS = """<!doctype html><html><head><title>Dialogs</title></head><body>
<button id="wipe" onclick="document.getElementById('out').textContent = confirm('Delete everything?') ? 'wiped' : 'kept'">Wipe</button>
<button id="hello" onclick="alert('Hello there'); document.getElementById('out').textContent = 'greeted'">Greet</button>
<p id="out">untouched</p></body></html>"""

FILES = """<!doctype html><html><head><title>Files</title></head><body>
<a href="/report.txt">Report</a></body></html>"""
REPORT = "quarterly numbers\n" * 100


class Site:
    """An HTTP server on 127.0.0.1 that records every request it gets."""

    def __init__(self) -> None:
        seen: list[str] = []
        posted: list[str] = []
        self.seen, self.posted = seen, posted
        self.extra: dict[str, str] = {}
        site = self

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
                elif self.path in site.extra:
                    self.reply(200, site.extra[self.path])
                elif self.path == "/dialogs":
                    self.reply(200, DIALOGS)
                elif self.path == "/files":
                    self.reply(200, FILES)
                elif self.path == "/report.txt":
                    data = REPORT.encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/octet-stream")
                    self.send_header("Content-Disposition", 'attachment; filename="../../report.txt"')
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                elif self.path == "/order":
                    self.reply(200, TOOLSET)
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



def member_results(result: Any) -> list[dict[str, Any]]:
    """A browser_toolset batch's results, one per member call (run or not)."""
    return ok(result)["answer"]["results"]


def all_ran(results: list[dict[str, Any]]) -> None:
    failed = [r for r in results if r["is_error"]]
    assert not failed, json.dumps(failed, indent=1)[:4000]


def ref_in(read: str, role: str, name: str) -> str:
    import re

    found = re.search(rf'{re.escape(role)} "{re.escape(name)}" \[(ref_\d+)\]', read)
    assert found, f"no {role} {name!r} in:\n{read}"
    return found.group(1)


async def test_the_browser_toolset_runs_a_turn_of_members_as_the_sdk_names_them(world, site):
    if not chromium_ready():
        pytest.fail("chromium is missing (see above)")
    (world.home / "upload.txt").write_text("attached\n")
    config = f'[net]\nallow = ["127.0.0.1:{site.port}"]\n'

    def batch(*members: tuple[str, dict[str, Any]]) -> dict[str, Any]:
        return {
            "version": "browser_toolset_20260801",
            "actions": [{"id": f"toolu_{i}", "name": name, "input": input} for i, (name, input) in enumerate(members)],
        }

    async with world.session(config=config) as s:
        tools = {t.name: t for t in (await s.session.list_tools()).tools}
        assert "browser_toolset" in tools
        member = tools["browser_toolset"].input_schema["$defs"]["BrowserMember"]
        members = member.get("enum") or [v.get("const") or v["enum"][0] for v in member["oneOf"]]
        assert len(members) == 31 and {"read_page", "form_input", "javascript_exec", "left_click_drag"} <= set(members), members

        # A first turn: the toolset opens the browser itself (it has no "open" member).
        first = member_results(await s.call("browser_toolset", batch(
            ("navigate", {"url": site.url("/order")}),
            ("read_page", {"filter": "interactive"}),
            ("find", {"query": "agree checkbox"}),
            ("list_tabs", {}),
            ("screenshot", {}),
        )))
        assert [r["name"] for r in first] == ["navigate", "read_page", "find", "list_tabs", "screenshot"]
        assert all(r["toolset_name"] == "browser" and r["is_error"] is False for r in first), first
        assert first[0]["text"].startswith(f"Navigated to {site.url('/order')}"), first[0]
        tabs = first[0]["browser_state"]["tabs"]
        assert len(tabs) == 1 and tabs[0]["active"] is True and tabs[0]["title"] == "Order", tabs
        read = first[1]["text"]
        name, agree = ref_in(read, "textbox", "Name"), ref_in(read, "checkbox", "I agree to the terms")
        color, order = ref_in(read, "combobox", "Color"), ref_in(read, "button", "Place order")
        assert first[2]["text"].splitlines()[1].startswith(f'checkbox "I agree to the terms" [{agree}]'), first[2]
        assert first[3]["text"].startswith("Available tabs:\n  • tab_id ") and "(current)" in first[3]["text"], first[3]
        assert first[4]["images"] == [0]

        upload = ok(await s.call("browser_toolset", batch(("find", {"query": "Attachment"}))))
        attachment = upload["answer"]["results"][0]["text"].splitlines()[1].split("[")[1].split("]")[0]

        # Fields of every kind, a click with shift held, a chord: the page's console says what it saw.
        second = member_results(await s.call("browser_toolset", batch(
            ("form_input", {"target": {"type": "ref", "ref": name}, "value": "alice"}),
            ("form_input", {"target": {"type": "ref", "ref": agree}, "value": True}),
            ("form_input", {"target": {"type": "ref", "ref": color}, "value": "Blue"}),
            ("file_upload", {"target": {"type": "ref", "ref": attachment}, "paths": [str(world.home / "upload.txt")]}),
            ("left_click", {"target": {"type": "ref", "ref": order}, "modifiers": "shift"}),
            ("key", {"text": "ctrl+a"}),
            ("right_click", {"target": {"type": "coordinate", "x": 20, "y": 20}}),
            ("read_console", {}),
            ("read_network", {}),
        )))
        all_ran(second)
        console = second[7]["text"]
        assert "order shift=true name=alice agree=true color=b files=upload.txt:9" in console, console
        assert "chord ctrl+a" in console and "right clicked" in console, console
        assert f"GET {site.url('/order')} -> 200 text/html" in second[8]["text"], second[8]

        # Scrolling, zoom, hover, drag, a double click, a wait.
        third = member_results(await s.call("browser_toolset", batch(
            ("scroll", {"target": {"type": "coordinate", "x": 100, "y": 100}, "scroll_direction": "down", "scroll_amount": 2}),
            ("get_page_text", {}),
            ("zoom", {"region": [0, 0, 200, 100]}),
            ("hover", {"target": {"type": "coordinate", "x": 50, "y": 50}}),
            ("left_click_drag", {"from": {"type": "coordinate", "x": 10, "y": 10}, "target": {"type": "coordinate", "x": 60, "y": 40}}),
            ("scroll_to", {"target": {"type": "ref", "ref": order}}),
            ("wait", {"duration": 0.1}),
        )))
        all_ran(third)
        assert "scrolled 200" in third[1]["text"], third[1]
        assert third[2]["images"] == [0]

        # Tabs: a new one (tab_opened), a page in it, a read of the first by its tab_id (which
        # stays inactive), then back and close.
        fourth = member_results(await s.call("browser_toolset", batch(
            ("new_tab", {}),
            ("navigate", {"url": site.url("/links")}),
            ("list_tabs", {}),
        )))
        all_ran(fourth)
        opened = fourth[0]["browser_state"]
        new_id = opened["state_changes"][0]["tab_id"]
        assert opened["state_changes"] == [{"type": "tab_opened", "tab_id": new_id}], opened
        assert fourth[0]["text"] == f"Created new tab with tab_id: {new_id}, URL: about:blank. It is now the current tab."
        assert len(fourth[2]["browser_state"]["tabs"]) == 2
        first_id = next(t["tab_id"] for t in fourth[2]["browser_state"]["tabs"] if t["tab_id"] != new_id)
        fifth = member_results(await s.call("browser_toolset", batch(
            ("get_page_text", {"tab_id": first_id}),
            ("list_tabs", {}),
            ("switch_tab", {"tab_id": first_id}),
            ("close_tab", {"tab_id": new_id}),
        )))
        all_ran(fifth)
        assert "Place order" in fifth[0]["text"]
        active = [t["tab_id"] for t in fifth[1]["browser_state"]["tabs"] if t.get("active")]
        assert active == [new_id], "a read by tab_id leaves the active tab as it was"
        assert fifth[2]["text"] == f"Switched to tab {first_id}" and fifth[3]["text"] == f"Closed tab {new_id}"
        assert [t["tab_id"] for t in fifth[3]["browser_state"]["tabs"]] == [first_id]

        # The first failure stops the turn: a stale reference, and what follows is not run.
        stopped = await s.call("browser_toolset", batch(
            ("left_click", {"target": {"type": "ref", "ref": "ref_999999"}}),
            ("screenshot", {}),
        ))
        results = member_results(stopped)
        assert results[0]["is_error"] is True and results[0]["code"] == "browser_ref_unknown", results
        assert results[1]["message"] == "Not executed: an earlier action in this turn failed.", results
        assert results[1]["code"] == "browser_toolset_not_executed", results
        # Script is off by default: a turn holding javascript_exec is refused whole by the policy.
        err(await s.call("browser_toolset", batch(
            ("screenshot", {}),
            ("javascript_exec", {"text": "document.title"}),
        )), "browser_script_disabled")
        # A member's own contract: a coordinate where a ref is needed, refused before it runs.
        kind = member_results(await s.call("browser_toolset", batch(("scroll_to", {"target": {"type": "coordinate", "x": 1, "y": 1}}))))
        assert kind[0]["code"] == "browser_toolset_target_kind", kind
        # A file outside the walls is refused by the chain before the browser sees the turn.
        err(await s.call("browser_toolset", batch(
            ("file_upload", {"target": {"type": "ref", "ref": attachment}, "paths": [str(world.outside / "secret.txt")]}),
        )))
        # An unknown member name is refused at the door.
        err(await s.call("browser_toolset", batch(("open_devtools", {}),)))

    # With [browser] allow_script, javascript_exec answers the expression's value.
    async with world.session(config=config + "[browser]\nallow_script = true\n") as s:
        scripted = member_results(await s.call("browser_toolset", batch(
            ("navigate", {"url": site.url("/order")}),
            ("javascript_exec", {"text": "document.title + ' ' + document.querySelectorAll('input').length"}),
        )))
        all_ran(scripted)
        assert scripted[1]["text"] == '"Order 3"', scripted[1]

    site.close()
    assert world.played_back() >= 8


async def downloads_of(s: Any, first: Any) -> list[dict[str, Any]]:
    """The landed downloads a call's answer names, or those of a later look (a download that
    began as the click answered lands with the next call)."""
    landed = (first.structured_content or {}).get("landed") or []
    for _ in range(50):
        if landed:
            return landed
        await anyio.sleep(0.1)
        landed = ok(await s.call("browser_tabs")).get("landed") or []
    return landed


async def test_a_download_lands_in_the_walls_as_a_journaled_change_and_rewinds(world, site):
    if not chromium_ready():
        pytest.fail("chromium is missing (see above)")
    config = f'[net]\nallow = ["127.0.0.1:{site.port}"]\n'
    async with world.session(config=config) as s:
        ok(await s.call("browser_navigate", {"url": site.url("/files")}))
        link = ref_of(ok(await s.call("browser_snapshot")), "link", "Report")
        clicked = await s.call("browser_click", {"ref": link})
        ok(clicked)
        landed = await downloads_of(s, clicked)
        # The server's "../../report.txt" is one plain name under [browser] downloads.
        assert len(landed) == 1 and landed[0].get("path"), landed
        target = Path(landed[0]["path"])
        assert target.parent == world.home / "downloads" and target.name.endswith("report.txt"), landed
        assert not target.name.startswith("."), landed
        assert target.read_text() == REPORT
        assert landed[0]["bytes"] == len(REPORT)
        # Nothing staged is left in the profile.
        staged = list((world.aido_home / "browser").rglob("downloads/*"))
        assert staged == [], staged

        # Through the toolset: the member's browser_state says it started and completed.
        turn = ok(await s.call("browser_toolset", {"actions": [
            {"id": "toolu_a", "name": "left_click", "input": {"target": {"type": "ref", "ref": link.replace("e", "ref_", 1)}}},
            {"id": "toolu_b", "name": "wait", "input": {"duration": 0.5}},
        ]}))
        results = turn["answer"]["results"]
        changes = [c for r in results for c in (r.get("browser_state") or {}).get("state_changes", [])]
        kinds = [c["type"] for c in changes]
        assert "download_started" in kinds and "download_completed" in kinds, results
        second = target.with_name(target.name.replace("report.txt", "report (2).txt"))
        done = next(c for c in changes if c["type"] == "download_completed")
        assert done["path"] == str(second) and done["size_bytes"] == len(REPORT), done
        assert any("Downloaded" in r["text"] for r in results), results
        assert second.read_text() == REPORT

        # A rewind to before the first click takes the landed files away.
        await s.ok("rewind", {"before_seq": clicked.meta["aido/seq"]})
        assert not target.exists() and not second.exists()

    # Landing outside the walls is refused: the download is reported, nothing lands.
    outside = world.outside / "dl"
    config += f'[browser]\ndownloads = "{outside}"\n'
    async with world.session(config=config) as s:
        ok(await s.call("browser_navigate", {"url": site.url("/files")}))
        link = ref_of(ok(await s.call("browser_snapshot")), "link", "Report")
        clicked = await s.call("browser_click", {"ref": link})
        landed = await downloads_of(s, clicked)
        assert landed and landed[0]["error"]["code"] == "path_outside_walls", landed
        assert not outside.exists()
    site.close()
    assert world.played_back() >= 8


async def test_a_grant_narrows_what_the_page_itself_may_reach(world, site):
    """`[net]` admits every port of 127.0.0.1 (`127.0.0.1:*`); a session under a grant naming only the site's
    port opens it, and the page's own request to another port is refused at the proxy
    (`egress_not_granted`), never reaching that server."""
    if not chromium_ready():
        pytest.fail("chromium is missing (see above)")
    other = Site()
    page = f'<title>Mixed</title><img src="{other.url("/pixel.png")}"><p>mixed</p>'
    site.extra = {"/mixed": page}
    config = '[net]\nallow = ["127.0.0.1:*"]\n'
    async with world.session(config=config) as s:
        minted = await s.ok("grant_mint", {
            "primitives": ["browser_navigate", "browser_text", "browser_tabs"],
            "hosts": [f"127.0.0.1:{site.port}"],
        })
    async with world.session(config=config, env={"AIDO_GRANT": minted["token"]}) as child:
        opened = await child.call("browser_navigate", {"url": site.url("/mixed")})
        seen = requests_of(opened)
        for _ in range(50):
            if any(r["port"] == other.port for r in seen):
                break
            await anyio.sleep(0.1)
            seen += requests_of(await child.call("browser_tabs"))
        ok(opened)
        to_other = [r for r in seen if r["port"] == other.port]
        assert to_other and all(r.get("code") == "egress_not_granted" for r in to_other), seen
        assert any(r["port"] == site.port and "code" not in r for r in seen), seen
        # The navigation's own URL is judged by the grant before the browser is asked.
        err(await child.call("browser_navigate", {"url": other.url("/mixed")}), "grant_host_outside")
    assert other.seen == [], other.seen
    other.close()


async def test_a_dialog_is_answered_at_once_and_said(world, site):
    """A page's confirm() is dismissed and its alert() accepted at once, so the page never
    blocks the next call; each result says what the dialog said and how it was answered."""
    if not chromium_ready():
        pytest.fail("chromium is missing (see above)")
    config = f'[net]\nallow = ["127.0.0.1:{site.port}"]\n'
    async with world.session(config=config) as s:
        turn = member_results(await s.call("browser_toolset", {"actions": [
            {"id": "toolu_1", "name": "navigate", "input": {"url": site.url("/dialogs")}},
            {"id": "toolu_2", "name": "find", "input": {"query": "Wipe button"}},
        ]}))
        wipe = turn[1]["text"].splitlines()[1].split("[")[1].split("]")[0]
        clicked = member_results(await s.call("browser_toolset", {"actions": [
            {"id": "toolu_3", "name": "left_click", "input": {"target": {"type": "ref", "ref": wipe}}},
            {"id": "toolu_4", "name": "get_page_text", "input": {}},
        ]}))
        all_ran(clicked)
        said = 'The page opened a confirm dialog saying "Delete everything?"; it was dismissed.'
        assert said in clicked[0]["text"], clicked[0]
        assert clicked[0]["dialogs"] == [{"kind": "confirm", "message": "Delete everything?", "accepted": False}]
        assert "kept" in clicked[1]["text"], clicked[1]
        # Through the primitives: an alert, accepted; the page goes on.
        greet = ref_of(ok(await s.call("browser_snapshot")), "button", "Greet")
        greeted = await s.call("browser_click", {"ref": greet})
        ok(greeted)
        assert 'alert dialog saying "Hello there"; it was accepted' in text_of(greeted), text_of(greeted)
        ok(await s.call("browser_wait_for", {"text": "greeted", "timeout_ms": 5000}))
    site.close()
    assert world.played_back() >= 4
