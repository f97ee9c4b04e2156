"""Following a session by replaying its history (sessions/follow.py): the same items at the
same offsets as the stream's update poll, mid-run and after the end, across continue-as-new;
no update in the history however many follow; another worker's code falls back to the poll."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from devservers.fakemodel import FakeModelServer
from infra.fingerprint import code_fingerprint, fingerprint_of
from sessions.follow import follow
from tests.conftest import Harness, answer, model_activities, tool_use
from tests.support.tools import TOOLS
from tests.test_watch import EMAIL, wait_for_status
from worker import build_worker
from workflows.contract import Decision
from workflows.events import TOPICS, read_event

Item = tuple[int, str, Any]


async def read_all(items: Any, until_offset: int | None = None) -> list[Item]:
    """(offset, topic, data) until the `end` event (or the item at `until_offset`)."""
    out: list[Item] = []
    async for item in items:
        out.append((item.offset, item.topic, item.data))
        if item.offset == until_offset or read_event(item.topic, item.data).type == "end":
            break
    return out


def same(replayed: list[Item], streamed: list[Item]) -> bool:
    """The same items at the same offsets; each item's `at` within a second of the stream's:
    an item made after a local activity whose marker raced a query carries, in the replay,
    the time of the task before (sessions/follow.py)."""
    assert [(o, t, _without_at(d)) for o, t, d in replayed] == [
        (o, t, _without_at(d)) for o, t, d in streamed
    ]
    for (_, _, mine), (_, _, theirs) in zip(replayed, streamed, strict=True):
        if mine.get("at") != theirs.get("at"):
            gap = abs(datetime.fromisoformat(mine["at"]) - datetime.fromisoformat(theirs["at"]))
            assert gap < timedelta(seconds=1), (mine, theirs)
    return True


def _without_at(data: Any) -> Any:
    return {k: v for k, v in data.items() if k != "at"} if isinstance(data, dict) else data


def polled(client: Client, session_id: str, from_offset: int = 0) -> Any:
    return WorkflowStreamClient.create(client, session_id).subscribe(TOPICS, from_offset=from_offset)


async def updates_in(handle: WorkflowHandle) -> int:
    """WorkflowExecutionUpdateAccepted events over every run of the session."""
    count = 0
    run_id: str | None = handle.first_execution_run_id or handle.result_run_id
    while run_id:
        history = await handle._client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        count += sum(
            e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED for e in history.events
        )
        last = history.events[-1]
        run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id or None
    return count


async def test_replay_yields_the_polls_items_mid_run_after_the_end_and_across_runs(harness: Harness):
    turns = [
        tool_use("get_time", {"timezone_name": "UTC"}, id="t1", text="The time first."),
        tool_use("send_email", EMAIL, id="e1", text="Now the email."),
        tool_use("get_time", {"timezone_name": "UTC"}, id="t2"),
        answer("Done."),
    ]
    handle = await harness.start(turns, limits={"continue_as_new_after_steps": 1})
    said: list[str] = []
    from_start = asyncio.create_task(read_all(follow(harness.client, handle.id, say=said.append)))
    await wait_for_status(handle, "waiting_approval", timeout=30)
    # Mid-run: everything so far, up to the approval request, then the rest once decided.
    mid_run = follow(harness.client, handle.id, say=said.append)
    so_far = []
    async for item in mid_run:
        so_far.append((item.offset, item.topic, item.data))
        if item.data.get("type") == "approval":
            break
    await mid_run.aclose()
    assert same(so_far, await read_all(polled(harness.client, handle.id), until_offset=so_far[-1][0]))
    resumed = asyncio.create_task(
        read_all(follow(harness.client, handle.id, so_far[-1][0] + 1, say=said.append))
    )
    await handle.execute_update("approve_call", Decision(tool_use_id="e1"), result_type=str)
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed" and result.runs >= 3  # continued as new twice or more
    # The poll after the end reads the latest run's log, which carries every earlier item.
    truth = await read_all(polled(harness.client, handle.id))
    assert [read_event(t, d).type for _, t, d in truth][-1] == "end"
    assert {read_event(t, d).type for _, t, d in truth} >= {
        "tool_call",
        "approval",
        "decision",
        "continued",
        "turn",
    }
    assert same(await asyncio.wait_for(from_start, 30), truth)
    assert same(so_far + await asyncio.wait_for(resumed, 30), truth)
    assert same(await read_all(follow(harness.client, handle.id, say=said.append)), truth)
    assert same(await read_all(follow(harness.client, handle.id, 5, say=said.append)), truth[5:])
    assert said == []  # never fell back to the poll


async def test_followers_add_no_update_to_the_history(harness: Harness):
    handle = await harness.start(
        [tool_use("get_time", {"timezone_name": "UTC"}, id="t1"), tool_use("get_time", id="t2"), answer("ok")]
    )
    said: list[str] = []
    followers = [
        asyncio.create_task(read_all(follow(harness.client, handle.id, say=said.append))) for _ in range(3)
    ]
    seen = await asyncio.wait_for(asyncio.gather(*followers), 60)
    assert seen[0] == seen[1] == seen[2] and len(seen[0]) > 5
    assert said == []
    assert await updates_in(handle) == 0
    # The worker wrote its code's fingerprint into the history.
    history = await handle.fetch_history()
    completed = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED]
    assert {fingerprint_of(e.workflow_task_completed_event_attributes.identity) for e in completed} == {
        code_fingerprint()
    }


async def test_other_workflow_code_falls_back_to_the_poll(
    client: Client, fake_model: FakeModelServer, data_dir
):
    queue = f"test-{uuid.uuid4().hex[:8]}"
    other = build_worker(
        client,
        TOOLS,
        queue=queue,
        model=model_activities(fake_model, data_dir),
        identity="1@elsewhere wf=000000000000",
    )
    async with other:
        harness = Harness(client, fake_model, queue)
        handle = await harness.start([tool_use("get_time", {"timezone_name": "UTC"}, id="t1"), answer("ok")])
        said: list[str] = []
        followed = await asyncio.wait_for(read_all(follow(client, handle.id, say=said.append)), 60)
        assert followed == await read_all(polled(client, handle.id))
    assert len(said) == 1 and "other workflow code (wf=000000000000" in said[0], said
    assert await updates_in(handle) >= 1  # it did read through updates
