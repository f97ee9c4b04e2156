"""What a session costs on Temporal Cloud, counted by the session itself, and heartbeats.

A default worker schedules no heartbeat timeout and its activities send no heartbeat. A
session's `temporal_actions` (status, history, each trace turn) equals what
bench/billing.py counts in its histories by Cloud's rules plus the heartbeats the dev
server's counters saw, over continue-as-new, with approvals, pauses, local and regular
tools, timers, upserts, a sub-agent and refused updates (the dev server's rejection
counter: nothing in history says they happened, the next model call's reply records them);
and the same when every workflow task replays the session from its history.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError

from bench.billing import Actions, count
from bench.economy import HEARTBEATS, REJECTED, metrics_url, scrape
from devservers.fakemodel import FakeModelServer
from sessions import control, listing
from sessions.archive import whole_history
from tests.conftest import Harness, answer, model_activities, tool_use
from tests.support.reliability import record
from tests.support.tools import TOOLS
from tests.test_agents import cli, team
from tests.test_watch import EMAIL, run_cli, wait_for_status
from worker import build_worker
from workflows.agent import AgentWorkflow
from workflows.contract import Decision, Limits, SessionInput, SessionStatus

AREA = "Billable actions"
SETTLE_S = 1.0  # the server's counters lag its requests


async def runs_of(client: Client, session_id: str) -> list[list[HistoryEvent]]:
    """The events of each run of a session, first run first (continue-as-new links them)."""
    runs: list[list[HistoryEvent]] = []
    run_id: str | None = None
    while True:
        handle = client.get_workflow_handle(session_id, run_id=run_id)
        events = [e async for e in handle.fetch_history_events()]
        runs.insert(0, events)
        run_id = events[0].workflow_execution_started_event_attributes.continued_execution_run_id or None
        if run_id is None:
            return runs


async def counted(client: Client, session_id: str, heartbeats: int = 0) -> Actions:
    """bench/billing.py's count of every run of the session, plus `heartbeats`."""
    total = Actions(heartbeats=heartbeats)
    for events in await runs_of(client, session_id):
        total = total + count(events)
    return total


class Counters:
    """The dev server's heartbeat and rejected-update counters around a session."""

    def __init__(self, dev_server: Any) -> None:
        self.url = metrics_url(dev_server)
        self.before = scrape(self.url)

    async def since(self) -> tuple[int, int]:
        await asyncio.sleep(SETTLE_S)
        after = scrape(self.url)
        grew = {k: int(after.get(k, 0) - self.before.get(k, 0)) for k in after}
        return sum(grew.get(k, 0) for k in HEARTBEATS), sum(grew.get(k, 0) for k in REJECTED)


async def test_a_default_worker_schedules_no_heartbeat_timeout_and_sends_no_heartbeat(
    harness: Harness, dev_server
):
    counters = Counters(dev_server)
    handle = await harness.start([
        {**tool_use("slow_upsert", {"key": "k", "seconds": 2.5}, id="u1"), "delay": 2.5},
        answer("Saved."),
    ])  # fmt: skip
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed"
    heartbeats, _ = await counters.since()
    scheduled = [e.activity_task_scheduled_event_attributes async for e in handle.fetch_history_events()
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]  # fmt: skip
    assert [a.activity_type.name for a in scheduled] == ["call_model", "run_tool", "call_model"]
    assert all(not a.HasField("heartbeat_timeout") or a.heartbeat_timeout.ToTimedelta() == timedelta(0)
               for a in scheduled), scheduled  # fmt: skip
    assert heartbeats == 0
    assert result.temporal_actions == (await counted(harness.client, handle.id)).total
    record(
        AREA,
        "a worker with its defaults; a 2.5 s model call and a 2.5 s tool",
        "no activity is scheduled with a heartbeat timeout and the server records no heartbeat",
        {},
    )


async def _a_busy_session(harness: Harness, dev_server) -> tuple[WorkflowHandle, int, int]:
    """A session over two runs: a local tool, a slow regular tool, an approval with a pause
    and resume (signals) and a refused update; model calls long enough to heartbeat."""
    counters = Counters(dev_server)
    session_id = f"test-{uuid.uuid4().hex[:10]}"
    harness.script(session_id, [
        {**tool_use("get_time", id="t1"), "delay": 2.2},
        tool_use("slow_upsert", {"key": "k", "seconds": 2.2}, id="u1"),
        tool_use("send_email", EMAIL, id="e1"),
        {**answer("Sent."), "delay": 1.2},
    ])  # fmt: skip
    # As `client.py start` starts it: with its search attributes, so that its first workflow
    # task records a patch marker beside the local activity that lists the tools.
    session_input = SessionInput(
        goal="do the thing", limits=Limits(continue_as_new_after_steps=2), search_attributes=True
    )
    handle = await control.start(harness.client, session_input, session_id, task_queue=harness.task_queue)  # fmt: skip
    await wait_for_status(handle, "waiting_approval", timeout=60, queried=False)
    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update(AgentWorkflow.approve_call, Decision(tool_use_id="nope"))
    await handle.signal(AgentWorkflow.pause)
    await wait_for_status(handle, "paused", queried=False)
    await handle.signal(AgentWorkflow.resume)
    await handle.execute_update(AgentWorkflow.approve_call, Decision(tool_use_id="e1"))
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed" and result.runs == 2, result
    heartbeats, rejected = await counters.since()
    return handle, heartbeats, rejected


async def test_the_sessions_count_is_its_history_and_the_servers_heartbeats(
    client: Client, fake_model: FakeModelServer, data_dir: Path, dev_server
):
    queue = f"test-{uuid.uuid4().hex[:8]}"
    model = model_activities(fake_model, data_dir)
    # As `worker.py --heartbeat-timeout 3` runs it.
    async with build_worker(client, TOOLS, queue=queue, model=model, heartbeat_timeout=timedelta(seconds=3)):
        harness = Harness(client, fake_model, queue)
        handle, heartbeats, rejected = await _a_busy_session(harness, dev_server)
        status = await handle.query(AgentWorkflow.status)
        history = await whole_history(await handle.query(AgentWorkflow.history))
    # A worker that has never seen the session answers from a replay of its history.
    async with build_worker(client, TOOLS, queue=queue, model=model, heartbeat_timeout=timedelta(seconds=3)):
        replayed = await whole_history(await handle.query(AgentWorkflow.history))
    found = await counted(client, handle.id, heartbeats)
    assert heartbeats >= 3  # two model calls and the slow tool outlast a beat's interval
    assert rejected == 1  # the refused approval: billed, not in history, echoed by the next model call
    assert status.temporal_actions == found.total + rejected, found.as_dict()
    assert history.temporal_actions == found.total + rejected
    assert sum(t.temporal_actions for t in history.trace) == found.total + rejected
    assert all(t.temporal_actions > 0 for t in history.trace)
    assert replayed.temporal_actions == found.total + rejected
    assert [t.temporal_actions for t in replayed.trace] == [t.temporal_actions for t in history.trace]
    record(
        AREA,
        "a session over two runs: local and regular tools, an approval, pause and resume, a refused "
        "update, heartbeats every 1 s; then its status from a worker that replays it",
        "`temporal_actions` in status equals bench/billing.py's count of its two histories plus the "
        "server's heartbeat and rejected-update counters, and the same after a replay; the trace turns add "
        "up to it",
        {
            "actions": found.total + rejected,
            "of which heartbeats": heartbeats,
            "refused updates": rejected,
        },
    )


async def test_a_subagent_is_counted_in_its_parent(harness: Harness, tmp_path: Path):
    parent = f"test-{uuid.uuid4().hex[:10]}"
    child = f"{parent}.sub-1"
    harness.script(parent, [tool_use("agent__helper", {"task": "email the team"}, id="h1"), answer("Done.")])
    harness.script(child, [tool_use("send_email", EMAIL, id="e9"), answer("Sent.")])
    code, _, err = await cli(harness, "start", "get it sent", "--agent", "lead", "--session", parent,
                             definitions=team(tmp_path))  # fmt: skip
    assert code == 0, err
    handle = harness.client.get_workflow_handle_for(AgentWorkflow.run, parent)
    await wait_for_status(handle, "waiting_approval", queried=False)
    code, _, err = await cli(harness, "approve", parent, "e9")  # a signal-free update routed to the child
    assert code == 0, err
    result: SessionStatus = await handle.result()
    assert result.status == "completed"
    own, theirs = await counted(harness.client, parent), await counted(harness.client, child)
    assert theirs.starts == 0 and own.children == 2  # the child's start is its parent's
    child_status = await harness.client.get_workflow_handle(child).query(AgentWorkflow.status)
    assert child_status.temporal_actions == theirs.total, theirs.as_dict()
    assert result.temporal_actions == own.total + theirs.total, (own.as_dict(), theirs.as_dict())


async def test_a_sleeping_subagents_word_to_its_parent_is_counted(harness: Harness, tmp_path: Path):
    """The child's signals that it sleeps and wakes (its parent's working time stops
    meanwhile) are counted in the parent, where they are received."""
    from tests.test_waits import start_napping_lead

    parent = f"test-{uuid.uuid4().hex[:10]}"
    child = f"{parent}.sub-1"
    harness.script(parent, [tool_use("agent__napper", {"task": "nap"}, id="n1"), answer("Done.")])
    harness.script(child, [tool_use("sleep", {"seconds": 1, "reason": "nap"}, id="s1"), answer("Rested.")])
    handle = await start_napping_lead(harness, tmp_path, parent)
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed"
    own, theirs = await counted(harness.client, parent), await counted(harness.client, child)
    # Its first word (nothing waits), asleep, awake: each a signal the parent received.
    assert own.signals >= 3, own.as_dict()
    assert result.temporal_actions == own.total + theirs.total, (own.as_dict(), theirs.as_dict())


async def test_status_history_and_list_show_the_count(harness: Harness):
    handle = await harness.start(
        [tool_use("save_note", {"title": "t", "text": "x"}, id="n1"), answer("Noted.")]
    )
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    code, out, err = await run_cli(harness, "status", handle.id, "--json")
    assert code == 0, err
    assert json.loads(out)["temporal_actions"] == result.temporal_actions > 0
    code, out, err = await run_cli(harness, "status", handle.id)
    assert code == 0 and f"{result.temporal_actions} Temporal actions" in out, out
    code, out, err = await run_cli(harness, "history", handle.id, "--json")
    document = json.loads(out)
    assert document["temporal_actions"] == result.temporal_actions
    assert sum(t["temporal_actions"] for t in document["trace"]) == result.temporal_actions
    code, out, err = await run_cli(harness, "list", "--json")
    assert code == 0, err
    rows = {row["session_id"]: row for row in map(json.loads, out.splitlines())}
    assert rows[handle.id]["actions"] == result.temporal_actions


async def test_a_fork_counts_its_own_actions_from_zero(harness: Harness):
    source = await harness.start(
        [tool_use("save_note", {"title": "t", "text": "x"}, id="n1"), answer("Noted.")]
    )
    ended: SessionStatus = await asyncio.wait_for(source.result(), 60)
    fork = f"{source.id}-fork"
    harness.script(fork, [answer("Noted again.")])
    code, out, err = await cli(harness, "fork", source.id, "--at-step", "1", "--session", fork)
    assert code == 0 and out.strip() == fork, err
    forked: SessionStatus = await asyncio.wait_for(
        harness.client.get_workflow_handle_for(AgentWorkflow.run, fork).result(), 60
    )
    assert forked.status == "completed" and ended.temporal_actions > 0
    assert forked.temporal_actions == (await counted(harness.client, fork)).total
    source_trace = (await source.query(AgentWorkflow.history)).trace
    fork_trace = (await harness.client.get_workflow_handle(fork).query(AgentWorkflow.history)).trace
    assert fork_trace[0].temporal_actions == source_trace[0].temporal_actions  # the source's step, as it cost


async def _refuse(handle: WorkflowHandle, update: Any, *args: Any) -> None:
    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update(update, *args)


async def test_refused_updates_are_counted_and_survive_a_replay(
    client: Client, fake_model: FakeModelServer, data_dir: Path, dev_server
):
    """A refused update is billed (the dev server's rejection counter) and leaves nothing in
    history: the session shows it at once, the next model call records it, so a worker that
    replays the session counts it too; its result, and its status after it closed (read
    from the result, with no worker), count every refusal."""
    queue = f"test-{uuid.uuid4().hex[:8]}"
    model = model_activities(fake_model, data_dir)
    counters = Counters(dev_server)
    harness = Harness(client, fake_model, queue)
    async with build_worker(client, TOOLS, queue=queue, model=model):
        handle = await harness.start([tool_use("send_email", EMAIL, id="e1"),
                                      tool_use("send_email", EMAIL, id="e2"), answer("Sent.")])  # fmt: skip
        await settled_after_model_call(handle, 1)
        before = await handle.query(AgentWorkflow.status)
        assert [p.tool_use_id for p in before.pending_approvals] == ["e1"]
        await _refuse(handle, AgentWorkflow.approve_call, Decision(tool_use_id="nope"))
        await _refuse(handle, AgentWorkflow.resume_session)  # not paused
        shown = await handle.query(AgentWorkflow.status)
        await handle.execute_update(AgentWorkflow.approve_call, Decision(tool_use_id="e1"))
        await settled_after_model_call(handle, 2)
        live = await handle.query(AgentWorkflow.status)
        assert [p.tool_use_id for p in live.pending_approvals] == ["e2"]
    # A worker that has never seen the session, and keeps none in its cache: it replays the
    # history, where the second model call's reply carries the two refusals.
    async with build_worker(client, TOOLS, queue=queue, model=model, max_cached_workflows=0):
        replayed = await handle.query(AgentWorkflow.status)
        replayed_history = await handle.query(AgentWorkflow.history)
    found = await counted(client, handle.id)
    async with build_worker(client, TOOLS, queue=queue, model=model):
        await _refuse(handle, AgentWorkflow.deny_call, Decision(tool_use_id="e1"))  # already decided
        late = await handle.query(AgentWorkflow.status)
        await handle.execute_update(AgentWorkflow.approve_call, Decision(tool_use_id="e2"))
        result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
        history = await control.history(client, handle.id)
        rows = {r.session_id: r.summary() for r in await listing.rows(client, listing.Filter(), limit=200)}
    heartbeats, rejected = await counters.since()
    ended = await control.status(client, handle.id)  # no worker runs
    total = await counted(client, handle.id, heartbeats)

    assert rejected == 3, "the server billed each refusal"
    assert shown.temporal_actions == before.temporal_actions + 2, "shown at once"
    assert replayed == live, "the refusals the second model call carried are in its history"
    assert replayed.temporal_actions == found.total + 2, found.as_dict()
    assert sum(t.temporal_actions for t in replayed_history.trace) == replayed.temporal_actions
    assert replayed_history.trace[0].temporal_actions > before.temporal_actions, "in the turn they came in"
    assert late.temporal_actions == replayed.temporal_actions + 1, "shown at once on the new worker"
    assert result.status == "completed"
    assert result.temporal_actions == total.total + rejected, total.as_dict()
    assert ended == result
    assert history.status == result and history.temporal_actions == result.temporal_actions
    assert sum(t.temporal_actions for t in history.trace) == result.temporal_actions
    assert rows[handle.id]["actions"] == result.temporal_actions
    record(
        AREA,
        "a session refused 3 updates (an approval of an unknown call, a resume of a running session, "
        "a deny of a decided call); a worker without a cache replayed it between its model calls",
        "each refusal shows in `status` at once; the next model call records it, so the replay counts "
        "it too; the result is bench/billing.py's count of its history plus the server's rejection "
        "counter, and `status` after the end (no worker), `history` and `list` say the same",
        {"actions": result.temporal_actions, "refused updates": rejected},
    )


async def test_a_refusal_after_the_last_model_call_is_in_the_result(harness: Harness):
    """A refusal no model call recorded is in the result, which the worker computed; a
    replay cannot see it, so a closed session's `status` is its result."""
    handle = await harness.start([answer("Hello.")], chat=True)
    await settled_after_model_call(handle, 1)
    await _refuse(handle, AgentWorkflow.resume_session)  # not paused
    await handle.execute_update(AgentWorkflow.close_session)
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    found = await counted(harness.client, handle.id)
    assert result.temporal_actions == found.total + 1, found.as_dict()
    replayed = await handle.query(AgentWorkflow.status)
    assert replayed.temporal_actions == found.total  # what a query of the closed session would say
    assert await control.status(harness.client, handle.id) == result
    code, out, err = await run_cli(harness, "status", handle.id, "--json")
    assert code == 0 and json.loads(out)["temporal_actions"] == result.temporal_actions, err


async def test_a_refusal_held_at_continue_as_new_goes_to_the_next_run(harness: Harness):
    """A refusal no model call recorded before the run continued as new is in the next
    run's input, so the session's result counts it."""
    handle = await harness.start(
        [{**tool_use("get_time", id="t1"), "delay": 1.5}, answer("Noon.")],
        limits={"continue_as_new_after_steps": 1},
    )
    await scheduled_model_call(handle)
    await handle.execute_update(AgentWorkflow.pause_session)  # the tools wait for the resume
    await settled_after_model_call(handle, 1)
    paused = await handle.query(AgentWorkflow.status)
    assert paused.status == "paused", paused
    await _refuse(handle, AgentWorkflow.pause_session)  # already paused
    await handle.execute_update(AgentWorkflow.resume_session)  # the tool, then the next run at once
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed" and result.runs == 2, result
    found = await counted(harness.client, handle.id)
    assert result.temporal_actions == found.total + 1, found.as_dict()


async def scheduled_model_call(handle: WorkflowHandle, timeout: float = 30) -> None:
    """Wait, reading history only, until the session's first model call is scheduled."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        events = [e async for e in handle.fetch_history_events()]
        if any(
            e.activity_task_scheduled_event_attributes.activity_type.name == "call_model"
            for e in events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        ):
            return
        assert asyncio.get_running_loop().time() < deadline, "no model call scheduled"
        await asyncio.sleep(0.1)


async def settled_after_model_call(handle: WorkflowHandle, calls: int, timeout: float = 30) -> None:
    """Wait, reading history only, until the workflow task that took the session's `calls`th
    model reply has completed: its local activities (an input check) have ended with it, so
    a query from here on cannot race one (see tests/support/billing.py)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        events = [e async for e in handle.fetch_history_events()]
        replies = [i for i, e in enumerate(events) if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
                   and _activity_type(events, e) == "call_model"]  # fmt: skip
        if len(replies) >= calls:
            tasks = [
                e.event_type for e in events[replies[calls - 1] :] if e.event_type in WORKFLOW_TASK_EVENTS
            ]
            if tasks and tasks[-1] == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                return
        assert asyncio.get_running_loop().time() < deadline, f"{len(replies)} model replies"
        await asyncio.sleep(0.1)


WORKFLOW_TASK_EVENTS = (
    EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
)


def _activity_type(events: list[HistoryEvent], completed: HistoryEvent) -> str:
    scheduled = completed.activity_task_completed_event_attributes.scheduled_event_id
    return events[scheduled - 1].activity_task_scheduled_event_attributes.activity_type.name
