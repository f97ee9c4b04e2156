"""`list --status` and `--user` answer from Temporal visibility (the Agent* search attributes)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from tests.conftest import Harness, answer, tool_use
from tests.test_watch import EMAIL, run_cli, wait_for_status
from workflows import search
from workflows.contract import SessionStatus


async def listed(harness: Harness, *args: str) -> list[dict]:
    code, out, err = await run_cli(harness, "list", "--json", *args)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


async def poll(harness: Harness, args: tuple[str, ...], want, timeout: float = 30) -> list[dict]:
    """Visibility is eventually consistent: ask again until `want(rows)` or the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        rows = await listed(harness, *args)
        if want(rows):
            return rows
        assert time.monotonic() < deadline, f"list {' '.join(args)} never matched; last answer: {rows}"
        await asyncio.sleep(0.3)


async def test_list_filters_by_status_and_user(harness: Harness):
    user = f"user-{uuid.uuid4().hex[:8]}"
    other = f"user-{uuid.uuid4().hex[:8]}"
    waiting, done, elsewhere = (f"vis-{uuid.uuid4().hex[:8]}" for _ in range(3))
    harness.script(waiting, [tool_use("send_email", EMAIL, id="e1"), answer("sent")])
    harness.script(done, [answer("done")])
    harness.script(elsewhere, [tool_use("send_email", EMAIL, id="e2"), answer("sent")])
    for session, who in ((waiting, user), (done, user), (elsewhere, other)):
        code, out, err = await run_cli(harness, "start", "a goal", "--session", session, "--user", who)
        assert code == 0 and out.strip() == session, err
    handles = {
        s: harness.client.get_workflow_handle(s, result_type=SessionStatus)
        for s in (waiting, done, elsewhere)
    }
    await wait_for_status(handles[waiting], "waiting_approval")
    await wait_for_status(handles[elsewhere], "waiting_approval")
    assert (await handles[done].result()).status == "completed"

    mine = await poll(
        harness, ("--user", user),
        lambda rows: {r["session_id"]: r["status"] for r in rows} == {waiting: "waiting_approval", done: "completed"},
    )  # fmt: skip
    by_id = {r["session_id"]: r for r in mine}
    assert by_id[waiting]["pending_approvals"] == 1 and by_id[waiting]["user"] == user
    assert by_id[done]["steps"] == 1 and by_id[done]["tokens"] > 0 and by_id[done]["pending_approvals"] == 0

    rows = await poll(
        harness,
        ("--status", "waiting_approval"),
        lambda rows: {waiting, elsewhere} <= {r["session_id"] for r in rows},
    )
    assert done not in {r["session_id"] for r in rows}
    assert {r["status"] for r in rows} == {"waiting_approval"}
    assert all(r["pending_approvals"] >= 1 for r in rows)

    both = await poll(harness, ("--status", "waiting_approval", "--user", user), lambda rows: len(rows) == 1)
    assert [r["session_id"] for r in both] == [waiting]

    # approving moves it out of the filter
    code, _, err = await run_cli(harness, "approve", waiting, "e1")
    assert code == 0, err
    await handles[waiting].result()
    await poll(harness, ("--status", "waiting_approval", "--user", user), lambda rows: rows == [])
    await poll(harness, ("--status", "completed", "--user", user), lambda rows: len(rows) == 2)
    described = await handles[waiting].describe()
    assert described.typed_search_attributes.get(search.AGENT_STATUS) == "completed"
    assert described.typed_search_attributes.get(search.AGENT_USER) == user

    code, out, _ = await run_cli(harness, "list", "--user", user)
    assert code == 0 and waiting in out and done in out and elsewhere not in out
    await handles[elsewhere].cancel()


async def test_counts_alone_are_indexed_every_ten_steps_and_ten_seconds(harness: Harness):
    """The start's attributes are not upserted again; the step and token counts alone wait for
    10 steps and 10 s; the end indexes everything. Read from the session's own history."""
    session = f"vis-{uuid.uuid4().hex[:8]}"
    turns = [tool_use("get_time", id=f"t{i}") for i in range(1, 12)]
    turns[9] = turns[9] | {"delay": 10.5}  # step 10's model call: past 10 s, at 10 steps
    harness.script(session, [*turns, answer("done")])
    code, out, err = await run_cli(harness, "start", "tell the time", "--session", session)
    assert code == 0 and out.strip() == session, err
    handle = harness.client.get_workflow_handle(session, result_type=SessionStatus)
    result = await asyncio.wait_for(handle.result(), 60)
    assert (result.status, result.steps) == ("completed", 12)

    upserts = []
    async for event in handle.fetch_history_events():
        if event.HasField("upsert_workflow_search_attributes_event_attributes"):
            fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
            if "AgentSteps" in fields:
                upserts.append(
                    (json.loads(fields["AgentStatus"].data), json.loads(fields["AgentSteps"].data))
                )
    assert upserts == [("running", 10), ("completed", 12)]
    described = await handle.describe()
    assert described.typed_search_attributes.get(search.AGENT_STEPS) == 12
