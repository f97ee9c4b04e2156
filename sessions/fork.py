"""Forking a session: a new session that starts from another's state after one of its steps.

The fork is a copy of the source's whole state, cut back to step N: the conversation up
to step N's response and the results of its tool calls (where they ran), the tool call
records, the trace and the usage so far, and optionally one more user message. What the
source knows beyond its steps (the tool specs it recorded at start, say) carries over as
it is; what belongs to a run (pause, queue, how it ended) starts afresh. The fork runs
with the source's settings (model, prompt, agent, limits), which the caller may change.
The source is only read. Calls of step N that had no result run again in the fork (and
wait for approval again where their rule says so).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from activities.wire import ContentBlock, Message, TextBlock, ToolResultBlock, Usage
from infra.errors import BadRequest
from workflows.contract import ForkPoint, SessionInput
from workflows.records import Notifications, OutputStreak, ToolCallRecord
from workflows.state import SessionState

RERUN = ("pending", "waiting_approval", "running", "not_run", "cancelled")


def forked_input(
    source: SessionInput, session_id: str, state: SessionState, step: int, message: str | None
) -> SessionInput:
    """The start input of a fork of session `session_id`, whose state is `state`, after `step`."""
    return source.model_copy(
        update={
            "state": forked_state(session_id, state, step, message),
            "forked_from": ForkPoint(session_id=session_id, step=step),
            "parent": None,
        }
    )


def forked_state(session_id: str, state: SessionState, step: int, message: str | None) -> SessionState:
    if not 1 <= step <= len(state.trace):
        raise BadRequest(f"session {session_id} has steps 1 to {len(state.trace)}; there is no step {step}")
    messages = _messages_through(state.messages, step)
    kept_results = {
        b.tool_use_id
        for m in messages
        if m.role == "user"
        for b in m.content
        if isinstance(b, ToolResultBlock)
    }
    calls = {c.tool_use_id: _reset(c, kept_results) for c in state.calls.values() if c.step <= step}
    if any(c.step == step and c.status == "pending" for c in calls.values()):
        # Some of step N's calls run again: the loop gathers their results with the kept
        # ones (a settled call keeps its result), so the conversation ends at the response.
        if message:
            raise BadRequest(f"step {step} has tool calls without results; fork at it without --message")
        messages = _messages_through(state.messages, step, with_results=False)
    if message:
        messages = _with_message(messages, message)
    elif messages[-1].role == "assistant" and not messages[-1].tool_uses():
        raise BadRequest(f"step {step} is an answer; give --message to go on from it")
    trace = state.trace[:step]
    forked = state.model_copy(
        update={
            # the conversation and its records, as they were after step N
            "messages": messages, "unsent": list(messages), "transcript_ref": None,
            "calls": calls, "trace": trace, "steps": step,
            "repeats": _repeats(c for c in calls.values() if c.status != "pending"),
            "output_streaks": _output_streaks(c for c in calls.values() if c.status != "pending"),
            "usage": sum((t.usage for t in trace), Usage()),
            "cost_usd": sum(t.cost_usd or 0 for t in trace) if state.cost_usd is not None else None,
            "transcript_resends": sum(t.transcript_resends for t in trace),
            "user_turns": sum(1 for m in messages if m.role == "user" and m.text()),
            "answer": _last_answer(messages),
            # a new session's first run
            "runs": 0, "paused": False, "idle": False, "closing": False, "pending": [], "run_started_at": None,
            "last_message_id": None, "steered": False,
            "stream_state": None, "cancel_requested": None, "ending": None, "updated_at": None,
            "child_approvals": {}, "child_waits": [],
            # a typed answer is given afresh
            "output": None, "has_output": False, "invalid_answers": 0,
            "notifications_sent": 0, "notifications": Notifications(),
            # its steps start with the session's model, as a new run's do
            "model_in_use": None,
            "worked_seconds": 0.0, "working_since": None, "run_worked_from": 0.0,
            "undelivered_events": [],
            # the state is whole (sessions/archive.py): the fork's own runs archive it again
            "archive_ref": None, "archived_messages": 0,
        },
    )  # fmt: skip
    return forked.model_copy(deep=True)  # shares nothing with the source's state


def _messages_through(messages: list[Message], step: int, with_results: bool = True) -> list[Message]:
    """The conversation through step N's response, and the tool results that answer it."""
    replies = [i for i, m in enumerate(messages) if m.role == "assistant"]
    end = replies[step - 1]
    kept = messages[: end + 1]
    if with_results and end + 1 < len(messages) and messages[end].tool_uses():
        after = messages[end + 1]
        results: list[ContentBlock] = [b for b in after.content if isinstance(b, ToolResultBlock)]
        if results:
            kept.append(Message(role="user", content=results))
    return kept


def _reset(call: ToolCallRecord, kept_results: set[str]) -> ToolCallRecord:
    """A call of the fork: as it was, or pending again if its result is not kept."""
    if call.tool_use_id in kept_results and call.status not in RERUN:
        return call
    return ToolCallRecord(tool_use_id=call.tool_use_id, step=call.step, name=call.name, input=call.input)


def _with_message(messages: list[Message], text: str) -> list[Message]:
    last = messages[-1]
    if last.role == "user":  # tool results: the text goes in the same turn, after them
        return [*messages[:-1], Message(role="user", content=[*last.content, TextBlock(text=text)])]
    return [*messages, Message(role="user", content=[TextBlock(text=text)])]


def _last_answer(messages: list[Message]) -> str | None:
    texts = [m.text() for m in messages if m.role == "assistant" and m.text()]
    return texts[-1] if texts else None


def _repeats(calls: Iterable[ToolCallRecord]) -> dict[str, int]:
    """The repeat counts of the calls that keep their result (one that runs again counts
    itself when it starts)."""
    return dict(Counter(call.repeat_key() for call in calls))


def _output_streaks(calls: Iterable[ToolCallRecord]) -> dict[str, OutputStreak]:
    """Each tool's latest run of the same output, over the calls that keep their result, in
    the order they were made (a session under a loop policy records each output's digest)."""
    streaks: dict[str, OutputStreak] = {}
    for call in calls:
        if call.output_digest is None:
            continue
        streak = streaks.pop(call.name, None)
        if streak is None or streak.digest != call.output_digest:
            streak = OutputStreak(digest=call.output_digest)
        else:
            streak.count += 1
        streaks[call.name] = streak
    return streaks
