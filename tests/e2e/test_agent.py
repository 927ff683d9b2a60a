"""`aido agent "GOAL"` against a real local model: SmolLM2-135M on the CPU (node-llama-cpp)
behind tests/llm-server/server.mjs on 127.0.0.1, reached through the policy as `[llm]`.

What is asserted is the loop's mechanics, never the model's wit: every turn is an llm_call
action of the agent's session, every tool call the model makes is an ordinary action of that
session judged by the policy, a refused call goes back to the model with its code (the next
llm_call carries it), the step and token budgets stop the loop with their codes and exit
codes, and playback reproduces the whole loop from the journal.

Without the model (outside CI), the next real path is taken and said: a scripted
OpenAI-compatible HTTP server on 127.0.0.1 that answers like a model that calls a tool.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest

from conftest import describe
from test_llm import MODEL, SERVER_DIR, model_port as real_model_port  # noqa: F401
from test_serve import serve
from test_watch import Terminal

# The goal spells the call out: a 135M model copies it more often than not, and the loop's
# mechanics are the same whether it does on the first turn or a later one.
GOAL = 'Reply with exactly this JSON and nothing else: {"tool": "read_file", "arguments": {"path": "/etc/shadow"}}'
CALL = json.dumps({"thought": "read it", "tool": "read_file", "arguments": {"path": "/etc/shadow"}})


class Scripted(BaseHTTPRequestHandler):
    """A model that first talks, then calls read_file on /etc/shadow every turn."""

    turns = 0

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        length = int(self.headers.get("content-length", 0))
        self.rfile.read(length)
        Scripted.turns += 1
        content = "Let me think about it." if Scripted.turns == 1 else CALL
        body = json.dumps(
            {
                "id": "chatcmpl-scripted", "object": "chat.completion", "model": "scripted",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 500, "completion_tokens": 20, "total_tokens": 520},
            }
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def model(request: pytest.FixtureRequest) -> Iterator[tuple[int, str]]:
    """(port, model name): SmolLM2 behind the local server, else (outside CI) the scripted one."""
    missing = [p for p in (MODEL, "node_modules/node-llama-cpp/package.json") if not (SERVER_DIR / p).exists()]
    if not missing:
        port = request.getfixturevalue("real_model_port")
        print(f"aido agent against the real model: SmolLM2-135M on 127.0.0.1:{port}")
        yield port, "smollm2:135m"
        return
    why = f"{', '.join(missing)} missing under {SERVER_DIR} (scripts/test installs them)"
    if os.environ.get("CI"):
        pytest.fail(why)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"NOT the real model ({why}): aido agent against a scripted OpenAI-compatible server")
    try:
        yield server.server_address[1], "scripted"
    finally:
        server.shutdown()


def config(port: int, name: str) -> str:
    return (
        f'[net]\nallow = ["127.0.0.1:{port}"]\n'
        f'[llm]\nprovider = "openai"\nbase_url = "http://127.0.0.1:{port}/v1"\n'
        f'model = "{name}"\nmax_tokens_default = 64\n'
    )


def session_records(world: Any, stdout: str) -> tuple[str, list[dict[str, Any]]]:
    """The session the agent printed first, and its records."""
    first = stdout.splitlines()[0]
    assert first.startswith("session "), stdout
    session = first.split()[1]
    export = world.run("replay", "export", session, "--jsonl")
    assert export.returncode == 0, describe(export)
    return session, [json.loads(line) for line in export.stdout.splitlines()]


def proposals(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["event"] == "action_proposed"]


def test_tool_calls_are_actions_of_the_agents_session_refusals_go_back_and_the_steps_run_out(world, model):
    port, name = model
    steps = 4
    proc = world.run(
        "agent", "--toolset", "read_file", "--steps", str(steps), GOAL,
        config=config(port, name), env={"NO_COLOR": "1"}, timeout=300,
    )
    # The model never answers with {"answer": ...} here: it talks or calls, until the steps run out.
    assert proc.returncode == 3, describe(proc)
    assert "[agent_steps_spent]" in proc.stderr, describe(proc)
    assert "\x1b[" not in proc.stdout
    session, records = session_records(world, proc.stdout)
    assert records[0]["client"] == "aido agent"
    proposed = proposals(records)
    turns = [p for p in proposed if p["action"]["type"] == "llm_call"]
    calls = [p for p in proposed if p["action"]["type"] != "llm_call"]
    # Every turn of the model is an llm_call action of the agent's session, each carrying the
    # conversation so far (the goal first).
    assert len(turns) == steps, describe(proc)
    for turn in turns:
        assert turn["action"]["messages"][0]["content"] == f"Goal: {GOAL}"
        assert "## read_file" in turn["action"]["system"]
    print(f"{len(calls)} tool call(s) made by the model in {steps} turns")
    denied = [c for c in calls if c["verdict"]["verdict"] == "deny"]
    if denied:
        # A tool call the model made is an ordinary action of the same session, judged by the
        # policy and journaled with its verdict (read_file of /etc/shadow: refused by the
        # walls), and the refusal, with its code, is what the model reads in its next turn.
        print("path taken: the model called read_file; its refusal went back to it")
        first = denied[0]
        assert f"[{first['verdict']['code']}]" in proc.stdout, describe(proc)
        later = [t for t in turns if t["seq"] > first["seq"]]
        assert later, f"the refusal at seq {first['seq']} came in the last turn:\n{describe(proc)}"
        told = later[0]["action"]["messages"][-1]["content"]
        assert f"[{first['verdict']['code']}]" in told and "did not run" in told, told
    else:
        # The model only talked: what goes back to it is the reply's own code, and the loop
        # went on to the budget all the same (which model turns are calls is its wit).
        print("path taken: the model made no refused call (it talked); checked that the unparsed reply went back to it")
        assert "[agent_reply_unparsed]" in proc.stdout, describe(proc)
        told = turns[1]["action"]["messages"][-1]["content"]
        assert told.startswith("[agent_reply_unparsed]") or told.startswith("Result of "), told
    for call in calls:
        assert call["verdict"]["verdict"] in ("allow", "deny"), call
    # The whole loop plays back from the journal: every model turn reproduced.
    played = world.run("replay", "playback", session, "--json")
    assert played.returncode == 0, describe(played)
    result = json.loads(played.stdout)
    assert result["mismatches"] == [] and result["not_reproducible"] == [], describe(played)
    assert result["reproduced"] >= steps, result


def test_the_token_budget_stops_the_loop_with_its_exit_code(world, model):
    port, name = model
    proc = world.run("agent", "--toolset", "read_file", "--tokens", "1", GOAL, config=config(port, name), timeout=300)
    assert proc.returncode == 4, describe(proc)
    assert "[agent_tokens_spent]" in proc.stderr, describe(proc)
    _, records = session_records(world, proc.stdout)
    proposed = proposals(records)
    # One turn, asked for at most the one token left, and nothing run after it.
    assert [p["action"]["type"] for p in proposed] == ["llm_call"], proposed
    assert proposed[0]["action"]["max_tokens"] == 1
    assert records[-1]["event"] == "session_ended"


def test_an_unreachable_endpoint_and_no_llm_are_coded(world, model):
    port, name = model
    closed = world.run("agent", "hello", config=config(1, name), timeout=120)
    assert closed.returncode == 5, describe(closed)
    assert "[agent_model_failed]" in closed.stderr and "[net_connect_failed]" in closed.stderr, describe(closed)
    refused = world.run("agent", "hello", config=config(port, name).replace(f'"127.0.0.1:{port}"', '"example.invalid"'))
    assert refused.returncode == 5 and "[net_denied]" in refused.stderr, describe(refused)
    bare = world.run("agent", "hello")
    assert bare.returncode == 2 and "[llm_not_configured]" in bare.stderr, describe(bare)
    unknown = world.run("agent", "--toolset", "files,nope", "hello", config=config(port, name))
    assert unknown.returncode == 2 and "[agent_toolset_unknown]" in unknown.stderr, describe(unknown)


@pytest.mark.anyio
async def test_with_serve_the_session_runs_in_aido_serve_and_aido_watch_follows_it(world, model):
    port, name = model
    conf = str(world.write_config(config(port, name)))
    with serve(world, "--config", conf) as served:
        proc = world.run(
            "agent", "--serve", "--toolset", "read_file", "--steps", "2", GOAL,
            "--config", conf, env={"NO_COLOR": "1"}, timeout=300,
        )
        assert proc.returncode == 3 and "[agent_steps_spent]" in proc.stderr, describe(proc)
        session = proc.stdout.splitlines()[0].split()[1]
        # The session is the serve's own (an /actions session), so Mission Control lists it...
        request = urllib.request.Request(f"{served.base}/mc/api/sessions", headers=served.headers())
        with urllib.request.urlopen(request, timeout=30) as answer:
            listed = {s["id"]: s for s in json.load(answer)["sessions"]}
        assert session in listed, (session, listed)
        assert listed[session]["records"] >= 5, listed[session]
        # ...and aido watch shows its steps.
        tui = Terminal(world, [str(world.bin), "watch", "--session", session[:8]], {**world.env(), "NO_COLOR": "1"}, "agent")
        try:
            await tui.shows("llm_call", timeout=20)
        finally:
            tui.close()
    # Nothing there: a coded failure of its own.
    gone = world.run("agent", "--serve", "--url", "http://127.0.0.1:1", "hello", "--config", conf)
    assert gone.returncode == 6 and "[agent_serve_failed]" in gone.stderr, describe(gone)
