"""The events a session publishes on its stream, defined once.

Every consumer reads them through `SessionEvent`: the terminal view, `watch --json`, the
HTTP service's Server-Sent Events. The workflow publishes them on the `event` topic.
`TextDelta` (streamed text, tagged with step and attempt) is not in the stream: the worker
running the model call serves it live (activities/live_server.py), and followers show it under the
`delta` topic with no offset (sessions/live_text.py), and so is `ThinkingDelta` (the
model's thinking as it streams, type `thinking_delta`: never answer text); histories of older workers have deltas
on the stream's `delta` topic. Readers ignore fields they do not know, so an older reader
can follow a session run by a newer worker.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from activities.wire import TextDelta, ThinkingDelta, Usage

EVENT_TOPIC = "event"
DELTA_TOPIC = "delta"
TOPICS = [EVENT_TOPIC, DELTA_TOPIC]


class WorkflowEvent(BaseModel):
    """What every event the workflow publishes has (`TextDelta` comes from the model's worker)."""

    model_config = ConfigDict(extra="ignore")
    at: datetime | None = None


class StatusChanged(WorkflowEvent):
    """The run status changed (running, paused, waiting_approval, waiting_input, ...)."""

    type: Literal["status"] = "status"
    status: str


class TurnRecorded(WorkflowEvent):
    """A model response was recorded: its text, why it stopped, the running totals."""

    type: Literal["turn"] = "turn"
    step: int
    text: str = ""
    stop_reason: str | None = None
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float | None = None
    attempt: int = 1


class _CallEvent(WorkflowEvent):
    tool_use_id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class ToolCallStarted(_CallEvent):
    type: Literal["tool_call"] = "tool_call"


class ToolCallEnded(WorkflowEvent):
    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    name: str
    status: str
    output: str | None = None
    duration_ms: int | None = None


class ApprovalRequested(_CallEvent):
    type: Literal["approval"] = "approval"
    # Why it waits when no rule asked for a person: it repeats (the loop policy's `ask`).
    reason: str | None = None


class DecisionRecorded(WorkflowEvent):
    type: Literal["decision"] = "decision"
    tool_use_id: str
    name: str
    approved: bool
    reason: str | None = None
    # Set when a person approved with an edited input: what the tool runs with.
    input: dict[str, Any] | None = None
    decided_by: str | None = None
    on_behalf_of: str | None = None


class Sleeping(WorkflowEvent):
    """A `sleep` call started: the session sleeps until `until`."""

    type: Literal["sleeping"] = "sleeping"
    until: datetime
    reason: str = ""


class WaitingEvent(WorkflowEvent):
    """A `wait_for_event` call started: the session waits for the event `name` until `until`."""

    type: Literal["waiting_event"] = "waiting_event"
    name: str
    until: datetime


class EventReceived(WorkflowEvent):
    """A `wait_for_event` call took the event `name`."""

    type: Literal["event_received"] = "event_received"
    name: str


class LimitWait(WorkflowEvent):
    """A session with on_limit "ask" reached a limit and waits for a person (`waiting_budget`)."""

    type: Literal["limit_reached"] = "limit_reached"
    name: str
    limit: float
    used: float
    deadline: datetime | None = None


class LimitRaised(WorkflowEvent):
    """A person set a new limit (`raise_limit`): the session goes on if it waited at it."""

    type: Literal["limit_raised"] = "limit_raised"
    name: str
    value: float
    decided_by: str | None = None


class Answered(WorkflowEvent):
    """A chat session answered and waits for the next message."""

    type: Literal["answered"] = "answered"
    status: str
    stop_reason: str | None = None
    answer: str | None = None


class UserMessageTaken(WorkflowEvent):
    type: Literal["user_message"] = "user_message"
    turn: int
    text: str


class MessageDelivered(WorkflowEvent):
    """A person's message (`send_message`, id `id`) went to the model, in the call of `step`."""

    type: Literal["message_delivered"] = "message_delivered"
    id: int
    step: int


class ContinuedAsNew(WorkflowEvent):
    type: Literal["continued"] = "continued"
    run: int
    steps: int


class SessionEnded(WorkflowEvent):
    type: Literal["end"] = "end"
    status: str
    stop_reason: str | None = None
    error: str | None = None
    answer: str | None = None


SessionEvent = Annotated[
    StatusChanged
    | TurnRecorded
    | ToolCallStarted
    | ToolCallEnded
    | ApprovalRequested
    | DecisionRecorded
    | Sleeping
    | WaitingEvent
    | EventReceived
    | LimitWait
    | LimitRaised
    | Answered
    | UserMessageTaken
    | MessageDelivered
    | ContinuedAsNew
    | SessionEnded
    | TextDelta
    | ThinkingDelta,
    Field(discriminator="type"),
]
EVENTS: TypeAdapter[SessionEvent] = TypeAdapter(SessionEvent)


def read_event(topic: str, data: Any) -> SessionEvent:
    """One stream item as its typed event (deltas of older workers carry no `type`)."""
    if topic == DELTA_TOPIC and isinstance(data, dict) and "type" not in data:
        data = {**cast("dict[str, Any]", data), "type": "delta"}
    return EVENTS.validate_python(data)
