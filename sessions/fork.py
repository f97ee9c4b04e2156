"""Forking a session: a new session that starts from another's state after one of its steps.

The fork gets the conversation up to step N's response and the results of its tool calls
(where they ran), the tool call records, the trace and the usage so far, and optionally
one more user message; it runs with the source's settings (model, prompt, agent, limits),
which the caller may change. The source is only read. Calls of step N that had no result
run again in the fork (and wait for approval again where their rule says so).
"""

from __future__ import annotations

import json
from typing import Any

from activities.wire import Message, TextBlock, ToolResultBlock, Usage
from infra.errors import BadRequest
from workflows.records import ToolCallRecord
from workflows.state import SessionState
from workflows.contract import ForkPoint, SessionHistory, SessionInput

RERUN = ("pending", "waiting_approval", "running", "not_run", "cancelled")


def forked_input(source: SessionInput, history: SessionHistory, step: int, message: str | None) -> SessionInput:
    """The start input of a fork of `history` after `step`."""
    state = forked_state(history, step, message)
    return source.model_copy(
        update={"state": state, "forked_from": ForkPoint(session_id=history.session_id, step=step), "parent": None}
    )


def forked_state(history: SessionHistory, step: int, message: str | None) -> SessionState:
    if not 1 <= step <= len(history.trace):
        raise BadRequest(f"session {history.session_id} has steps 1 to {len(history.trace)}; there is no step {step}")
    messages = _messages_through(history.messages, step)
    kept_results = {b.tool_use_id for m in messages if m.role == "user" for b in m.content if isinstance(b, ToolResultBlock)}
    calls = {c.tool_use_id: _reset(c, kept_results) for c in history.tool_calls if c.step <= step}
    if any(c.step == step and c.status == "pending" for c in calls.values()):
        # Some of step N's calls run again: the loop gathers their results with the kept
        # ones (a settled call keeps its result), so the conversation ends at the response.
        if message:
            raise BadRequest(f"step {step} has tool calls without results; fork at it without --message")
        messages = _messages_through(history.messages, step, with_results=False)
    if message:
        messages = _with_message(messages, message)
    elif messages[-1].role == "assistant" and not messages[-1].tool_uses():
        raise BadRequest(f"step {step} is an answer; give --message to go on from it")
    trace = history.trace[:step]
    usage = sum((t.usage for t in trace), Usage())
    costs = [t.cost_usd for t in trace]
    first = history.status.started_at
    return SessionState(
        started_at=first, messages=messages, unsent=list(messages), calls=calls, trace=list(trace),
        steps=step, usage=usage, cost_usd=sum(c or 0 for c in costs) if history.status.cost_usd is not None else None,
        user_turns=sum(1 for m in messages if m.role == "user" and m.text()), answer=_last_answer(messages),
        repeats=_repeats(calls.values()),
    )  # fmt: skip


def _messages_through(messages: list[Message], step: int, with_results: bool = True) -> list[Message]:
    """The conversation through step N's response, and the tool results that answer it."""
    replies = [i for i, m in enumerate(messages) if m.role == "assistant"]
    end = replies[step - 1]
    kept = [m.model_copy(deep=True) for m in messages[: end + 1]]
    if with_results and end + 1 < len(messages) and messages[end].tool_uses():
        after = messages[end + 1]
        results = [b for b in after.content if isinstance(b, ToolResultBlock)]
        if results:
            kept.append(Message(role="user", content=results))
    return kept


def _reset(call: ToolCallRecord, kept_results: set[str]) -> ToolCallRecord:
    """A call of the fork: as it was, or pending again if its result is not kept."""
    if call.tool_use_id in kept_results and call.status not in RERUN:
        return call.model_copy(deep=True)
    return ToolCallRecord(tool_use_id=call.tool_use_id, step=call.step, name=call.name, input=call.input)


def _with_message(messages: list[Message], text: str) -> list[Message]:
    last = messages[-1]
    if last.role == "user":  # tool results: the text goes in the same turn, after them
        return [*messages[:-1], Message(role="user", content=[*last.content, TextBlock(text=text)])]
    return [*messages, Message(role="user", content=[TextBlock(text=text)])]


def _last_answer(messages: list[Message]) -> str | None:
    texts = [m.text() for m in messages if m.role == "assistant" and m.text()]
    return texts[-1] if texts else None


def _repeats(calls: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for call in calls:
        key = f"{call.name}:{json.dumps(call.input, sort_keys=True, ensure_ascii=False)}"
        counts[key] = counts.get(key, 0) + 1
    return counts
