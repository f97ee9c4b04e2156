"""Approval, pause and cancel races: decisions twice, for unknown ids, after cancel; storms
of pause/resume; pause while tools run. A rejected decision changes nothing."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowUpdateFailedError
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.service import RPCError

from infra.datadir import read_effects
from tests.conftest import Harness, answer, tool_use
from tests.support.procs import wait_until
from tests.support.reliability import record
from tests.test_loop import wait_for_status
from workflows.contract import FINAL_STATUSES, Decision, SessionHistory, SessionStatus
from workflows.events import EVENT_TOPIC, StatusChanged, read_event

AREA = "Cancel, pause and approval races"
EMAIL = {"to": "a@example.com", "subject": "hi", "body": "x"}


def effects(session_id: str) -> list[dict]:
    return [e for e in read_effects() if e["session_id"] == session_id]


async def accepted_updates(handle) -> list[str]:
    names = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            names.append(
                event.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
            )
    return names


async def rejected(handle, name: str, *args) -> str:
    """Send an update that must be refused; its reason."""
    with pytest.raises((WorkflowUpdateFailedError, RPCError)) as caught:
        await handle.execute_update(name, *args, result_type=str)
    err = caught.value
    return str(err.cause) if isinstance(err, WorkflowUpdateFailedError) else str(err)


def state(history: SessionHistory) -> str:
    """Everything the session knows but its billable actions (an ignored signal is still
    one: `signals_counted` checks those)."""
    return json.dumps(_unbilled(history.model_dump(mode="json")), sort_keys=True)


def _unbilled(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _unbilled(v) for k, v in value.items() if k != "temporal_actions"}
    if isinstance(value, list):
        return [_unbilled(v) for v in value]
    return value


async def signals_counted(handle, before: SessionStatus, signals: int) -> SessionStatus:
    """The status once the session has taken `signals` more signals (each is one billable
    action, ignored or not): then whatever they changed is there to see."""

    async def check() -> SessionStatus | None:
        now = await handle.query("status", result_type=SessionStatus)
        return now if now.temporal_actions >= before.temporal_actions + signals else None

    now = await wait_until(check, timeout=30, what=f"{signals} signals taken")
    assert now.temporal_actions == before.temporal_actions + signals
    return now


async def waiting_for(handle, tool_use_id: str) -> SessionHistory:
    """The session's history once `tool_use_id` waits for approval (and nothing else runs)."""

    async def check() -> SessionHistory | None:
        history = await handle.query("history", result_type=SessionHistory)
        return history if [p.tool_use_id for p in history.status.pending_approvals] == [tool_use_id] else None

    return await wait_until(check, timeout=30, what=f"{tool_use_id} waiting for approval")


async def test_second_decision_is_rejected_and_changes_nothing(harness: Harness):
    # After the approval the email goes out and the model asks for a second one: the
    # repeated decisions arrive while the session still runs, and waits, so nothing else
    # moves its state meanwhile, however slow the machine.
    handle = await harness.start(
        [tool_use("send_email", EMAIL, id="e1"), tool_use("send_email", EMAIL, id="e2"), answer("sent")]
    )
    await wait_for_status(handle, "waiting_approval")
    assert await handle.execute_update("approve_call", Decision(tool_use_id="e1"), result_type=str)
    waiting = await waiting_for(handle, "e2")
    before = state(waiting)
    again = await rejected(handle, "approve_call", Decision(tool_use_id="e1"))
    flipped = await rejected(handle, "deny_call", Decision(tool_use_id="e1", reason="too late"))
    assert "already decided" in again and "already decided" in flipped
    refused = await handle.query("status", result_type=SessionStatus)
    assert refused.temporal_actions == waiting.status.temporal_actions + 2  # each refusal is billed
    await handle.signal("approve", Decision(tool_use_id="e1"))  # the signal path: ignored
    await handle.signal("deny", Decision(tool_use_id="e1"))
    await signals_counted(handle, refused, 2)
    after = state(await handle.query("history", result_type=SessionHistory))
    assert after == before
    await handle.execute_update("approve_call", Decision(tool_use_id="e2"), result_type=str)
    result = await handle.result()
    assert result.status == "completed"
    assert len(effects(handle.id)) == 2  # each email sent once
    assert await accepted_updates(handle) == ["approve_call", "approve_call"]
    record(
        AREA,
        "approve sent twice; deny after approve (updates and signals)",
        f'rejected: "{again}"; the signals are ignored; state unchanged; the email went out once',
        {},
    )


async def test_deny_twice_then_approve_is_rejected(harness: Harness):
    handle = await harness.start(
        [tool_use("send_email", EMAIL, id="e1"), tool_use("send_email", EMAIL, id="e2"), answer("not sent")]
    )
    await wait_for_status(handle, "waiting_approval")
    await handle.execute_update("deny_call", Decision(tool_use_id="e1", reason="no"), result_type=str)
    before = state(await waiting_for(handle, "e2"))  # the session runs on, and waits again
    assert "already decided" in await rejected(handle, "deny_call", Decision(tool_use_id="e1"))
    assert "already decided" in await rejected(handle, "approve_call", Decision(tool_use_id="e1"))
    assert state(await handle.query("history", result_type=SessionHistory)) == before
    await handle.execute_update("deny_call", Decision(tool_use_id="e2", reason="no"), result_type=str)
    result = await handle.result()
    assert result.status == "completed" and effects(handle.id) == []
    history = await handle.query("history", result_type=SessionHistory)
    assert [c.status for c in history.tool_calls] == ["denied", "denied"]
    record(
        AREA,
        "deny sent twice; approve after deny",
        "rejected (already decided); the email never went out",
        {},
    )


async def test_unknown_ids_are_rejected_while_a_call_waits(harness: Harness):
    handle = await harness.start([tool_use("send_email", EMAIL, id="e1"), answer("sent")])
    await wait_for_status(handle, "waiting_approval")
    before = await handle.query("status", result_type=SessionStatus)
    for name in ("approve_call", "deny_call"):
        reason = await rejected(handle, name, Decision(tool_use_id="toolu_nope"))
        assert "no tool call 'toolu_nope'" in reason and "waiting: e1" in reason
    refused = await handle.query("status", result_type=SessionStatus)
    await handle.signal("approve", Decision(tool_use_id="toolu_nope"))
    after = await signals_counted(handle, refused, 1)
    # updated_at included: nothing was touched but the count of billable actions (each
    # refused update is one, as the signal is)
    assert refused == before.model_copy(update={"temporal_actions": before.temporal_actions + 2})
    assert after == before.model_copy(update={"temporal_actions": before.temporal_actions + 3})
    assert [p.tool_use_id for p in after.pending_approvals] == ["e1"]
    await handle.execute_update("approve_call", Decision(tool_use_id="e1"), result_type=str)
    assert (await handle.result()).status == "completed"
    assert await accepted_updates(handle) == ["approve_call"]
    record(
        AREA,
        "approve/deny for an unknown tool_use_id",
        "rejected, naming the calls that do wait; the waiting call is untouched and can still be approved",
        {},
    )


async def test_decisions_after_cancel_are_rejected(harness: Harness):
    handle = await harness.start([tool_use("send_email", EMAIL, id="e1"), answer("never")])
    await wait_for_status(handle, "waiting_approval")
    await handle.execute_update("cancel_session", {"reason": "stop"}, result_type=str)
    result = await handle.result()
    assert result.status == "cancelled"
    before = state(await handle.query("history", result_type=SessionHistory))
    for name in ("approve_call", "deny_call"):
        reason = await rejected(handle, name, Decision(tool_use_id="e1"))
        assert "completed" in reason.lower() or "cancelled" in reason.lower(), reason
    assert await rejected(handle, "cancel_session", {"reason": "again"})
    with pytest.raises(RPCError):  # a signal to an ended session is refused by the server
        await handle.signal("approve", Decision(tool_use_id="e1"))
    history = await handle.query("history", result_type=SessionHistory)
    assert state(history) == before
    assert history.tool_calls[0].status == "not_run"
    assert effects(handle.id) == [] and len(harness.requests(handle.id)) == 1
    record(
        AREA,
        "approve/deny/cancel after the session was cancelled",
        "rejected (the session has ended); the call stays `not_run`; nothing ran",
        {},
    )


async def status_events(client, handle) -> list[str]:
    """The session's status changes, in order, from its event stream (read after its end:
    the stream is read whole, then the iteration ends)."""
    found = []
    stream = WorkflowStreamClient.create(client, handle.id)
    async for item in stream.subscribe([EVENT_TOPIC], poll_cooldown=timedelta(milliseconds=50)):
        event = read_event(item.topic, item.data)
        if isinstance(event, StatusChanged):
            found.append(event.status)
    return found


async def test_fifty_pause_resume_signal_pairs_at_once(harness: Harness):
    # The storm arrives while the email waits for approval, so the session is at the same
    # point whatever the machine's speed, and no signal comes after its end.
    handle = await harness.start([tool_use("send_email", EMAIL, id="e1"), answer("sent")])
    await wait_for_status(handle, "waiting_approval")
    started = time.monotonic()
    await asyncio.gather(*(handle.signal(name) for _ in range(50) for name in ("pause", "resume")))
    sent_in = time.monotonic() - started

    async def signalled() -> list[str] | None:
        # Signals that come while a workflow task runs are kept aside by the server and
        # written to history when it completes: poll until all 100 are there.
        found = [e.workflow_execution_signaled_event_attributes.signal_name async for e in handle.fetch_history_events()
                 if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]  # fmt: skip
        return found if len(found) >= 100 else None

    order = await wait_until(signalled, timeout=30, what="the 100 signals in the history")
    assert sorted(order) == ["pause"] * 50 + ["resume"] * 50  # all 100 recorded, each once
    # The rule, applied to the signals in the order the server recorded them: a pause takes
    # effect on a session that is not paused, a resume on one that is; the others change nothing.
    paused, changes = False, []
    for name in order:
        if (name == "pause") != paused:
            paused = not paused
            changes.append("paused" if paused else "waiting_approval")
    made = len(changes)
    assert made  # at least the first pause in the order
    snapshot = await handle.query("status", result_type=SessionStatus)
    assert snapshot.status == ("paused" if paused else "waiting_approval")
    # Whatever the storm left, one more pause holds the session. Approved while paused, the
    # email waits (the workflow task that took the decision started nothing) until resume.
    await handle.signal("pause")
    if not paused:
        changes.append("paused")
    assert (await handle.query("status", result_type=SessionStatus)).status == "paused"
    await handle.execute_update("approve_call", Decision(tool_use_id="e1"), result_type=str)
    scheduled = [e async for e in handle.fetch_history_events()
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]  # fmt: skip
    assert len(scheduled) == 1 and effects(handle.id) == []  # the first model call only
    await handle.execute_update("resume_session", result_type=str)
    result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "completed" and result.steps == 2
    assert len(harness.requests(handle.id)) == 2 and len(effects(handle.id)) == 1
    # Every change the signals made, in order, and nothing else: the status events between
    # the wait for approval and the resume are exactly the rule's changes.
    statuses = await asyncio.wait_for(status_events(harness.client, handle), 30)
    first_wait = statuses.index("waiting_approval")
    during = statuses[first_wait + 1 : first_wait + 1 + len(changes)]
    assert during == changes, (statuses, changes)
    after = statuses[first_wait + 1 + len(changes) :]
    assert after == ["running", "completed"], statuses  # resumed (the email approved), then done
    record(
        AREA,
        "50 pause/resume signal pairs at once",
        "all 100 recorded; each status change is the one the rule gives for the signals in the server's order "
        "(a pause on a session not paused, a resume on a paused one); approved while paused, the tool waits for resume; "
        "the session completes, each step once",
        {"100 signals sent in": f"{sent_in:.2f} s", "status changes they made": made},
    )


async def test_fifty_pause_resume_update_pairs_at_once_stay_consistent(harness: Harness):
    handle = await harness.start(
        [tool_use("slow_upsert", {"key": "k", "seconds": 2}, id="u1"), {**answer("done"), "delay": 0.5}]
    )
    await asyncio.sleep(0.3)

    unsure: list[str] = []  # updates whose caller cannot tell whether the session took them

    async def send(name: str) -> bool:
        try:
            await handle.execute_update(name, result_type=str)
            return True
        except WorkflowUpdateFailedError as err:
            assert "already paused" in str(err.cause) or "not paused" in str(err.cause), err.cause
            return False
        except RPCError as err:  # refused, not lost: the session ended, the server's limit on
            # updates in flight for one workflow (10) was reached on a slow machine (refused
            # before the session saw it), or the server aborted the update's wait (its workflow
            # task was lost under load: the caller is told to send it again, and cannot know
            # whether the session had already accepted it; the history says).
            reasons = ("closing workflow", "completed", "in-flight updates", "workflow update was aborted")
            assert any(reason in str(err) for reason in reasons), err
            if "in-flight updates" not in str(err):
                unsure.append(name)
            return False

    names = [name for _ in range(50) for name in ("pause_session", "resume_session")]
    outcomes = await asyncio.gather(*(send(n) for n in names))
    told = {name: sum(ok for n, ok in zip(names, outcomes, strict=False) if n == name) for name in set(names)}
    # Accepted updates alternate pause, resume, pause...: never two pauses in a row. Each one
    # accepted was told to its caller, but for those whose wait the server aborted.
    accepted = list(await accepted_updates(handle))
    for name, count in told.items():
        assert count <= accepted.count(name) <= count + unsure.count(name), (name, told, unsure, accepted)
    paused, resumed = accepted.count("pause_session"), accepted.count("resume_session")
    assert all(a != b for a, b in itertools.pairwise(accepted)), accepted
    assert not accepted or accepted[0] == "pause_session"
    snapshot = await handle.query("status", result_type=SessionStatus)
    assert paused - resumed in (0, 1)
    if snapshot.status not in FINAL_STATUSES:
        # (A pause accepted while the last model call ran does not stop its answer.)
        assert (snapshot.status == "paused") == (paused - resumed == 1), (snapshot.status, paused, resumed)
    if snapshot.status == "paused":
        await handle.execute_update("resume_session", result_type=str)
    result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "completed" and len(harness.requests(handle.id)) == 2
    record(
        AREA,
        "50 pause/resume update pairs at once",
        "each accepted or rejected with a reason; the accepted ones alternate; the final state matches them",
        {"accepted": f"{paused} pauses, {resumed} resumes of 50 each"},
    )


async def calls_in(handle, status: str, count: int) -> SessionHistory:
    """The session's history once `count` tool calls are `status`."""

    async def check() -> SessionHistory | None:
        history = await handle.query("history", result_type=SessionHistory)
        return history if [c.status for c in history.tool_calls] == [status] * count else None

    return await wait_until(check, timeout=30, what=f"{count} tool calls {status}")


async def model_calls_scheduled(handle) -> int:
    return len([e async for e in handle.fetch_history_events()
                if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                and e.activity_task_scheduled_event_attributes.activity_type.name == "call_model"])  # fmt: skip


async def test_pause_during_tool_calls_lets_them_finish_and_stops_before_the_model(harness: Harness):
    # 3 s each: room for the pause to arrive while they run, however slow the machine.
    turn = {
        "tool_calls": [
            {"name": "slow_upsert", "input": {"key": f"k{i}", "seconds": 3}, "id": f"u{i}"} for i in range(3)
        ]
    }
    handle = await harness.start([turn, answer("all done")])
    await calls_in(handle, "running", 3)
    await handle.execute_update("pause_session", result_type=str)
    # The calls finish; the workflow task that records the last result (seen by the query)
    # schedules no model call.
    history = await calls_in(handle, "done", 3)
    assert history.status.status == "paused"
    assert len(effects(handle.id)) == 3
    assert await model_calls_scheduled(handle) == 1 and len(harness.requests(handle.id)) == 1
    resumed_at = time.time()
    await handle.execute_update("resume_session", result_type=str)
    result = await handle.result()
    assert result.status == "completed" and len(harness.requests(handle.id)) == 2
    resumed_to_call = harness.requests(handle.id)[1]["at"] - resumed_at
    record(
        AREA,
        "pause while three tool calls run",
        "the calls finish (results kept), no model call starts until resume; then it completes",
        {"model calls while paused": 0, "resume to next model call": f"{resumed_to_call:.2f} s"},
    )
