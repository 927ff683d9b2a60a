"""Confirm mode reaches every surface (issue 31, point 2), over real clients.

`mode = "confirm"` holds every mutation for a person's answer, and the answer may come from
whichever surface gives it first: the agent's client (MCP elicitation, the SDK's callback), `aido
answer` in another process, Mission Control's HTTP endpoint (what the page and `aido watch`
post). It is one question: the first answer wins, exactly once; the client's form is withdrawn
when another surface wins, a second answer is refused with a code, and the journal names who
answered (the surface and the person).
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx2
import pytest
from mcp import types

from conftest import World, describe
from helpers import err, eventually, ok
from test_serve import sdk, serve

pytestmark = pytest.mark.anyio

CONFIRM = 'mode = "confirm"\n'


async def waiting_question(world: World, timeout: float = 15) -> dict[str, Any]:
    """The one question `aido answer --list --json` shows, once it is there."""
    with anyio.fail_after(timeout):
        while True:
            pending = await anyio.to_thread.run_sync(lambda: world.run_json("answer", "--list", "--json"))
            if pending:
                assert len(pending) == 1, pending
                return pending[0]
            await anyio.sleep(0.1)


def records(world: World) -> list[dict[str, Any]]:
    """Every record of every session, as `aido replay export --jsonl` gives them."""
    out = []
    for s in world.run_json("replay", "sessions", "--json"):
        proc = world.run("replay", "export", s["id"], "--jsonl")
        assert proc.returncode == 0, describe(proc)
        out += [dict(json.loads(line), session=s["id"]) for line in proc.stdout.splitlines()]
    return out


def confirmations(world: World) -> list[dict[str, Any]]:
    return [r for r in records(world) if r.get("event") == "confirm_answered"]


async def test_a_write_waits_and_aido_answer_wins_over_the_open_form(world: World) -> None:
    shown: list[Any] = []
    withdrawn: list[bool] = []
    release = anyio.Event()

    async def held(context: Any, params: Any) -> types.ElicitResult:
        # The person at the agent's client never answers in time; aido withdraws the form
        # when another surface answers first.
        shown.append(params)
        try:
            await release.wait()
        except anyio.get_cancelled_exc_class():
            withdrawn.append(True)
            raise
        return types.ElicitResult(action="accept", content={"approve": False})

    async with world.session(config=CONFIRM, elicitation_callback=held) as s:
        result: dict[str, Any] = {}

        async def write() -> None:
            result["r"] = await s.call("write_file", {"path": "~/approved.txt", "content": "yes"})

        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            question = await waiting_question(world)
            assert question["question"]["kind"] == "confirm", question
            assert "write_file" in question["question"]["question"], question
            assert len(shown) == 1 and "write_file" in shown[0].message
            await anyio.sleep(0.3)
            assert "r" not in result and not (world.home / "approved.txt").exists(), "the write waits"
            proc = await anyio.to_thread.run_sync(
                lambda: world.run("answer", question["id"], "yes", env={"USER": "alice"})
            )
            assert proc.returncode == 0, describe(proc)
        out = ok(result["r"])
        assert out["created"] is True
        # The form is withdrawn (notifications/cancelled reached the SDK, which cancelled the
        # callback); had the client answered anyway, nobody would be waiting for it.
        assert await eventually(lambda: bool(withdrawn)), "the form is withdrawn"
        release.set()
        # A second answer, from anywhere, is refused.
        again = world.run("answer", question["id"], "no")
        assert again.returncode == 2 and "question_already_answered" in again.stderr, describe(again)
        await s.ok("read_file", {"path": "~/approved.txt"})
        assert len(shown) == 1, "reads are not asked about"
    assert (world.home / "approved.txt").read_text() == "yes"
    [answered] = confirmations(world)
    assert answered["approved"] is True and answered["answer"] == "accepted", answered
    assert answered["question"] == question["id"]
    assert answered["by"] == {"surface": "cli", "person": "alice"}, answered
    shown_text = world.run("replay", "show", answered["session"])
    assert "by cli (alice)" in shown_text.stdout, describe(shown_text)


async def test_the_client_form_answers_first_and_the_store_refuses_the_rest(world: World) -> None:
    async def approve(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"approve": True})

    async with world.session(config=CONFIRM, elicitation_callback=approve) as s:
        await s.ok("write_file", {"path": "~/form.txt", "content": "f"})
    [answered] = confirmations(world)
    assert answered["by"] == {"surface": "elicitation"}, answered
    late = world.run("answer", answered["question"], "no")
    assert late.returncode == 2 and "question_already_answered" in late.stderr, describe(late)
    assert (world.home / "form.txt").read_text() == "f"


async def test_a_client_without_forms_waits_for_a_person_and_nobody_is_a_timeout(world: World) -> None:
    config = CONFIRM + "[limits]\nconfirm_timeout_ms = 1500\n"
    async with world.session(config=config) as s:  # no elicitation_callback: no forms
        started = anyio.current_time()
        await s.err("write_file", {"path": "~/late.txt", "content": "x"}, "confirm_declined")
        assert anyio.current_time() - started >= 1.4
        [closed] = confirmations(world)
        assert closed["answer"] == "timeout" and "by" not in closed, closed
        # The question was closed with the call: a late answer is refused with its own code.
        late = world.run("answer", closed["question"], "yes")
        assert late.returncode == 2 and "question_closed" in late.stderr, describe(late)
        assert world.run_json("answer", "--list", "--json") == []
    assert not (world.home / "late.txt").exists()


async def test_mission_control_answers_over_http_and_the_journal_names_it(world: World) -> None:
    config = world.write_config(CONFIRM + "[limits]\nconfirm_timeout_ms = 30000\n")
    with serve(world, "--config", str(config)) as served:
        async with sdk(served) as session, httpx2.AsyncClient(timeout=30, headers=served.headers()) as http:

            async def question() -> dict[str, Any]:
                with anyio.fail_after(15):
                    while True:
                        listed = (await http.get(f"{served.base}/mc/api/questions")).json()["questions"]
                        if listed:
                            return listed[0]
                        await anyio.sleep(0.1)

            # Approved on the page (who: mission_control, as app.js sends it).
            result: dict[str, Any] = {}

            async def write(name: str) -> None:
                result[name] = await session.call_tool("write_file", {"path": name, "content": name})

            async with anyio.create_task_group() as tg:
                tg.start_soon(write, "page.txt")
                q = await question()
                assert q["question"]["kind"] == "confirm" and "write_file" in q["question"]["question"], q
                answered = await http.post(
                    f"{served.base}/mc/api/questions/{q['id']}", json={"approve": True, "who": "mission_control"}
                )
                assert answered.status_code == 200, answered.text
            ok(result["page.txt"])
            assert (world.home / "page.txt").read_text() == "page.txt"
            # aido watch comes second: 409, the code says why.
            second = await http.post(
                f"{served.base}/mc/api/questions/{q['id']}", json={"approve": False, "who": "watch", "by": "bob"}
            )
            assert second.status_code == 409 and second.json()["code"] == "question_already_answered", second.text
            cli = world.run("answer", q["id"], "no")
            assert cli.returncode == 2 and "question_already_answered" in cli.stderr, describe(cli)

            # Denied from aido watch's side of the API: nothing is written.
            async with anyio.create_task_group() as tg:
                tg.start_soon(write, "denied.txt")
                q2 = await question()
                denied = await http.post(
                    f"{served.base}/mc/api/questions/{q2['id']}", json={"approve": False, "who": "watch", "by": "bob"}
                )
                assert denied.status_code == 200, denied.text
            err(result["denied.txt"], "confirm_declined")
            assert not (world.home / "denied.txt").exists()

            # Mission Control's timeline names who answered each.
            sessions = (await http.get(f"{served.base}/mc/api/sessions")).json()["sessions"]
            sid = next(s["id"] for s in sessions if "aido serve" not in (s.get("client") or ""))
            rows = (await http.get(f"{served.base}/mc/api/sessions/{sid}")).json()["rows"]
            said = [r["text"] for r in rows if r["kind"] == "confirm_answered"]
            assert len(said) == 2, rows
            assert said[0].startswith("mission_control (with the operator's token from 127.0.0.1)"), said
            assert said[1].startswith("watch (bob, with the operator's token from 127.0.0.1)"), said
    by = [c["by"] for c in confirmations(world)]
    assert [b["surface"] for b in by] == ["mission_control", "watch"], by
    assert "127.0.0.1" in by[0]["person"] and by[1]["person"].startswith("bob"), by


async def test_a_2026_client_retrying_after_another_surface_answered_gets_the_result_once(world: World) -> None:
    from test_mcp_2026 import Transport

    config = world.write_config(CONFIRM + "[limits]\nconfirm_timeout_ms = 30000\n")
    profile = ("confirm", ("--config", str(config)), "")

    async def unused(context: Any, params: Any) -> types.ElicitResult:
        raise AssertionError("the round is answered by hand")

    async with Transport(world, "stdio").modern(profile, elicitation_callback=unused) as client:
        args = {"path": "~/rounds.txt", "content": "r"}
        first = await client.session.call_tool("write_file", args, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult), first
        [key] = list(first.input_requests or {})
        assert "write_file" in first.input_requests[key].params.message
        # While the client shows its form, the person answers in a terminal.
        question = await waiting_question(world)
        proc = await anyio.to_thread.run_sync(lambda: world.run("answer", question["id"], "yes", env={"USER": "dave"}))
        assert proc.returncode == 0, describe(proc)
        with anyio.fail_after(10):
            while not (world.home / "rounds.txt").exists():
                await anyio.sleep(0.05)
        # Another call asks meanwhile (its round is kept beside the first, not swept).
        other = {"path": "~/other.txt", "content": "o"}
        second = await client.session.call_tool("write_file", other, allow_input_required=True)
        assert isinstance(second, types.InputRequiredResult), second
        # The client's late "no" is ignored; its retry collects the write's result.
        late = {key: types.ElicitResult(action="decline")}
        done = await client.session.call_tool(
            "write_file", args, input_responses=late, request_state=first.request_state, allow_input_required=True
        )
        assert ok(done)["created"] is True, done
        # The second is answered in the client first: its "no" holds, and the store refuses more.
        no = {key: types.ElicitResult(action="accept", content={"approve": False})}
        refused = await client.session.call_tool(
            "write_file", other, input_responses=no, request_state=second.request_state, allow_input_required=True
        )
        err(refused, "confirm_declined")
    assert (world.home / "rounds.txt").read_text() == "r"
    assert not (world.home / "other.txt").exists()
    answered, declined = confirmations(world)
    assert answered["approved"] is True and answered["by"] == {"surface": "cli", "person": "dave"}, answered
    assert declined["approved"] is False and declined["by"] == {"surface": "elicitation"}, declined
    too_late = world.run("answer", declined["question"], "yes")
    assert too_late.returncode == 2 and "question_already_answered" in too_late.stderr, describe(too_late)
    completed = [r for r in records(world) if r.get("event") == "action_completed"]
    assert len(completed) == 1, completed
