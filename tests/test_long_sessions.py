"""Long sessions: multi-turn chat, continue-as-new, and history that grows linearly."""

from __future__ import annotations

import asyncio
import json

import pytest
from temporalio.client import WorkflowUpdateFailedError

from tests.conftest import Harness, answer, tool_use
from tests.test_loop import wait_for_status
from workflows.types import Decision, SessionHistory, SessionStatus, UserMessage


async def test_chat_turns_queue_and_close(harness: Harness):
    handle = await harness.start(
        [{**answer("first answer"), "delay": 1}, answer("second answer"), answer("third answer")], chat=True
    )
    await asyncio.sleep(0.3)
    # Sent while the first run is in progress: queued, taken after it, in order.
    assert await handle.execute_update("send_message", UserMessage(text="second question"), result_type=int) == 2
    assert await handle.execute_update("send_message", UserMessage(text="third question"), result_type=int) == 3
    snapshot = await wait_for_status(handle, "waiting_input")
    while snapshot.user_turns < 3 or snapshot.answer != "third answer":
        await asyncio.sleep(0.1)
        snapshot = await handle.query("status", result_type=SessionStatus)
    assert snapshot.status == "waiting_input" and snapshot.queued_messages == 0
    history = await handle.query("history", result_type=SessionHistory)
    texts = [m.text() for m in history.messages]
    assert texts == ["do the thing", "first answer", "second question", "second answer", "third question", "third answer"]
    assert await handle.execute_update("close_session", result_type=str) == "closed"
    result = await handle.result()
    assert result.status == "completed" and result.answer == "third answer" and result.user_turns == 3


async def test_chat_idle_timeout_ends_the_session(harness: Harness):
    result = await harness.run([answer("hello")], chat=True, idle_timeout_seconds=1)
    assert result.status == "completed" and result.stop_reason == "idle_timeout"


async def test_messages_need_a_chat_session(harness: Harness):
    handle = await harness.start([{**answer("done"), "delay": 1}])
    with pytest.raises(WorkflowUpdateFailedError) as err:
        await handle.execute_update("send_message", UserMessage(text="more"), result_type=int)
    assert "not a chat session" in str(err.value.cause)
    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update("close_session", result_type=str)
    assert (await handle.result()).status == "completed"


async def test_continue_as_new_keeps_the_whole_session(harness: Harness):
    turns = [tool_use("save_note", {"title": f"n{i}", "text": "x"}, id=f"s{i}") for i in range(5)]
    handle = await harness.start([*turns, answer("all saved")], limits={"continue_as_new_after_steps": 2})
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed" and result.answer == "all saved"
    assert result.steps == 6 and result.runs >= 3
    history = await handle.query("history", result_type=SessionHistory)
    assert len(history.messages) == 12 and len(history.trace) == 6 and len(history.tool_calls) == 5
    keys = {c.tool_use_id for c in history.tool_calls}
    assert keys == {f"s{i}" for i in range(5)}
    # The model saw the whole conversation in every run: the transcript crossed runs.
    last_request = harness.requests(handle.id)[-1]["body"]["messages"]
    assert len(last_request) == 11


async def test_chat_survives_continue_as_new_with_a_pending_approval_and_a_queued_message(harness: Harness):
    email = {"to": "a@example.com", "subject": "s", "body": "b"}
    handle = await harness.start(
        [tool_use("send_email", email, id="e1"), answer("sent it"), answer("and the second answer")],
        chat=True,
        limits={"continue_as_new_after_steps": 1},
    )
    snapshot = await wait_for_status(handle, "waiting_approval")
    # The session continues as new while it waits: the approval stays pending.
    for _ in range(100):
        snapshot = await handle.query("status", result_type=SessionStatus)
        if snapshot.runs >= 2:
            break
        await asyncio.sleep(0.1)
    assert snapshot.runs >= 2 and [p.tool_use_id for p in snapshot.pending_approvals] == ["e1"]
    assert await handle.execute_update("send_message", UserMessage(text="second question"), result_type=int) == 2
    assert (await handle.query("status", result_type=SessionStatus)).queued_messages == 1
    await handle.execute_update("approve_call", Decision(tool_use_id="e1"), result_type=str)
    for _ in range(200):
        snapshot = await handle.query("status", result_type=SessionStatus)
        if snapshot.answer == "and the second answer":
            break
        await asyncio.sleep(0.1)
    assert snapshot.status == "waiting_input" and snapshot.user_turns == 2
    await handle.execute_update("close_session", result_type=str)
    result = await handle.result()
    assert result.status == "completed"
    history = await handle.query("history", result_type=SessionHistory)
    assert [m.role for m in history.messages] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert history.tool_calls[0].status == "done"


async def history_bytes(handle) -> int:
    """Bytes of every run's event history of a session, as JSON."""
    total = 0
    run_id = None
    async for execution in handle._client.list_workflows(f"WorkflowId = '{handle.id}'"):
        run_id = execution.run_id
        found = await handle._client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        total += len(found.to_json())
    return total


async def test_history_grows_linearly_over_200_steps(harness: Harness):
    steps = 200
    turns = [tool_use("big_output", {"chars": 5000}, id=f"b{i}") for i in range(steps)]
    handle = await harness.start([*turns, answer("done")], limits={"max_steps": steps + 1, "token_budget": 10**12})
    result = await asyncio.wait_for(handle.result(), 240)
    assert result.status == "completed" and result.steps == steps + 1, result.error
    history = await handle.fetch_history()
    events = history.events
    transcript = sum(
        len(json.dumps(m.model_dump(mode="json")))
        for m in (await handle.query("history", result_type=SessionHistory)).messages
    )
    # Temporal counts its history limit in stored (protobuf) bytes; `temporal workflow show
    # --output json` prints more (base64 payloads, indented field names): see docs/long-sessions.md.
    total = sum(e.ByteSize() for e in events)
    # Bytes per step are flat: the second half of the session costs what the first did.
    starts = [i for i, e in enumerate(events) if e.HasField("activity_task_scheduled_event_attributes")
              and e.activity_task_scheduled_event_attributes.activity_type.name == "call_model"]  # fmt: skip
    half = starts[len(starts) // 2]
    first = sum(e.ByteSize() for e in events[:half])
    second = sum(e.ByteSize() for e in events[half:])
    assert second < first * 1.3, (first, second)
    assert total <= 3 * transcript, (total, transcript)
