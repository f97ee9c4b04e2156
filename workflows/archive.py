"""What a run hands to the next, and what it hands to the store instead.

Continue-as-new gives the next run the session's state. Carried whole, it would grow with
the session: every message, call record, trace turn and stream event since the start. At
each handover the state keeps only what the loop needs:

- the goal (the first message) and the recent messages: those the model saw at its last
  call, at most `CARRIED_MESSAGE_BYTES` of them as JSON, starting at a response (so a tool
  result keeps the call it answers), and always the last response and the messages not
  yet in the transcript store;
- the tool calls that have no result yet, and those of the last response and of the
  results not yet sent to the model;
- the last trace turn (the billable actions after it are counted on it);
- the latest `REPEATS_KEPT` repeat counts;
- the last events of the stream (`CARRIED_EVENTS`, at most `CARRIED_EVENT_BYTES`): a
  follower further behind is told where the rest is (service/sse.py, cli/watch.py).

The rest (the older messages, the finished calls, the earlier trace turns) goes to the
transcript store as one part (activities/transcript.py), written by the local activity
`archive_records` (its input is not recorded in history, and a step gains no activity:
it runs once per continue-as-new). Each part names the one before it and the state names
the newest (`archive_ref`); `history`, fork and the API join the parts with the running
run's state (sessions/archive.py). When the write fails, the run hands over everything,
as before, and the next handover tries again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from temporalio.contrib.workflow_streams import WorkflowStreamState

    from activities.model import ModelActivities
    from activities.wire import ArchivePart, Message, ToolResultBlock
    from workflows import options
    from workflows.session import Session
    from workflows.state import SETTLED, SessionState
    from workflows.temporal import Failed

CARRIED_MESSAGE_BYTES = 48 * 1024
CARRIED_EVENTS = 200
CARRIED_EVENT_BYTES = 48 * 1024
REPEATS_KEPT = 256


@dataclass(frozen=True)
class Cut:
    """What one handover archives: `state.messages[1:messages]`, the calls named, the
    trace turns before `trace`."""

    messages: int
    calls: frozenset[str]
    trace: int

    def empty(self) -> bool:
        return self.messages <= 1 and not self.calls and self.trace == 0


def plan(state: SessionState) -> Cut:
    """What the next run does not need (see the module's docstring)."""
    messages = state.messages
    last = len(messages) - 1
    # Always carried: the last response (its calls may be unanswered) and the unsent messages.
    latest = min(last, len(messages) - len(state.unsent))
    replies = [i for i in range(1, latest + 1) if messages[i].role == "assistant"]
    if not replies:
        cut = 1
    else:
        # The shortest tail within the byte budget, and no more than the model last saw.
        size, start = 0, len(messages)
        while start > 1 and size + _size(messages[start - 1]) <= CARRIED_MESSAGE_BYTES:
            start -= 1
            size += _size(messages[start])
        if state.trace:
            start = max(start, 1 + state.trace[-1].context_dropped - state.archived_messages)
        cut = next((i for i in replies if i >= start), replies[-1])
    kept_ids: set[str] = set()
    if messages[last].role == "assistant":
        kept_ids.update(u.id for u in messages[last].tool_uses())
    for message in state.unsent:
        kept_ids.update(b.tool_use_id for b in message.content if isinstance(b, ToolResultBlock))
    calls = frozenset(id for id, call in state.calls.items() if call.status in SETTLED and id not in kept_ids)
    return Cut(messages=cut, calls=calls, trace=max(0, len(state.trace) - 1))


def _size(message: Message) -> int:
    return len(json.dumps(message.model_dump(mode="json", exclude_none=True), ensure_ascii=False))


async def hand_over(session: Session) -> None:
    """Archive what the next run does not need, then leave it out of the state."""
    state = session.state
    cut = plan(state)
    trim_repeats(state)
    if cut.empty():
        return
    part = ArchivePart(
        session_id=session.id,
        parent=state.archive_ref,
        messages=state.messages[1 : cut.messages],
        calls=[state.calls[id].model_dump(mode="json") for id in state.calls if id in cut.calls],
        trace=[t.model_dump(mode="json") for t in state.trace[: cut.trace]],
    )
    try:
        receipt = await session.temporal.local_activity(
            ModelActivities.archive_records, [part], options.archive(), summary="archive the run's records"
        )
    except Failed as err:
        workflow.logger.warning(
            "session %s hands over its whole state: %s", session.id, err.describe("archiving")
        )
        return
    state.archive_ref = receipt.ref
    state.archived_messages += len(part.messages)
    state.messages = [state.messages[0], *state.messages[cut.messages :]]
    state.calls = {id: call for id, call in state.calls.items() if id not in cut.calls}
    state.trace = state.trace[cut.trace :]


def trim_repeats(state: SessionState) -> None:
    """Keep the latest repeat counts (a key moves to the end each time it counts)."""
    if len(state.repeats) > REPEATS_KEPT:
        state.repeats = dict(list(state.repeats.items())[-REPEATS_KEPT:])


def trim_stream(stream: WorkflowStreamState) -> WorkflowStreamState:
    """The stream's last events; the offsets of those kept do not change."""
    size, keep = 0, 0
    for item in reversed(stream.log):
        if keep >= CARRIED_EVENTS or size + len(item.data) > CARRIED_EVENT_BYTES:
            break
        size += len(item.data)
        keep += 1
    dropped = len(stream.log) - keep
    if dropped <= 0:
        return stream
    return WorkflowStreamState(
        log=stream.log[dropped:], base_offset=stream.base_offset + dropped, publishers=stream.publishers
    )
