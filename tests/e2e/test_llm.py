"""The model primitives over real MCP against a real local model: SmolLM2-135M on the CPU
(node-llama-cpp) behind tests/llm-server/server.mjs on 127.0.0.1, reached by `aido mcp`
through the policy; the key given to aido in its environment, never by the agent, and never
in the journal; playback reproducing every answer after the model server is gone.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from conftest import REPO, describe
from helpers import err, ok, text_of

pytestmark = pytest.mark.anyio

SERVER_DIR = REPO / "tests" / "llm-server"
MODEL = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
KEY = "sk-e2e-local-key-9876543210"


@pytest.fixture(scope="module")
def model_port() -> Iterator[int]:
    missing = [p for p in (MODEL, "node_modules/node-llama-cpp/package.json") if not (SERVER_DIR / p).exists()]
    if missing:
        why = f"{', '.join(missing)} missing under {SERVER_DIR} (scripts/test installs them)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(f"NOT RUN against a real model: {why}")
    proc = subprocess.Popen(
        ["node", "server.mjs", "--model", MODEL], cwd=SERVER_DIR, stdout=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line, "the model server exited before it listened"
        yield json.loads(line)["port"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def config(port: int) -> str:
    return (
        f'[net]\nallow = ["127.0.0.1:{port}"]\n'
        f'[llm]\nprovider = "anthropic"\nbase_url = "http://127.0.0.1:{port}/v1"\n'
        'model = "smollm2:135m"\napi_key_env = "AIDO_E2E_LLM_KEY"\n'
        f'[ollama]\nbase_url = "http://127.0.0.1:{port}"\n'
    )


async def test_model_calls_through_aido_and_playback(world, model_port):
    plain_env = world.env
    world.env = lambda **extra: plain_env(AIDO_E2E_LLM_KEY=KEY, **extra)  # type: ignore[method-assign]
    async with world.session(config=config(model_port)) as s:
        tools = {t.name for t in (await s.session.list_tools()).tools}
        assert {"llm_call", "ollama_chat", "ollama_api"} <= tools
        answer = await s.call(
            "llm_call",
            {"system": "Answer with one word.", "messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 16},
        )
        out = ok(answer)
        assert out["provider"] == "anthropic" and out["stop_reason"] == "end_turn"
        assert "Paris" in text_of(answer)
        chat = ok(
            await s.call(
                "ollama_chat",
                {"model": "smollm2:135m", "messages": [{"role": "user", "content": "Say hello."}], "options": {"num_predict": 8}},
            )
        )
        assert chat["chunks"] > 1 and chat["done"] is True and chat["text"]
        tags = ok(await s.call("ollama_api", {"endpoint": "tags"}))
        assert tags["models"][0]["name"] == "smollm2:135m"
        # The agent cannot hand aido a key: the call has no such field.
        err(
            await s.call("llm_call", {"messages": [{"role": "user", "content": "x"}], "api_key": "mine"}),
            "invalid_arguments",
        )
    world.env = plain_env  # type: ignore[method-assign]

    # The key never reached the journal.
    sessions = world.run_json("replay", "sessions", "--json")
    reproduced = 0
    for session in sessions:
        export = world.run("replay", "export", session["id"], "--jsonl")
        assert export.returncode == 0, describe(export)
        assert KEY not in export.stdout
        proc = world.run("replay", "playback", session["id"], "--json")
        assert proc.returncode == 0, describe(proc)
        played = json.loads(proc.stdout)
        assert played["mismatches"] == [] and played["not_reproducible"] == [], describe(proc)
        reproduced += played["reproduced"]
    # llm_call, ollama_chat, ollama_api; the call with an api_key never became an action.
    assert reproduced == 3, reproduced
