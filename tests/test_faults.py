"""Every way the Messages API fails, played by the fake server, and what the session does.

Retryable faults are retried by Temporal (the delay honours Retry-After) and the session
completes with one assistant message per step; terminal ones fail the session on the
first attempt with the provider's message. Delays are measured twice: from the fake
server's request times and from the history's activity events.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, TimeoutType

from infra.datadir import read_effects
from tests.conftest import Harness, answer, tool_use
from tests.support.reliability import record
from workflows.contract import SessionHistory, SessionStatus

AREA = "Model API faults"


@dataclass
class ModelAttempts:
    scheduled: datetime
    started: datetime  # of the last attempt: history records only that one
    attempt: int
    closed: str


async def model_activities(handle) -> list[ModelAttempts]:
    """Each call_model activity in the history: when scheduled, its last attempt, how it closed."""
    found: list[ModelAttempts] = []
    by_id: dict[int, ModelAttempts] = {}
    async for event in handle.fetch_history_events():
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == "call_model":
                item = ModelAttempts(event.event_time.ToDatetime(), event.event_time.ToDatetime(), 0, "open")
                by_id[event.event_id] = item
                found.append(item)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            if attrs.scheduled_event_id in by_id:
                item = by_id[attrs.scheduled_event_id]
                item.started, item.attempt = event.event_time.ToDatetime(), attrs.attempt
        elif kind in (
            EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
        ):
            for name in ("completed", "failed", "timed_out"):
                attrs = getattr(event, f"activity_task_{name}_event_attributes")
                if attrs.scheduled_event_id in by_id:
                    by_id[attrs.scheduled_event_id].closed = name
    return found


def gaps(requests: list[dict[str, Any]]) -> list[float]:
    """Seconds from the end of each answer to the next request."""
    return [b["at"] - a["done"] for a, b in itertools.pairwise(requests)]


async def assert_recorded_once(handle, steps: int) -> SessionHistory:
    history = await handle.query("history", result_type=SessionHistory)
    assistant = [m for m in history.messages if m.role == "assistant"]
    assert len(assistant) == steps, [m.model_dump() for m in history.messages]
    assert [t.step for t in history.trace] == list(range(1, steps + 1))
    return history


# ---- Retry-After ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "header, value, expected",
    [("retry-after", "2", 2.0), ("retry-after-ms", "1500", 1.5), (None, None, 1.0)],
    ids=["retry-after-seconds", "retry-after-ms", "no-header"],
)
async def test_429_retry_delay_honours_retry_after(harness: Harness, header, value, expected):
    fault = {"status": 429, "message": "Number of request tokens has exceeded your per-minute rate limit"}
    if header:
        fault["headers"] = {header: value}
    handle = await harness.start([fault, answer("fine")])
    result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "completed" and result.answer == "fine"
    requests = harness.requests(handle.id)
    assert len(requests) == 2
    [gap] = gaps(requests)
    # Honoured: at least the delay asked for; and not much more (no extra backoff on top).
    assert expected - 0.05 <= gap < expected + 0.9, gap
    [model] = await model_activities(handle)
    assert model.attempt == 2 and model.closed == "completed"
    from_history = (model.started - model.scheduled).total_seconds()
    assert from_history >= expected - 0.05, from_history
    history = await assert_recorded_once(handle, 1)
    assert history.trace[0].attempt == 2
    what = f"429 with `{header}: {value}`" if header else "429 without Retry-After"
    record(
        AREA,
        what,
        "retried after the delay the provider asked for; completed"
        if header
        else "retried after the retry policy's first interval (1 s); completed",
        {
            "asked": f"{expected:g} s" if header else "-",
            "retried after": f"{gap:.2f} s (server)",
            "scheduled to attempt 2": f"{from_history:.2f} s (history)",
        },
    )


# ---- retryable faults: recover, record each step once ---------------------------------

RETRYABLE = {
    "529 overloaded": {"status": 529, "message": "Overloaded"},
    "500 internal error": {"status": 500, "message": "Internal server error"},
    "503 unavailable": {"status": 503, "message": "Service unavailable"},
    "connection closed before any answer": {"drop": True},
    "connection reset mid-response": {"drop_mid": True, "text": "half of an answer that never ends"},
    "stream cut before message_stop": {"cut_stream": True, "text": "a partial answer"},
    "malformed JSON in the stream": {"malformed": True, "text": "x"},
    "unknown content block type, then a cut": {
        "cut_stream": True,
        "content": [{"type": "text", "text": "partial"}, {"type": "mystery", "x": 1}],
    },
}


@pytest.mark.parametrize("name", list(RETRYABLE), ids=lambda n: re.sub(r"\W+", "-", n).strip("-"))
async def test_retryable_fault_recovers_and_records_each_step_once(harness: Harness, name: str):
    # The fault hits step 2, after a tool with a side effect ran in step 1.
    note = tool_use("save_note", {"title": "t", "text": "once"}, id="n1")
    handle = await harness.start([note, RETRYABLE[name], answer("done")])
    result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "completed" and result.answer == "done", result
    assert result.steps == 2
    requests = harness.requests(handle.id)
    assert [r["step"] for r in requests] == ["1", "2", "2"]
    history = await assert_recorded_once(handle, 2)
    assert [t.attempt for t in history.trace] == [1, 2]
    assert all("partial" not in m.model_dump_json() for m in history.messages)
    effects = [e for e in read_effects() if e["session_id"] == handle.id]
    assert len(effects) == 1  # the tool of step 1 did not run again
    # The model saw one tool result, not two.
    results = [
        b for m in requests[2]["body"]["messages"] for b in m["content"] if b.get("type") == "tool_result"
    ]
    assert len(results) == 1
    models = await model_activities(handle)
    assert [(m.attempt, m.closed) for m in models] == [(1, "completed"), (2, "completed")]
    [gap] = gaps(requests[1:])
    record(
        AREA,
        name,
        "retried by Temporal; completed, one assistant message per step, the earlier tool not re-run",
        {"retried after": f"{gap:.2f} s"},
    )


async def test_non_streaming_malformed_json_is_retried(harness: Harness):
    handle = await harness.start([{"malformed": True, "text": "x"}, answer("done")], stream=False)
    result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "completed" and result.steps == 1
    assert len(harness.requests(handle.id)) == 2
    await assert_recorded_once(handle, 1)
    record(AREA, "malformed JSON body (non-streaming call)", "retried; completed", {})


async def test_response_slower_than_the_activity_timeout_is_retried(harness: Harness):
    # Headers and message_start arrive, then nothing: the heartbeat goes on (it runs beside
    # the call), so the start-to-close timeout of the attempt is what bounds it.
    handle = await harness.start(
        [{"stall": 8, "text": "too late"}, answer("on time")], limits={"model_timeout_seconds": 2}
    )
    result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "completed" and result.answer == "on time"
    requests = harness.requests(handle.id)
    assert len(requests) == 2
    retried_after = requests[1]["at"] - requests[0]["at"]
    assert 2.0 <= retried_after < 5, retried_after  # 2 s timeout + 1 s backoff
    history = await assert_recorded_once(handle, 1)
    assert "too late" not in history.model_dump_json()
    started = [
        e.activity_task_started_event_attributes
        async for e in handle.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    assert started[0].attempt == 2
    failure = started[0].last_failure
    assert failure.timeout_failure_info.timeout_type == TimeoutType.TIMEOUT_TYPE_START_TO_CLOSE, failure
    record(
        AREA,
        "response stalls longer than the attempt's timeout (`model_timeout_seconds=2`)",
        "the attempt times out (start-to-close), is retried; completed; the late answer is discarded",
        {"second request after": f"{retried_after:.2f} s"},
    )


async def test_retries_exhausted_fail_the_session_with_the_reason(harness: Harness):
    handle = await harness.start([answer("never")], limits={"model_attempts": 3})
    harness.fake_model.script.set_fault(handle.id, {"status": 503, "message": "Service unavailable"})
    result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "failed"
    assert result.error == "model 503: Service unavailable (retries exhausted)"
    assert len(harness.requests(handle.id)) == 3
    [model] = await model_activities(handle)
    assert (model.attempt, model.closed) == (3, "failed")
    record(
        AREA,
        "503 on every attempt (a per-session fault), `model_attempts=3`",
        "failed after 3 attempts; `error` says why and that retries ran out",
        {"attempts": 3},
    )


# ---- terminal faults: fail at once with the provider's message ------------------------

TERMINAL = {
    400: "messages.1.content.0: unexpected `tool_use_id` found in `tool_result` blocks",
    401: "invalid x-api-key",
    403: "Your API key does not have permission to use the specified resource.",
    404: "model: claude-nonexistent-9",
}


@pytest.mark.parametrize("status", list(TERMINAL))
async def test_terminal_fault_fails_on_the_first_attempt(harness: Harness, status: int):
    handle = await harness.start(
        [tool_use("get_time", id="t1"), {"status": status, "message": TERMINAL[status]}]
    )
    result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "failed"
    assert result.error == f"model {status}: {TERMINAL[status]}"
    assert len(harness.requests(handle.id)) == 2
    models = await model_activities(handle)
    assert [(m.attempt, m.closed) for m in models] == [(1, "completed"), (1, "failed")]
    history = await assert_recorded_once(handle, 1)  # step 1 kept, nothing half-recorded
    assert history.tool_calls[0].status == "done"
    snapshot = await handle.query("status", result_type=SessionStatus)
    assert snapshot.error == result.error
    record(
        AREA,
        f"{status} with the provider's error body",
        "failed on the first attempt, not retried; `error` is the provider's message; earlier steps kept",
        {"attempts": 1},
    )


async def test_unknown_content_block_is_kept_and_the_session_completes(harness: Harness):
    blocks = [{"type": "server_widget", "payload": {"n": 1}}, {"type": "text", "text": "the answer"}]
    handle = await harness.start([{"content": blocks}])
    result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "completed" and result.answer == "the answer"
    history = await assert_recorded_once(handle, 1)
    kept = history.messages[1].model_dump(mode="json")["content"][0]
    assert kept["type"] == "server_widget" and kept["payload"] == {"n": 1}
    record(AREA, "a content block of an unknown type", "kept as sent, ignored by the loop; completed", {})
