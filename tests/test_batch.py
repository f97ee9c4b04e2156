"""Acting on many sessions at once: `cancel`, `pause` and `resume` of several ids or of a
visibility query, `approve` and `deny` of several calls, on the command line and over
HTTP (`POST /v1/sessions:batch`), each id answering on its own, a user's query reaching
only their own sessions."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx2 as httpx
import pytest

from devservers.fakemodel import FakeModelServer
from infra.errors import SessionNotFound
from tests.conftest import Harness, answer, tool_use
from tests.support.api import ApiProcess, module_api, wait_for
from tests.support.procs import effects_of, wait_for_status
from tests.test_api import EMAIL, assert_error, start, wait_status
from tests.test_watch import run_cli

pytestmark = pytest.mark.xdist_group("api")


api = module_api("api")


def waiting_turns() -> list[dict[str, Any]]:
    return [tool_use("send_email", EMAIL, id="e1"), answer("ok")]


def two_calls() -> list[dict[str, Any]]:
    """One model turn asking for two emails: both wait for approval at once."""
    calls = [{"name": "send_email", "input": EMAIL, "id": i} for i in ("e1", "e2")]
    return [{"text": "", "tool_calls": calls}, answer("Both done.")]


async def batch(http: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    response = await http.post("/v1/sessions:batch", json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def test_a_batch_cancel_by_query_cancels_exactly_the_matching_sessions_and_no_other_users(
    api: ApiProcess, fake_model: FakeModelServer
):
    prefix = f"bq-{uuid.uuid4().hex[:8]}"
    async with api.client("alice") as alice, api.client("bob") as bob, api.client("olga") as olga:
        mine = [(await start(alice, fake_model, waiting_turns(), session_id=f"{prefix}-a{i}"))["session_id"] for i in range(2)]  # fmt: skip
        done = (await start(alice, fake_model, [answer("Done.")], session_id=f"{prefix}-a-done"))[
            "session_id"
        ]
        theirs = (await start(bob, fake_model, waiting_turns(), session_id=f"{prefix}-b"))["session_id"]
        for session_id in mine:
            await wait_status(alice, session_id, "waiting_approval")
        await wait_status(bob, theirs, "waiting_approval")
        await wait_status(alice, done, "completed")
        query = f"AgentStatus = 'waiting_approval' AND WorkflowId STARTS_WITH '{prefix}'"

        async def indexed() -> bool:  # visibility lags the sessions: every one is indexed as waiting
            listed = (
                await olga.get("/v1/sessions", params={"status": "waiting_approval", "limit": 200})
            ).json()
            return {*mine, theirs} <= {s["session_id"] for s in listed["sessions"]}

        await wait_for(indexed, what="the waiting sessions in visibility")

        answered = await batch(alice, action="cancel", query=query, reason="clearing the queue")
        assert sorted(answered["results"], key=lambda r: r["id"]) == [
            {"id": session_id, "ok": True, "error": None} for session_id in sorted(mine)
        ]
        for session_id in mine:
            await wait_status(alice, session_id, "cancelled")
        assert (await bob.get(f"/v1/sessions/{theirs}")).json()["status"] == "waiting_approval"
        assert (await alice.get(f"/v1/sessions/{done}")).json()["status"] == "completed"

        # An id of another user's session answers exactly as the single action does: not found.
        single = assert_error(
            await alice.post(f"/v1/sessions/{theirs}/cancel", json={}), 404, "SessionNotFound"
        )
        answered = await batch(alice, action="pause", ids=[theirs, "no-such-session"])
        assert [r["id"] for r in answered["results"]] == [theirs, "no-such-session"]
        assert [r["error"] for r in answered["results"]] == [
            single, {"type": "SessionNotFound", "message": "no session 'no-such-session'"}
        ]  # fmt: skip
        assert (await bob.get(f"/v1/sessions/{theirs}")).json()["status"] == "waiting_approval"

        # A query that closes the parentheses around it still reaches only the caller's own.
        escape = f"WorkflowId = 'none') OR (WorkflowId = '{theirs}') OR (WorkflowId = 'none'"
        assert (await batch(alice, action="cancel", query=escape))["results"] == []
        assert (await bob.get(f"/v1/sessions/{theirs}")).json()["status"] == "waiting_approval"

        # An operator's query reaches everyone's sessions.
        answered = await batch(olga, action="cancel", query=f"WorkflowId STARTS_WITH '{prefix}-b'")
        assert answered["results"] == [{"id": theirs, "ok": True, "error": None}]
        await wait_status(bob, theirs, "cancelled")


async def test_a_batch_is_bounded_and_approve_takes_calls_never_a_query(
    api: ApiProcess, fake_model: FakeModelServer
):
    async with api.client("alice") as alice:
        schema = (await alice.get("/openapi.json")).json()
        answer_schema = schema["paths"]["/v1/sessions:batch"]["post"]["responses"]["200"]["content"]
        assert answer_schema["application/json"]["schema"]["$ref"].endswith("/BatchResults")
        too_many = await alice.post("/v1/sessions:batch", json={"action": "cancel", "ids": ["s"] * 1001})
        assert "at most 1000" in assert_error(too_many, 422, "InvalidBody")["message"]
        for body in [
            {"action": "approve", "session_id": "s", "query": "AgentStatus = 'waiting_approval'"},
            {"action": "cancel", "ids": ["s"], "query": "AgentStatus = 'running'"},
            {"action": "approve", "ids": ["e1"]},
            {"action": "explode", "ids": ["s"]},
        ]:
            refused = assert_error(await alice.post("/v1/sessions:batch", json=body), 422, "InvalidBody")
            assert "\n" not in refused["message"]
        unreadable = await alice.post(
            "/v1/sessions:batch", json={"action": "cancel", "query": "AgentStatus ="}
        )
        assert (
            "the query is not one Temporal can read" in assert_error(unreadable, 400, "BadRequest")["message"]
        )

        # Several calls of one session, over HTTP: each is decided, the unknown one refused on its own.
        session_id = (await start(alice, fake_model, two_calls()))["session_id"]

        async def both_waiting() -> bool:
            found = (await alice.get(f"/v1/sessions/{session_id}")).json()
            return len(found["pending_approvals"]) == 2

        await wait_for(both_waiting, what="two calls waiting")
        answered = await batch(
            alice, action="deny", session_id=session_id, ids=["e1", "e2", "e9"], reason="no"
        )
        assert [(r["id"], r["ok"]) for r in answered["results"]] == [
            ("e1", True),
            ("e2", True),
            ("e9", False),
        ]
        assert answered["results"][2]["error"]["type"] == "Rejected"
        await wait_status(alice, session_id, "completed")
        calls = (await alice.get(f"/v1/sessions/{session_id}/history")).json()["tool_calls"]
        assert [(c["status"], c["decided_by"], c["reason"]) for c in calls] == [("denied", "alice", "no")] * 2


async def test_cli_batch_cancel_of_several_ids_with_one_bad_one_exits_non_zero_one_line_each(
    harness: Harness,
):
    first = await harness.start(waiting_turns())
    second = await harness.start(waiting_turns())
    for handle in (first, second):
        await wait_for_status(handle, "waiting_approval")
    code, out, err = await run_cli(
        harness, "cancel", first.id, "no-such-session", second.id, "--reason", "done"
    )
    assert code == 1, err
    assert out.splitlines() == [
        f"{first.id}: cancelling",
        "no-such-session: error: no session 'no-such-session'",
        f"{second.id}: cancelling",
    ]
    assert err.strip() == "error: 1 of 3 failed"
    for handle in (first, second):
        assert (await handle.result()).status == "cancelled"

    # One id: exactly as before, the outcome alone.
    third = await harness.start(waiting_turns())
    await wait_for_status(third, "waiting_approval")
    code, out, err = await run_cli(harness, "pause", third.id)
    assert (code, out, err) == (0, "paused\n", "")
    code, out, err = await run_cli(harness, "pause", "no-such-session")
    assert code == 1 and out == "" and err.startswith("error: no session 'no-such-session'"), err
    code, out, err = await run_cli(harness, "resume")
    assert code == 1 and err.strip().splitlines() == [
        "error: a session id or --query is needed (see: python client.py resume --help)"
    ]


async def test_cli_batch_by_query_acts_on_the_matching_sessions_only(harness: Harness):
    prefix = f"cq-{uuid.uuid4().hex[:8]}"
    matched = [await harness.start(waiting_turns(), session_id=f"{prefix}-{i}") for i in range(2)]
    other = await harness.start(waiting_turns(), session_id=f"x{prefix}")
    for handle in (*matched, other):
        await wait_for_status(handle, "waiting_approval")

    async def indexed() -> bool:
        found = [e.id async for e in harness.client.list_workflows(f"WorkflowId STARTS_WITH '{prefix}'")]
        return len(found) == 2

    await wait_for(indexed, what="the sessions in visibility")
    code, out, err = await run_cli(harness, "cancel", "--query", f"WorkflowId STARTS_WITH '{prefix}'")
    assert code == 0, err
    assert sorted(out.splitlines()) == sorted(f"{h.id}: cancelling" for h in matched)
    for handle in matched:
        assert (await handle.result()).status == "cancelled"
    assert (await wait_for_status(other, "waiting_approval")).status == "waiting_approval"
    code, out, err = await run_cli(harness, "cancel", "--query", "WorkflowId =")
    assert code == 1 and out == "" and err.startswith("error: the query is not one Temporal can read"), err
    code, out, err = await run_cli(harness, "cancel", "--query", f"WorkflowId = '{prefix}-none'")
    assert (code, out, err) == (0, "", "no session matches the query\n")
    await other.cancel()


async def test_cli_approve_of_several_calls(harness: Harness):
    handle = await harness.start(two_calls())

    async def both_waiting() -> bool:
        found = await wait_for_status(handle, "waiting_approval")
        return len(found.pending_approvals) == 2

    await wait_for(both_waiting, what="two calls waiting")
    code, out, err = await run_cli(harness, "approve", handle.id, "e1", "e2", "--as", "alice")
    assert code == 0, err
    assert out.splitlines() == ["e1: approved send_email (e1)", "e2: approved send_email (e2)"]
    assert (await handle.result()).status == "completed"
    assert len(effects_of(handle.id, "send_email")) == 2
    code, _, err = await run_cli(harness, "approve", handle.id, "e1", "e2", "--input", "{}")
    assert code == 1 and "--input edits one call" in err, err


async def test_at_most_32_actions_are_in_flight_and_each_id_answers_once_in_order():
    from sessions import batch as batches

    in_flight = most = 0

    async def act(session_id: str) -> str:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        if session_id == "s7":
            raise SessionNotFound(session_id)
        return "cancelling"

    ids = [f"s{i}" for i in range(100)]
    outcomes = await batches.each([*ids, "s1"], act)
    assert most == batches.AT_ONCE == 32
    assert [o.id for o in outcomes] == ids
    assert [o.id for o in outcomes if not o.ok] == ["s7"] and outcomes[0].text == "cancelling"
