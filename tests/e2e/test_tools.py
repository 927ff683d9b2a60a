"""The toolbelt over real MCP: `diff`, `render_template` and `read_logs` driven by the official
Python SDK client against `aido mcp`.

Each path is judged by the walls and deny globs before it is opened (a denied or outside side
of a diff, an include outside the walls); budgets and fuel end bad input with a code while the
server keeps serving; secrets in logs are redacted before grep sees them; aido's own log file
is there and readable; and `aido replay playback` reproduces every result from the journal.
"""

from __future__ import annotations

import json

import pytest


pytestmark = pytest.mark.anyio

TOOLS = {"diff", "render_template", "read_logs"}



async def test_the_three_tools_are_listed_read_only(world):
    async with world.session() as s:
        tools = {t.name: t for t in (await s.session.list_tools()).tools}
        assert TOOLS <= set(tools)
        for name in TOOLS:
            assert tools[name].annotations.read_only_hint is True, name
        assert "other_path" in tools["diff"].input_schema["properties"]
        assert tools["read_logs"].input_schema["properties"]["source"]


async def test_diff_judges_both_sides_and_playback_reproduces_it(world):
    (world.home / "a.txt").write_text("one\ntwo\nthree\n")
    (world.home / "b.txt").write_text("one\nTWO\nthree\n")
    async with world.session() as s:
        d = await s.ok("diff", {"path": "a.txt", "other_path": "b.txt", "context_lines": 1})
        assert d["diff"].endswith("@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n"), d
        assert (d["added"], d["removed"], d["truncated"]) == (1, 1, False)
        t = await s.ok("diff", {"path": "notes.txt", "text": "hello\nworld\n"})
        assert t["identical"] is True
        cut = await s.ok("diff", {"path": "lines.txt", "text": "", "lines_max": 3})
        assert cut["truncated"] is True and len(cut["diff"].splitlines()) == 3
        await s.err("diff", {"path": "notes.txt", "other_path": "proj/.env"}, "path_denied_by_pattern")
        await s.err(
            "diff", {"path": "notes.txt", "other_path": str(world.outside / "secret.txt")}, "path_outside_walls"
        )
        await s.err("diff", {"path": "notes.txt"}, "tool_arguments_invalid")
    export = world.run("replay", "export", world.run_json("replay", "sessions", "--json")[0]["id"], "--jsonl")
    assert "hunter2" not in export.stdout and "top secret" not in export.stdout
    assert world.played_back() == 4, "three diffs and the coded failure"


async def test_render_template_is_sandboxed_and_bounded_and_the_server_keeps_serving(world):
    (world.home / "tpl").mkdir()
    (world.home / "tpl" / "page.j2").write_text("{% include 'head.j2' %}: {{ items | join(', ') }}\n")
    (world.home / "tpl" / "head.j2").write_text("Items of {{ owner }}")
    async with world.session() as s:
        page = await s.ok("render_template", {"path": "tpl/page.j2", "context": {"owner": "ada", "items": [1, 2]}})
        assert page["rendered"] == "Items of ada: 1, 2"
        assert [l["name"] for l in page["loaded"]] == ["head.j2"]
        refused = await s.err(
            "render_template", {"template": "{% include 'outside/secret.txt' %}".replace("outside", "../outside")},
            "template_include_refused",
        )
        assert refused["details"]["refused"] == "path_outside_walls"
        env = await s.err("render_template", {"template": "{% include 'proj/.env' %}"}, "template_include_refused")
        assert env["details"]["refused"] == "path_denied_by_pattern"
        # A template that would loop for ever runs out of fuel, with a code.
        await s.err(
            "render_template",
            {"template": "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"},
            "template_fuel_exhausted",
        )
        await s.err("render_template", {"template": "{% for i in range(9999) %}xxxx{% endfor %}",
                                        "output_bytes_max": 100}, "template_output_too_large")
        syntax = await s.err("render_template", {"template": "a\nb {% if %}"}, "template_syntax_error")
        assert syntax["details"]["line"] == 2
        await s.err("render_template", {"template": "{{ who }}", "strict": True}, "template_undefined")
        still = await s.ok("render_template", {"template": "{{ 6 * 7 }}"})
        assert still["rendered"] == "42"
    assert world.played_back() == 8


async def test_read_logs_redacts_filters_and_reads_aidos_own_log(world):
    (world.home / "app.log").write_text(
        "2026-12-01T10:00:00Z INFO start\n"
        "2026-12-01T11:00:00Z WARN Authorization: Bearer abcdefgh12345678xyz\n"
        "2026-12-01T12:00:00Z ERROR db password=hunter2 refused\n"
        "2026-12-01T13:00:00Z INFO done\n"
    )
    async with world.session() as s:
        logs = await s.ok("read_logs", {"source": "file", "path": "app.log"})
        assert logs["returned"] == 4 and logs["redacted"] == 2
        assert "hunter2" not in json.dumps(logs) and "abcdefgh1234" not in json.dumps(logs)
        probe = await s.ok("read_logs", {"source": "file", "path": "app.log", "grep": "hunter2"})
        assert probe["matched"] == 0, "grep runs on the redacted text"
        since = await s.ok("read_logs", {"source": "file", "path": "app.log", "since": "2026-12-01T11:30:00Z"})
        assert [l.split()[1] for l in since["lines"]] == ["ERROR", "INFO"]
        await s.err("read_logs", {"source": "file", "path": "proj/.env"}, "path_denied_by_pattern")
        await s.err("read_logs", {"source": "file", "path": "app.log", "grep": "(a"}, "logs_grep_invalid")
        await s.err("read_logs", {"since": "yesterday"}, "logs_since_invalid")
        activity = await s.ok("read_logs", {"source": "activity"})
        assert any("failed read_logs" in l and "code=logs_grep_invalid" in l for l in activity["lines"]), activity
        own = await s.ok("read_logs", {"source": "aido", "grep": "journal open"})
        assert own["returned"] >= 1, own
        assert own["path"].endswith("logs/aido.log")
    assert (world.aido_home / "logs" / "aido.log").is_file()
    assert world.played_back() == 7, "three reads, two coded failures, the activity, aido's log"
