"""`send_message` mode `interrupt` (workflows/messages.py): the running model call is closed
where it runs, running read-only and idempotent tools are cancelled, an at-most-once tool
ends and keeps its result, a call waiting for approval is denied, and the message is the
model's next user turn. And a steer sent to a paused session waits for its resume. On a
real dev server with the fake model; the seconds an interrupt takes are printed and
asserted only against a generous deadline."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from infra.datadir import read_effects
from sessions.fork import forked_state
from sessions.live_text import session_events
from tests.conftest import Harness, answer, tool_use
from tests.support.procs import wait_until
from tests.support.reliability import record
from tests.test_loop_policy import status_of, wait_for_status
from tests.test_steer import texts, wait_for_requests
from tests.test_watch import run_cli
from workflows.agent import AgentWorkflow
from workflows.contract import SessionHistory, SessionStatus, UserMessage
from workflows.events import MessageDelivered
from workflows.state import SessionState

AREA = "Steering a session"
WORDS, PACE_S = 600, 0.05  # a 30 s answer, a word every 50 ms
STOPPED_WITHIN_S = 15.0  # generous: under a second on a quiet machine
INTERRUPTED = "interrupted by a new message"


def interrupt(text: str) -> UserMessage:
    return UserMessage(text=text, mode="interrupt")


async def delivered(harness: Harness, session_id: str) -> list[tuple[int, int]]:
    return [
        (item.event.id, item.event.step)
        async for item in session_events(harness.client, session_id)
        if isinstance(item.event, MessageDelivered)
    ]


async def history_of(handle: WorkflowHandle) -> SessionHistory:
    return await handle.query(AgentWorkflow.history)


async def test_an_interrupt_closes_the_model_request_and_is_the_next_user_turn(harness: Harness):
    handle = await harness.start(
        [answer(" ".join(f"word{i}" for i in range(WORDS)), pace=PACE_S), answer("short")],
        tools=["get_time"], model_settings={"tool_choice": "any"},
    )  # fmt: skip
    [request] = await wait_until(lambda: harness.requests(handle.id), timeout=30, what="the model request")
    await asyncio.sleep(1.0)  # the model is writing
    sent = time.time()
    assert await handle.execute_update(AgentWorkflow.send_message, interrupt("stop: one word")) == 2
    closed = await wait_until(
        lambda: request.get("closed"), timeout=STOPPED_WITHIN_S, what="the model's connection closed"
    )
    took = closed - sent
    print(f"interrupt to the model's connection closed: {took:.2f} s (30 s of answer to go)")
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed" and result.answer == "short"
    assert result.steps == 1, "the closed call was recorded as a step"
    assert request["done"] - request["at"] < WORDS * PACE_S / 2, "the model wrote its whole answer"
    first, second = (r["body"]["messages"] for r in harness.requests(handle.id))
    assert second[-1]["role"] == "user" and texts(second[-1]) == ["do the thing", "stop: one word"]
    assert len(second) == len(first), "the cut answer went into the transcript"
    # The call made again still answers the goal: the run's first, with the session's tool_choice.
    assert [r["body"].get("tool_choice", {}).get("type") for r in harness.requests(handle.id)] == [
        "any",
        "any",
    ]
    assert await delivered(harness, handle.id) == [(2, 1)]
    record(
        AREA,
        "`send --mode interrupt` while the model streams a 30 s answer (a worker with its defaults)",
        "the worker closed the model request; the cut reply was not recorded and the step was made again "
        "with the message beside the goal; the session completed",
        {"interrupt to the model's connection closed": f"{took:.2f} s"},
    )


async def test_an_at_most_once_tool_finishes_through_an_interrupt_and_a_read_is_cancelled(harness: Harness):
    handle = await harness.start([
        {"text": "", "tool_calls": [
            {"name": "slow_charge", "input": {"amount": 5, "seconds": 3}, "id": "c1"},
            {"name": "long_read", "input": {"seconds": 60}, "id": "r1"},
        ]},
        answer("charged, and stopped reading"),
    ])  # fmt: skip
    await wait_until(
        lambda: [e for e in read_effects() if e["session_id"] == handle.id], timeout=30, what="the charge"
    )
    sent = time.time()
    await handle.execute_update(AgentWorkflow.send_message, interrupt("never mind the reading"))
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    print(f"interrupt to the model's next request: {harness.requests(handle.id)[1]['at'] - sent:.2f} s")
    assert result.status == "completed" and result.answer == "charged, and stopped reading"
    charge, read = (await history_of(handle)).tool_calls
    assert (charge.status, charge.output) == ("done", "charged 5")  # ran to its end, kept
    assert read.status == "cancelled"
    assert [e["tool"] for e in read_effects() if e["session_id"] == handle.id] == ["slow_charge"]
    turn = harness.requests(handle.id)[1]["body"]["messages"][-1]
    assert [b["type"] for b in turn["content"]] == ["tool_result", "tool_result", "text"]
    assert turn["content"][0]["content"] == "charged 5" and texts(turn) == ["never mind the reading"]
    assert harness.requests(handle.id)[1]["at"] - sent < 60, "the read ran to its end"


async def test_an_interrupt_denies_a_call_waiting_for_approval(harness: Harness):
    email = {"to": "team@example.com", "subject": "Summary", "body": "All done."}
    handle = await harness.start([tool_use("send_email", email, id="e1"), answer("not sent, as you said")])
    await wait_for_status(handle, "waiting_approval")
    await handle.execute_update(AgentWorkflow.send_message, interrupt("do not send it"))
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed"
    [call] = (await history_of(handle)).tool_calls
    assert (call.status, call.reason) == ("denied", INTERRUPTED)
    turn = harness.requests(handle.id)[1]["body"]["messages"][-1]
    assert turn["content"][0]["content"] == f"denied: {INTERRUPTED}" and texts(turn) == ["do not send it"]
    assert not [e for e in read_effects() if e["session_id"] == handle.id]


async def test_an_interrupt_replays_and_forks_around_its_delivery(harness: Harness):
    handle = await harness.start([
        tool_use("slow_upsert", {"key": "k", "seconds": 60}, id="u1"),
        answer("stopped"),
    ])  # fmt: skip
    await wait_for_requests(harness, handle.id, 1)
    await wait_until(
        lambda: [e for e in read_effects() if e["session_id"] == handle.id], timeout=30, what="the upsert"
    )
    await handle.execute_update(AgentWorkflow.send_message, interrupt("stop writing"))
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed" and result.steps == 2
    history = await handle.fetch_history()
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=pydantic_data_converter)
    replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None, replayed.replay_failure

    state = await handle.query(AgentWorkflow.state)
    assert isinstance(state, SessionState)
    # At step 1 the cut call runs again (its result is not kept) and the message is not there;
    # at step 2, the model's answer to it, it is.
    before = forked_state(handle.id, state, 1, None)
    after = forked_state(handle.id, state, 2, "go on")
    assert "stop writing" not in str(before.messages) and "stop writing" in str(after.messages)
    assert before.calls["u1"].status == "pending"


async def test_a_steer_to_a_paused_session_is_delivered_when_it_resumes(harness: Harness):
    handle = await harness.start(
        [tool_use("slow_upsert", {"key": "k", "seconds": 1}, id="s1"), answer("fini")]
    )
    await wait_until(
        lambda: [e for e in read_effects() if e["session_id"] == handle.id], timeout=30, what="the upsert"
    )
    await handle.execute_update(AgentWorkflow.pause_session)  # the running tool goes on to its end
    await handle.execute_update(AgentWorkflow.send_message, UserMessage(text="in French", mode="steer"))
    await wait_until(lambda: _tool_done(handle), timeout=30, what="the tool's result while paused")
    await asyncio.sleep(1.0)  # paused: no model call, the steer waits
    assert len(harness.requests(handle.id)) == 1
    pending = (await status_of(handle)).pending_messages
    assert [(m.id, m.mode) for m in pending] == [(2, "steer")]
    await handle.execute_update(AgentWorkflow.resume_session)
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed" and result.answer == "fini"
    assert texts(harness.requests(handle.id)[1]["body"]["messages"][-1]) == ["in French"]


async def _tool_done(handle: WorkflowHandle) -> Any:
    return [c for c in (await history_of(handle)).tool_calls if c.status == "done"]


async def test_the_command_line_sends_an_interrupt(harness: Harness):
    handle = await harness.start(
        [answer(" ".join(f"word{i}" for i in range(WORDS)), pace=PACE_S), answer("short")]
    )
    [request] = await wait_until(lambda: harness.requests(handle.id), timeout=30, what="the model request")
    code, out, err = await run_cli(harness, "send", handle.id, "one word", "--mode", "interrupt")
    assert code == 0, err
    assert out.strip() == (
        f"message 2 sent to {handle.id}: the work in flight is cut short, then the model gets it"
    )
    await wait_until(lambda: request.get("closed"), timeout=STOPPED_WITHIN_S, what="the connection closed")
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert result.answer == "short"
    code, _, err = await run_cli(harness, "send", handle.id, "late", "--mode", "interrupt")
    assert code == 1 and err.count("\n") == 1 and "has ended" in err, err


async def test_an_interrupt_to_a_paused_session_cuts_its_tool_and_waits_for_the_resume(harness: Harness):
    handle = await harness.start([
        tool_use("long_read", {"seconds": 60}, id="r1"),
        answer("as you wish"),
    ])  # fmt: skip
    await wait_until(lambda: _running(handle), timeout=30, what="the read running")
    await handle.execute_update(AgentWorkflow.pause_session)  # the running read goes on
    await handle.execute_update(AgentWorkflow.send_message, interrupt("stop reading"))
    await wait_until(lambda: _cancelled(handle), timeout=STOPPED_WITHIN_S, what="the read cut short")
    await asyncio.sleep(1.0)  # paused: no model call, the message waits
    assert len(harness.requests(handle.id)) == 1
    snapshot = await status_of(handle)
    assert snapshot.status == "paused" and [m.mode for m in snapshot.pending_messages] == ["interrupt"]
    await handle.execute_update(AgentWorkflow.resume_session)
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed" and result.answer == "as you wish"
    turn = harness.requests(handle.id)[1]["body"]["messages"][-1]
    assert [b["type"] for b in turn["content"]] == ["tool_result", "text"] and texts(turn) == ["stop reading"]


async def _running(handle: WorkflowHandle) -> Any:
    return [c for c in (await history_of(handle)).tool_calls if c.status == "running"]


async def _cancelled(handle: WorkflowHandle) -> Any:
    return [c for c in (await history_of(handle)).tool_calls if c.status == "cancelled"]
