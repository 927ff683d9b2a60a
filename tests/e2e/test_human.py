"""Asking a human over real MCP: `aido mcp` driven by the official Python SDK client.

ask_human / confirm / ask_multiple_choice through the SDK's elicitation callback (accept,
decline, cancel, timeout); confirm is "no" for everything but an explicit yes; questions that
ask for secrets are refused before anyone is asked; a client without elicitation gets
`needs_human` with an id, a person answers with `aido answer` from another process, and the
agent collects it (with check_answer, or by still waiting in the original call); and `aido replay
playback` reproduces every answer from the journal without asking anyone.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from mcp import types

from conftest import describe
from helpers import err, ok

pytestmark = pytest.mark.anyio

HUMAN_TOOLS = {"ask_human", "confirm", "ask_multiple_choice", "check_answer"}


def answering(action: str, content: dict[str, Any] | None = None, delay: float = 0):
    asked: list[Any] = []

    async def callback(context, params):
        asked.append(params)
        if delay:
            await anyio.sleep(delay)
        return types.ElicitResult(action=action, content=content)

    return callback, asked


def schema_of(params: Any) -> dict[str, Any]:
    schema = params.requested_schema
    if hasattr(schema, "model_dump"):
        schema = schema.model_dump(by_alias=True, exclude_none=True, mode="json")
    return schema



def human_inputs(world) -> list[dict[str, Any]]:
    """Every recorded `answer` input from the human, over every session."""
    out = []
    for s in world.run_json("replay", "sessions", "--json"):
        proc = world.run("replay", "export", s["id"], "--jsonl")
        assert proc.returncode == 0, describe(proc)
        for line in proc.stdout.splitlines():
            rec = json.loads(line)
            inputs = (rec.get("outcome") or {}).get("inputs") or rec.get("inputs") or []
            out += [i for i in inputs if i.get("input") == "answer" and i.get("from") == "human"]
    return out


async def test_the_human_tools_are_listed_and_none_answers(world):
    async with world.session() as s:
        tools = {t.name: t for t in (await s.session.list_tools()).tools}
        assert HUMAN_TOOLS <= set(tools)
        for name in HUMAN_TOOLS:
            assert tools[name].annotations.read_only_hint is True, name
        # No tool can answer a question: the only writer of answers is `aido answer`.
        assert not [n for n in tools if "answer" in n and n != "check_answer"]
        props = tools["check_answer"].input_schema["properties"]
        assert set(props) == {"id", "wait_ms"}
        assert tools["ask_multiple_choice"].input_schema["properties"]["choices"]["maxItems"] == 10


async def test_accepted_answers_come_back_and_playback_reproduces_them(world):
    replies = {
        "ask_human": {"answer": "the main branch"},
        "confirm": {"approve": True},
        "single": {"choice": "green"},
        "multi": {"choices": ["red", "blue"]},
    }
    asked: list[Any] = []

    async def callback(context, params):
        asked.append(params)
        props = schema_of(params)["properties"]
        if "answer" in props:
            content = replies["ask_human"]
        elif "approve" in props:
            content = replies["confirm"]
        elif "choice" in props:
            content = replies["single"]
        else:
            content = replies["multi"]
        return types.ElicitResult(action="accept", content=content)

    async with world.session(elicitation_callback=callback) as s:
        out = await s.ok("ask_human", {"question": "Which branch should I base this on?"})
        assert out == {"via": "elicitation", "status": "answered", "answer": "the main branch"}
        assert asked[0].message == "Which branch should I base this on?"
        assert getattr(asked[0], "mode", "form") == "form"
        assert schema_of(asked[0])["required"] == ["answer"]

        out = await s.ok("confirm", {"question": "Deploy to staging now?"})
        assert out["approved"] is True and out["answer"] == "yes"

        colours = ["red", "green", "blue"]
        out = await s.ok("ask_multiple_choice", {"question": "Which colour?", "choices": colours})
        assert out["choice"] == "green" and out["choices"] == ["green"]
        assert schema_of(asked[2])["properties"]["choice"]["enum"] == colours

        out = await s.ok(
            "ask_multiple_choice", {"question": "Which colours?", "choices": colours, "multiple": True}
        )
        assert out["choices"] == ["red", "blue"] and "choice" not in out
        multi = schema_of(asked[3])["properties"]["choices"]
        assert multi["type"] == "array" and multi["items"]["enum"] == colours

        # A choice that was not offered is refused with a code, not taken.
        replies["single"] = {"choice": "purple"}
        await s.err("ask_multiple_choice", {"question": "Which colour?", "choices": colours}, "human_answer_invalid")
    assert len(asked) == 5
    assert world.played_back() >= 5
    answers = human_inputs(world)
    assert [a["value"]["action"] for a in answers] == ["accept"] * 4, answers
    assert answers[0]["value"]["answer"] == {"text": "the main branch"}


@pytest.mark.parametrize(
    "action,content,reason",
    [
        ("decline", None, "declined"),
        ("cancel", None, "cancelled"),
        ("accept", {"approve": False}, "answered no"),
        ("accept", {}, "answered no"),
        ("accept", {"approve": "true"}, "answered no"),
        ("accept", {"approve": "yes"}, "answered no"),
    ],
    ids=["decline", "cancel", "accept-false", "accept-empty", "accept-string-true", "accept-string-yes"],
)
async def test_confirm_is_no_for_everything_but_an_explicit_yes(world, action, content, reason):
    callback, asked = answering(action, content)
    async with world.session(elicitation_callback=callback) as s:
        out = await s.ok("confirm", {"question": "Delete the build directory?"})
        assert out["approved"] is False and out["answer"] == "no", out
        assert out["reason"] == reason
        assert len(asked) == 1
    assert world.played_back() >= 1


@pytest.mark.parametrize("action,code", [("decline", "human_declined"), ("cancel", "human_cancelled")])
async def test_an_unanswered_question_is_a_coded_failure(world, action, code):
    callback, asked = answering(action)
    async with world.session(elicitation_callback=callback) as s:
        await s.err("ask_human", {"question": "What should the release be called?"}, code)
        await s.err("ask_multiple_choice", {"question": "Which?", "choices": ["a", "b"]}, code)
        assert len(asked) == 2
    assert world.played_back() >= 2


async def test_a_question_nobody_answers_in_time_times_out_and_the_server_keeps_serving(world):
    callback, asked = answering("accept", {"approve": True}, delay=3)
    async with world.session(elicitation_callback=callback) as s:
        started = anyio.current_time()
        out = await s.ok("confirm", {"question": "Merge it?", "timeout_ms": 300})
        assert anyio.current_time() - started < 2.5
        # The late "approve" changes nothing: a timeout is a no.
        assert out["approved"] is False and out["reason"] == "timeout" and out["code"] == "human_timeout"
        sc = await s.err("ask_human", {"question": "Anything else?", "timeout_ms": 300}, "human_timeout")
        assert sc["details"]["timeout_ms"] == 300
        # Over the policy's maximum (confirm_timeout_ms): refused before anyone is asked.
        await s.err("ask_human", {"question": "Later?", "timeout_ms": 10**9}, "human_timeout_too_long")
        assert len(asked) == 2
        await s.ok("read_file", {"path": "~/notes.txt"})
    assert world.played_back() >= 3


async def test_questions_that_ask_for_secrets_are_refused_before_anyone_is_asked(world):
    callback, asked = answering("accept", {"answer": "hunter2"})
    async with world.session(elicitation_callback=callback) as s:
        for question in [
            "What is your password?",
            "Please paste the API key for the staging server",
            "Enter your GITHUB_TOKEN",
            "What is the 2FA code you just got?",
        ]:
            sc = await s.err("ask_human", {"question": question}, "human_secret_requested")
            assert sc["details"]["field"] == "question"
        sc = await s.err(
            "ask_multiple_choice",
            {"question": "How should I log in?", "choices": ["ssh agent", "my private key"]},
            "human_secret_requested",
        )
        assert sc["details"]["field"] == "choices[1]"
        await s.err("confirm", {"question": "Can I store your credentials?"}, "human_secret_requested")
        # Bounds: a huge question, too many or repeated choices, an empty question.
        await s.err("ask_human", {"question": "x" * 2001}, "human_question_invalid")
        await s.err("ask_human", {"question": "   "}, "human_question_invalid")
        many = [f"option {i}" for i in range(11)]
        await s.err("ask_multiple_choice", {"question": "Which?", "choices": many}, "human_question_invalid")
        await s.err("ask_multiple_choice", {"question": "Which?", "choices": ["a", "a"]}, "human_question_invalid")
        await s.err("ask_multiple_choice", {"question": "Which?", "choices": ["a"]}, "human_question_invalid")
        assert asked == []
        await s.ok("read_file", {"path": "~/notes.txt"})
    assert world.played_back() >= 11


async def test_without_elicitation_a_person_answers_with_aido_answer(world):
    async with world.session() as s:  # no elicitation_callback: the client cannot ask
        sc = await s.err("ask_human", {"question": "Which branch?", "timeout_ms": 300}, "needs_human")
        text_id = sc["details"]["id"]
        assert text_id.startswith("q-") and text_id in sc["message"]
        sc = await s.err("confirm", {"question": "Ship it?", "timeout_ms": 300}, "needs_human")
        confirm_id = sc["details"]["id"]
        sc = await s.err(
            "ask_multiple_choice",
            {"question": "Which?", "choices": ["alpha", "beta", "gamma"], "multiple": True, "timeout_ms": 300},
            "needs_human",
        )
        choice_id = sc["details"]["id"]
        # Not answered yet: asking again says so.
        await s.err("check_answer", {"id": text_id}, "needs_human")
        await s.err("check_answer", {"id": "q-0000000000000000"}, "question_not_found")

        # The person, in another process.
        pending = world.run_json("answer", "--list", "--json")
        assert {q["id"] for q in pending} == {text_id, confirm_id, choice_id}
        listed = world.run("answer", "--list")
        assert "Which branch?" in listed.stdout and f"aido answer {confirm_id} yes|no" in listed.stdout
        proc = world.run("answer", text_id, "use", "main")
        assert proc.returncode == 0, describe(proc)
        again = world.run("answer", text_id, "no, develop")
        assert again.returncode == 2 and "question_already_answered" in again.stderr, describe(again)
        maybe = world.run("answer", confirm_id, "maybe")
        assert maybe.returncode == 2 and "human_answer_invalid" in maybe.stderr, describe(maybe)
        assert world.run("answer", confirm_id, "yes").returncode == 0
        wrong = world.run("answer", choice_id, "delta")
        assert wrong.returncode == 2 and "human_answer_invalid" in wrong.stderr, describe(wrong)
        assert world.run("answer", choice_id, "1", "gamma").returncode == 0
        assert world.run_json("answer", "--list", "--json") == []

        out = await s.ok("check_answer", {"id": text_id})
        assert out == {"via": "aido answer", "id": text_id, "status": "answered", "answer": "use main"}
        out = await s.ok("check_answer", {"id": confirm_id})
        assert out["approved"] is True and out["answer"] == "yes"
        out = await s.ok("check_answer", {"id": choice_id})
        assert out["choices"] == ["alpha", "gamma"]

        # Declined out of band: confirm is a no, a text question a coded failure.
        sc = await s.err("confirm", {"question": "Force-push?", "timeout_ms": 200}, "needs_human")
        assert world.run("answer", sc["details"]["id"], "--decline").returncode == 0
        out = await s.ok("check_answer", {"id": sc["details"]["id"]})
        assert out["approved"] is False and out["reason"] == "declined"
        # Without timeout_ms the call does not wait: the agent gets the id to pass on at once.
        started = anyio.current_time()
        sc = await s.err("ask_human", {"question": "Right now?"}, "needs_human")
        assert anyio.current_time() - started < 2
        assert [q["id"] for q in world.run_json("answer", "--list", "--json")] == [sc["details"]["id"]]
    # Playback reproduces the needs_human failures and the answers, without the store.
    (world.aido_home / "questions.sqlite").rename(world.aido_home / "moved.sqlite")
    assert world.played_back() >= 4


async def test_the_original_call_can_wait_for_the_out_of_band_answer(world):
    async with world.session() as s:
        result: dict[str, Any] = {}

        async def ask() -> None:
            result["out"] = ok(await s.call("ask_human", {"question": "Name the feature flag", "timeout_ms": 20_000}))

        async def person() -> None:
            pending: list[Any] = []
            with anyio.fail_after(15):
                while not pending:
                    await anyio.sleep(0.1)
                    pending = await anyio.to_thread.run_sync(lambda: world.run_json("answer", "--list", "--json"))
            proc = await anyio.to_thread.run_sync(lambda: world.run("answer", pending[0]["id"], "fast-path"))
            assert proc.returncode == 0, describe(proc)

        started = anyio.current_time()
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            tg.start_soon(person)
        assert anyio.current_time() - started < 15
        assert result["out"]["answer"] == "fast-path" and result["out"]["via"] == "aido answer"
        # check_answer can wait too.
        sc = await s.err("confirm", {"question": "Continue?", "timeout_ms": 100}, "needs_human")
        qid = sc["details"]["id"]

        async def later() -> None:
            await anyio.sleep(0.5)
            await anyio.to_thread.run_sync(lambda: world.run("answer", qid, "yes"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(later)
            out = await s.ok("check_answer", {"id": qid, "wait_ms": 10_000})
        assert out["approved"] is True
    assert world.played_back() >= 2
