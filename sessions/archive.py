"""A long session's whole story: the parts its runs handed to the store, joined with the
running run's state.

At each continue-as-new a session keeps in its state only what its loop needs and puts
the older messages, the finished tool calls and the earlier trace turns in the transcript
store (workflows/archive.py). The `history` query answers with the running run's part and
names the newest stored part (`archive_ref`); this module reads the parts (each names the
one before it) and joins them, for `history`, the API and fork. The process must read the
workers' store: the same data directory (`AGENT_DATA_DIR`) or `AGENT_STORE_URL`, and the
payload keys if they are set.
"""

from __future__ import annotations

import functools
from typing import Any

from activities.transcript import TranscriptMissing, TranscriptStore, open_store
from activities.wire import Message
from infra.errors import ConfigError
from workflows.contract import SessionHistory
from workflows.records import ToolCallRecord, TraceTurn
from workflows.state import SessionState


@functools.cache
def _store() -> TranscriptStore:
    return open_store()


async def _parts(session_id: str, ref: str, store: TranscriptStore | None) -> list[dict[str, Any]]:
    store = store or _store()
    try:
        return await store.load_archive(ref)
    except TranscriptMissing as err:
        raise ConfigError(
            f"session {session_id}: the earlier runs' records are not readable here ({err}); this "
            "process must share the workers' store (AGENT_DATA_DIR or AGENT_STORE_URL, AGENT_PAYLOAD_KEYS)"
        ) from None


def _joined(
    parts: list[dict[str, Any]],
    messages: list[Message],
    calls: list[ToolCallRecord],
    trace: list[TraceTurn],
) -> tuple[list[Message], dict[str, ToolCallRecord], list[TraceTurn]]:
    all_messages = messages[:1]
    all_calls: dict[str, ToolCallRecord] = {}
    all_trace: list[TraceTurn] = []
    for part in parts:
        all_messages.extend(Message.model_validate(m) for m in part.get("messages", []))
        for c in part.get("calls", []):
            call = ToolCallRecord.model_validate(c)
            all_calls[call.tool_use_id] = call
        all_trace.extend(TraceTurn.model_validate(t) for t in part.get("trace", []))
    all_messages.extend(messages[1:])
    for call in calls:
        all_calls[call.tool_use_id] = call  # the running run's record is the newer one
    all_trace.extend(trace)
    return all_messages, all_calls, all_trace


async def whole_history(found: SessionHistory, store: TranscriptStore | None = None) -> SessionHistory:
    """The history with every earlier run's messages, calls and trace turns in their place."""
    if found.archive_ref is None:
        return found
    parts = await _parts(found.session_id, found.archive_ref, store)
    messages, calls, trace = _joined(parts, found.messages, found.tool_calls, found.trace)
    calls_in_order = sorted(calls.values(), key=lambda c: c.step)  # stable: the model's order in a step
    return found.model_copy(
        update={"messages": messages, "tool_calls": calls_in_order, "trace": trace, "archive_ref": None}
    )


async def whole_state(
    session_id: str, state: SessionState, store: TranscriptStore | None = None
) -> SessionState:
    """The state as if the session had carried everything (what a fork cuts back)."""
    if state.archive_ref is None:
        return state
    parts = await _parts(session_id, state.archive_ref, store)
    messages, calls, trace = _joined(parts, state.messages, list(state.calls.values()), state.trace)
    return state.model_copy(
        update={
            "messages": messages, "calls": calls, "trace": trace, "archive_ref": None, "archived_messages": 0,
        }
    )  # fmt: skip
