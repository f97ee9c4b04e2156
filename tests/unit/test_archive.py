"""What a handover keeps in the state and what it archives (workflows/archive.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from temporalio.contrib.workflow_streams import WorkflowStreamState
from temporalio.contrib.workflow_streams._types import _WorkflowStreamWireItem

from activities.wire import Message, TextBlock, ToolResultBlock, ToolUseBlock, Usage
from workflows import archive
from workflows.records import ToolCallRecord, TraceTurn
from workflows.state import SessionState

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def session(steps: int, output: int, *, waiting: bool = False) -> SessionState:
    """A state after `steps` tool calls, each answered with `output` characters; the last
    response's results not yet sent (as at a handover)."""
    state = SessionState.new("the goal", NOW, priced=False)
    state.unsent = []
    for i in range(steps):
        use = ToolUseBlock(id=f"c{i}", name="big_output", input={"i": i})
        state.append(Message(role="assistant", content=[TextBlock(text=f"step {i}"), use]), sent=True)
        last = i == steps - 1
        status = "waiting_approval" if waiting and last else "done"
        state.calls[use.id] = ToolCallRecord(
            tool_use_id=use.id,
            step=i + 1,
            name="big_output",
            input=use.input,
            status=status,
            output="x" * output,
        )
        state.trace.append(
            TraceTurn(step=i + 1, model="m", prompt_version="p", started_at=NOW, ended_at=NOW, stop_reason="tool_use",
                      text="", usage=Usage(), cost_usd=None, latency_ms=1, attempt=1)
        )  # fmt: skip
        if not (waiting and last):
            result = ToolResultBlock(tool_use_id=use.id, content="x" * output)
            state.append(Message(role="user", content=[result]), sent=last)
    state.unsent = [state.messages[-1]] if not waiting else []
    return state


def test_keeps_the_goal_and_a_bounded_tail_that_starts_at_a_response():
    state = session(100, 2000)
    cut = archive.plan(state)
    kept = state.messages[cut.messages :]
    assert state.messages[cut.messages].role == "assistant"
    assert sum(archive._size(m) for m in kept) <= archive.CARRIED_MESSAGE_BYTES
    assert len(kept) > 10  # as much as fits
    assert state.messages[-1] in kept and state.unsent[0] in kept
    # The last response's call stays; the earlier ones, finished, go; one trace turn stays.
    assert "c99" not in cut.calls and len(cut.calls) == 99
    assert cut.trace == 99


def test_no_more_than_the_model_last_saw():
    state = session(40, 100)
    state.trace[-1].context_dropped = 60  # the model saw the goal and messages 61 on
    cut = archive.plan(state)
    assert cut.messages >= 61 and state.messages[cut.messages].role == "assistant"


def test_a_call_waiting_for_approval_and_its_response_stay():
    state = session(50, 5000, waiting=True)
    cut = archive.plan(state)
    assert state.messages[-1].role == "assistant" and cut.messages <= len(state.messages) - 1
    assert "c49" not in cut.calls


def test_a_response_larger_than_the_budget_stays_whole():
    state = session(3, 100_000)
    cut = archive.plan(state)
    assert cut.messages == len(state.messages) - 2  # the last response and its results


def test_repeats_keep_the_latest():
    state = session(1, 10)
    state.repeats = {f"k{i}": 1 for i in range(1000)}
    archive.trim_repeats(state)
    assert list(state.repeats) == [f"k{i}" for i in range(1000 - archive.REPEATS_KEPT, 1000)]


def test_the_stream_keeps_its_last_events_at_their_offsets():
    log = [_WorkflowStreamWireItem(topic="event", data="e" * 100) for _ in range(1000)]
    trimmed = archive.trim_stream(WorkflowStreamState(log=log, base_offset=50))
    assert len(trimmed.log) == archive.CARRIED_EVENTS
    assert trimmed.base_offset + len(trimmed.log) == 50 + 1000
    big = [_WorkflowStreamWireItem(topic="event", data="e" * 10_000) for _ in range(100)]
    assert sum(len(i.data) for i in archive.trim_stream(WorkflowStreamState(log=big)).log) <= (
        archive.CARRIED_EVENT_BYTES
    )
