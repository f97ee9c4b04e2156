"""The loop's decisions against a scripted model, on a real dev server."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.converter import PayloadConverter
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from devservers.fakemodel import FakeModelServer
from infra.datadir import read_effects
from tests.conftest import Harness, answer, model_activities, tool_use
from tests.support.procs import wait_for_status
from tests.support.tools import TOOLS
from worker import build_worker
from workflows.contract import CancelRequest, Decision, SessionHistory, SessionStatus


async def test_tool_then_answer(harness: Harness):
    result = await harness.run([tool_use("get_time", id="t1"), answer("It is noon.")])
    assert result.status == "completed"
    assert result.answer == "It is noon."
    assert result.steps == 2
    assert result.stop_reason is None
    sent = harness.requests(result.session_id)[1]["body"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    tool_result = sent[-1]["content"][0]
    assert tool_result["type"] == "tool_result" and tool_result["tool_use_id"] == "t1"
    assert not tool_result.get("is_error")


async def test_a_short_retry_safe_tool_runs_locally_by_default_and_the_ui_names_the_call(harness: Harness):
    # save_note (idempotent, no approval, the default 10 s timeout) runs as a local
    # activity; slow_upsert (idempotent, timeout 150 s) stays a regular one.
    handle = await harness.start([
        {"text": "", "tool_calls": [
            {"name": "save_note", "input": {"title": "t", "text": "x"}, "id": "n1"},
            {"name": "slow_upsert", "input": {"key": "k", "seconds": 0}, "id": "u1"},
        ]},
        answer("Saved."),
    ])  # fmt: skip
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed"
    history = await handle.query("history", result_type=SessionHistory)
    assert [c.status for c in history.tool_calls] == ["done", "done"]
    activities, markers = [], []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            activities.append(event.activity_task_scheduled_event_attributes.activity_type.name)
        elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED and event.user_metadata.HasField(
            "summary"
        ):
            markers.append(PayloadConverter.default.from_payload(event.user_metadata.summary, str))
    assert activities == ["call_model", "run_tool", "call_model"]  # the model twice, slow_upsert once
    # What the Temporal UI shows for the local call: its marker's summary, the tool and its input.
    assert any(m.startswith("tool save_note ") and '"title": "t"' in m for m in markers), markers


async def test_parallel_calls_keep_the_models_order(harness: Harness):
    turn = {
        "tool_calls": [
            {"name": "slow_upsert", "input": {"key": "a", "seconds": 0.6}, "id": "slow"},
            {"name": "get_time", "input": {}, "id": "fast"},
        ]
    }
    handle = await harness.start([turn, answer("ok")])
    result = await handle.result()
    assert result.status == "completed"
    results = harness.requests(handle.id)[1]["body"]["messages"][-1]["content"]
    assert [r["tool_use_id"] for r in results] == ["slow", "fast"]
    history = await handle.query("history", result_type=SessionHistory)
    calls = {c.tool_use_id: c for c in history.tool_calls}
    # Run concurrently: the fast one finished before the slow one.
    assert calls["fast"].ended_at < calls["slow"].ended_at


async def test_unknown_tool_is_an_error_result(harness: Harness):
    result = await harness.run([tool_use("teleport", id="t1"), answer("sorry")])
    assert result.status == "completed"
    sent = harness.requests(result.session_id)[1]["body"]["messages"][-1]["content"][0]
    assert sent["is_error"] is True
    assert "unknown tool 'teleport'" in sent["content"] and "get_time" in sent["content"]


async def test_invalid_input_goes_back_to_the_model(harness: Harness):
    result = await harness.run([tool_use("save_note", {"title": 42}, id="t1"), answer("fixed")])
    sent = harness.requests(result.session_id)[1]["body"]["messages"][-1]["content"][0]
    assert sent["is_error"] is True
    assert "invalid input for save_note" in sent["content"]
    assert "title" in sent["content"] and "text" in sent["content"]


async def test_extra_arguments_are_rejected(harness: Harness):
    result = await harness.run([tool_use("get_time", {"timezone_name": "UTC", "evil": 1}), answer("ok")])
    sent = harness.requests(result.session_id)[1]["body"]["messages"][-1]["content"][0]
    assert sent["is_error"] is True and "evil" in sent["content"]


async def test_tool_exception_is_a_result_and_the_run_goes_on(harness: Harness):
    result = await harness.run([tool_use("explode", {"message": "disk on fire"}), answer("handled")])
    assert result.status == "completed"
    sent = harness.requests(result.session_id)[1]["body"]["messages"][-1]["content"][0]
    assert sent["is_error"] is True and "disk on fire" in sent["content"]


async def test_output_is_truncated_with_a_note(harness: Harness):
    result = await harness.run(
        [tool_use("big_output", {"chars": 5000}), answer("ok")], limits={"max_tool_output": 1000}
    )
    content = harness.requests(result.session_id)[1]["body"]["messages"][-1]["content"][0]["content"]
    assert content.startswith("x" * 1000)
    assert "[truncated 4000 of 5000 characters" in content
    assert len(content) < 1200


async def test_third_identical_call_gets_a_repeat_note(harness: Harness):
    same = lambda i: tool_use("get_time", {"timezone_name": "UTC"}, id=f"t{i}")  # noqa: E731
    result = await harness.run([same(1), same(2), same(3), answer("ok")])
    requests = harness.requests(result.session_id)
    second = requests[2]["body"]["messages"][-1]["content"][0]["content"]
    third = requests[3]["body"]["messages"][-1]["content"][0]["content"]
    assert "repeating yourself" not in second
    assert "made 3 times" in third and "repeating yourself" in third


async def test_max_steps_runs_the_last_tools_then_stops(harness: Harness):
    turns = [tool_use("save_note", {"title": f"n{i}", "text": "x"}, id=f"s{i}") for i in range(5)]
    result = await harness.run(turns, limits={"max_steps": 2})
    assert result.status == "stopped" and result.stop_reason == "max_steps"
    assert result.steps == 2
    mine = [e for e in read_effects() if e["session_id"] == result.session_id]
    assert len(mine) == 2  # the tools of the last allowed response ran
    assert len(harness.requests(result.session_id)) == 2


async def test_token_budget_stops_before_the_tools_run(harness: Harness):
    expensive = {
        **tool_use("save_note", {"title": "t", "text": "x"}),
        "usage": {"input_tokens": 900, "output_tokens": 200},
    }
    result = await harness.run([expensive, answer("never")], limits={"token_budget": 1000})
    assert result.status == "stopped" and result.stop_reason == "token_budget"
    assert [e for e in read_effects() if e["session_id"] == result.session_id] == []
    assert len(harness.requests(result.session_id)) == 1


async def test_cache_tokens_count_toward_the_budget(harness: Harness):
    turn = {
        **tool_use("get_time"),
        "usage": {"input_tokens": 10, "output_tokens": 10, "cache_read_input_tokens": 2000},
    }
    result = await harness.run([turn, answer("never")], limits={"token_budget": 1000})
    assert result.stop_reason == "token_budget"
    assert result.usage.cache_read_input_tokens == 2000


async def test_cost_budget(harness: Harness):
    from sessions.pricing import price_for

    turn = {**tool_use("get_time"), "usage": {"input_tokens": 100_000, "output_tokens": 10}}
    result = await harness.run(
        [turn, answer("never")], limits={"cost_budget_usd": 0.2}, price=price_for("claude-sonnet-4-6")
    )
    assert result.status == "stopped" and result.stop_reason == "cost_budget"
    assert result.cost_usd is not None and result.cost_usd > 0.2


async def test_cost_budget_without_prices_fails_at_start(harness: Harness):
    result = await harness.run([answer("never")], limits={"cost_budget_usd": 1.0}, model="mystery-model")
    assert result.status == "failed"
    assert "cost budget needs prices for model 'mystery-model'" in (result.error or "")
    assert harness.requests(result.session_id) == []


async def test_timeout_stops_the_run(harness: Harness):
    slow = {**tool_use("get_time"), "delay": 3}
    result = await harness.run([slow, answer("never")], limits={"timeout_seconds": 1})
    assert result.status == "stopped" and result.stop_reason == "timeout"
    assert result.steps == 0


async def test_stop_reasons_max_tokens_and_refusal(harness: Harness):
    cut = await harness.run([answer("half an ans", stop_reason="max_tokens")])
    assert (cut.status, cut.stop_reason) == ("stopped", "max_tokens")
    refused = await harness.run([answer("", stop_reason="refusal")])
    assert (refused.status, refused.stop_reason) == ("stopped", "refusal")


async def test_pause_turn_continues(harness: Harness):
    result = await harness.run([answer("searching…", stop_reason="pause_turn"), answer("found it")])
    assert result.status == "completed" and result.steps == 2 and result.answer == "found it"


async def test_terminal_model_error_fails_at_once(harness: Harness):
    result = await harness.run([{"status": 401, "message": "invalid x-api-key"}])
    assert result.status == "failed"
    assert result.error == "model 401: invalid x-api-key"
    assert len(harness.requests(result.session_id)) == 1


async def test_exhausted_script_fails_loudly(harness: Harness):
    result = await harness.run([tool_use("get_time")])
    assert result.status == "failed"
    assert "has no turn left" in (result.error or "")


async def test_retryable_error_recovers(harness: Harness):
    result = await harness.run([{"status": 529, "message": "Overloaded"}, answer("fine")])
    assert result.status == "completed" and result.answer == "fine"
    assert len(harness.requests(result.session_id)) == 2


async def test_deny_gives_the_model_the_reason(harness: Harness):
    email = {"to": "a@example.com", "subject": "hi", "body": "x"}
    handle = await harness.start([tool_use("send_email", email, id="e1"), answer("ok, not sent")])
    await wait_for_status(handle, "waiting_approval")
    assert await handle.execute_update(
        "deny_call", Decision(tool_use_id="e1", reason="not today"), result_type=str
    )
    result = await handle.result()
    assert result.status == "completed"
    sent = harness.requests(handle.id)[1]["body"]["messages"][-1]["content"][0]
    assert sent["is_error"] is True and "not today" in sent["content"]
    assert [e for e in read_effects() if e["session_id"] == handle.id] == []


async def test_approval_rules(harness: Harness):
    email = {"to": "a@example.com", "subject": "hi", "body": "x"}
    handle = await harness.start([tool_use("send_email", email, id="e1"), answer("sent")])
    snapshot = await wait_for_status(handle, "waiting_approval")
    assert [p.tool_use_id for p in snapshot.pending_approvals] == ["e1"]
    try:
        await handle.execute_update("approve_call", Decision(tool_use_id="nope"), result_type=str)
        raise AssertionError("an unknown id was accepted")
    except WorkflowUpdateFailedError as err:
        assert "no tool call 'nope'" in str(err.cause)
    await handle.execute_update("approve_call", Decision(tool_use_id="e1"), result_type=str)
    try:
        await handle.execute_update("deny_call", Decision(tool_use_id="e1"), result_type=str)
        raise AssertionError("a second decision was accepted")
    except WorkflowUpdateFailedError as err:
        assert (
            "already decided" in str(err.cause)
            or "has ended" in str(err.cause)
            or "completed" in str(err.cause)
        )
    result = await handle.result()
    assert result.status == "completed" and result.pending_approvals == []
    effects = [e for e in read_effects() if e["session_id"] == handle.id]
    assert len(effects) == 1 and effects[0]["idempotency_key"] == f"{handle.id}:e1"


async def test_invalid_input_is_caught_before_approval(harness: Harness):
    handle = await harness.start([tool_use("send_email", {"to": "not-an-address"}), answer("ok")])
    result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "completed"
    sent = harness.requests(handle.id)[1]["body"]["messages"][-1]["content"][0]
    assert sent["is_error"] is True and "invalid input for send_email" in sent["content"]


async def test_pause_then_resume(harness: Harness):
    # 3 s of tool: room for the pause to arrive while it runs, however slow the machine.
    handle = await harness.start(
        [{**tool_use("slow_upsert", {"key": "k", "seconds": 3}), "delay": 0}, answer("done")]
    )
    await until_calls(handle, "running")
    await handle.execute_update("pause_session", result_type=str)
    history = await until_calls(handle, "done")  # the tool finishes; the next model call must not start
    assert history.status.status == "paused"
    scheduled = [e async for e in handle.fetch_history_events()
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                 and e.activity_task_scheduled_event_attributes.activity_type.name == "call_model"]  # fmt: skip
    assert len(scheduled) == 1 and len(harness.requests(handle.id)) == 1
    await handle.execute_update("resume_session", result_type=str)
    result = await handle.result()
    assert result.status == "completed" and len(harness.requests(handle.id)) == 2


async def test_cancel_during_a_model_call_discards_the_response(harness: Harness):
    handle = await harness.start([{**answer("too late"), "delay": 2}])
    await asyncio.sleep(0.5)
    await handle.signal("cancel")
    result = await handle.result()
    assert result.status == "cancelled"
    history = await handle.query("history", result_type=SessionHistory)
    assert [m.role for m in history.messages] == ["user"]
    assert result.steps == 0 and result.answer is None


async def test_cancel_during_a_tool_call_cancels_the_activity(harness: Harness, data_dir):
    handle = await harness.start([tool_use("wait_for_cancel", {"seconds": 30}, id="w1"), answer("never")])
    await asyncio.sleep(1.5)
    await handle.execute_update("cancel_session", {"reason": "changed my mind"}, result_type=str)
    result = await handle.result()
    assert result.status == "cancelled" and result.error == "changed my mind"
    history = await handle.query("history", result_type=SessionHistory)
    assert history.tool_calls[0].status == "cancelled"
    marker = data_dir / "cancelled-w1"
    for _ in range(40):
        if marker.exists():
            break
        await asyncio.sleep(0.1)
    assert marker.exists(), "the heartbeating tool never saw the cancellation"


async def test_temporal_cancel_has_the_same_effect(harness: Harness):
    handle = await harness.start([{**answer("too late"), "delay": 2}])
    await asyncio.sleep(0.5)
    await handle.cancel()
    result = await handle.result()
    assert result.status == "cancelled"


class HoldOpen(Interceptor):
    """Keeps a workflow open after its run has returned, until the `test-release` signal.

    Once the workflow has closed, the server refuses every update before the workflow sees
    it; held open, a control after the end reaches the session's own rule."""

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        return _HoldOpenInbound


class _HoldOpenInbound(WorkflowInboundInterceptor):
    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        released = asyncio.Event()
        workflow.set_signal_handler("test-release", released.set)
        result = await super().execute_workflow(input)
        await released.wait()
        return result


async def test_controls_after_the_end_are_rejected(
    client: Client, fake_model: FakeModelServer, data_dir: Path
):
    queue = f"test-{uuid.uuid4().hex[:8]}"
    model = model_activities(fake_model, data_dir)
    async with build_worker(client, TOOLS, queue=queue, model=model, interceptors=[HoldOpen()]):
        handle = await Harness(client, fake_model, queue).start([answer("done")])
        ended = await wait_for_status(handle, "completed")  # the session has ended; its workflow is open
        controls = [("pause_session", "pause", ()), ("resume_session", "resume", ()),
                    ("cancel_session", "cancel", (CancelRequest(reason="too late"),))]  # fmt: skip
        for update, verb, args in controls:
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await handle.execute_update(update, *args, result_type=str)
            cause = refused.value.cause
            assert (
                isinstance(cause, ApplicationError)
                and cause.message == f"session {handle.id} is completed; cannot {verb}"
            )
        for signal, _, args in controls:
            await handle.signal(signal.removesuffix("_session"), *args)  # the signal path: ignored
        after = await handle.query("status", result_type=SessionStatus)
        changed = {"updated_at", "temporal_actions"}
        assert after.status == "completed" and after.model_dump(exclude=changed) == ended.model_dump(
            exclude=changed
        )
        # Each refused update and each ignored signal is still a billable action.
        assert after.temporal_actions == ended.temporal_actions + 2 * len(controls)
        accepted = [e async for e in handle.fetch_history_events()
                    if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED]  # fmt: skip
        assert accepted == []
        await handle.signal("test-release")
        result = await asyncio.wait_for(handle.result(), 30)
        assert result.status == "completed" and result.answer == "done"
        # Closed: the server refuses the update without asking the workflow.
        with pytest.raises(RPCError, match=r"(?i)completed"):
            await handle.execute_update("pause_session", result_type=str)


async def until_calls(handle, status: str, timeout: float = 30) -> SessionHistory:
    """The session's history once it has tool calls and all of them are `status`."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        history = await handle.query("history", result_type=SessionHistory)
        if history.tool_calls and all(c.status == status for c in history.tool_calls):
            return history
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(
                f"tool calls stayed {[c.status for c in history.tool_calls]}, wanted {status}"
            )
        await asyncio.sleep(0.05)
