"""Messages while a session works (workflows/messages.py): `steer` reaches the model's next
call in the current run; `queue` waits for a chat's answer. On a real dev server with the
fake model."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError

from sessions.fork import forked_state
from sessions.live_text import session_events
from tests.conftest import Harness, answer, tool_use
from tests.test_loop_policy import status_of
from workflows.agent import AgentWorkflow
from workflows.contract import SessionStatus, UserMessage
from workflows.events import MessageDelivered
from workflows.state import SessionState


async def wait_for_requests(harness: Harness, session_id: str, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while len(harness.requests(session_id)) < count:
        assert time.monotonic() < deadline, f"the model had {len(harness.requests(session_id))} requests"
        await asyncio.sleep(0.05)


def texts(message: dict[str, Any]) -> list[str]:
    content = message["content"]
    return [content] if isinstance(content, str) else [b["text"] for b in content if b["type"] == "text"]


async def test_a_steer_reaches_the_very_next_model_request(harness: Harness):
    handle = await harness.start(
        [tool_use("slow_upsert", {"key": "k", "seconds": 1.5}, id="s1"), answer("done, in French")]
    )
    await wait_for_requests(harness, handle.id, 1)
    sent = time.monotonic()
    message_id = await handle.execute_update(AgentWorkflow.send_message, UserMessage(text="answer in French"))
    assert message_id == 2
    pending = (await status_of(handle)).pending_messages
    assert [(m.id, m.mode, m.chars) for m in pending] == [(2, "steer", len("answer in French"))]
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed" and result.steps == 2 and result.pending_messages == []
    second = harness.requests(handle.id)[1]["body"]["messages"][-1]
    assert [b["type"] for b in second["content"]] == ["tool_result", "text"]
    assert texts(second) == ["answer in French"]
    print(f"the steer reached the model {time.monotonic() - sent:.2f} s after the send")
    delivered = [
        item.event
        async for item in session_events(harness.client, handle.id)
        if isinstance(item.event, MessageDelivered)
    ]
    assert [(e.id, e.step) for e in delivered] == [(2, 2)]


async def test_a_steer_pending_at_an_answer_makes_one_more_call_without_tool_choice(harness: Harness):
    handle = await harness.start(
        [{**answer("first answer"), "delay": 1.5}, answer("second answer")],
        tools=["get_time"], model_settings={"tool_choice": "any"},
    )  # fmt: skip
    await wait_for_requests(harness, handle.id, 1)
    await handle.execute_update(AgentWorkflow.send_message, UserMessage(text="and the time?", mode="steer"))
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed" and result.answer == "second answer" and result.steps == 2
    first, second = (r["body"] for r in harness.requests(handle.id))
    assert first["tool_choice"]["type"] == "any" and "tool_choice" not in second
    assert second["messages"][-1]["role"] == "user" and texts(second["messages"][-1]) == ["and the time?"]

    # A fork before the delivery has no steer; one at the step that got it has it.
    state = await handle.query(AgentWorkflow.state)
    assert isinstance(state, SessionState)
    before = forked_state(handle.id, state, 1, "go on")
    after = forked_state(handle.id, state, 2, "go on")
    assert "and the time?" not in str(before.messages) and "and the time?" in str(after.messages)


async def test_queue_needs_a_chat_and_the_chat_default_is_unchanged(harness: Harness):
    handle = await harness.start([{**answer("hi"), "delay": 1}])
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(AgentWorkflow.send_message, UserMessage(text="later", mode="queue"))
    assert "is not a chat session" in str(refused.value.cause)
    await asyncio.wait_for(handle.result(), 60)

    chat = await harness.start([answer("hello"), answer("then this")], chat=True)
    deadline = time.monotonic() + 60
    while (await status_of(chat)).status != "waiting_input":
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    assert await chat.execute_update(AgentWorkflow.send_message, UserMessage(text="and then?")) == 2
    await chat.execute_update(AgentWorkflow.close_session)
    result: SessionStatus = await asyncio.wait_for(chat.result(), 60)
    assert result.user_turns == 2 and result.answer == "then this"
