"""The records a session keeps of what happened: its run status, each tool call, each
model turn. They are part of its state and of what the queries return."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from activities.wire import Usage
from infra.policy import ToolPolicy

RunStatus = Literal[
    "running",
    "paused",
    "waiting_approval",
    "waiting_budget",
    "waiting_event",
    "sleeping",
    "waiting_input",
    "completed",
    "stopped",
    "failed",
    "cancelled",
]
# The durable waits every worker has, as tools a session may name (workflows/waits.py).
SLEEP = "sleep"
WAIT_FOR_EVENT = "wait_for_event"
WAIT_TOOLS = (SLEEP, WAIT_FOR_EVENT)
# `unknown`: an at-most-once call was interrupted; it may have taken effect, and it is
# never run again.
CallStatus = Literal[
    "pending", "waiting_approval", "running", "done", "error", "denied", "cancelled", "not_run", "unknown"
]
# How a person's message joins a working session (workflows/messages.py).
MessageMode = Literal["queue", "steer", "interrupt"]


class Notifications(BaseModel):
    """What became of the session's notifications (workflows/notify.py), counted by URL."""

    delivered: int = 0
    failed: int = 0  # abandoned: refused by the receiver, or retried until the schedule gave up
    # The notification workflows (SESSION.notify-N) whose outcome is not counted yet.
    pending: list[str] = Field(default_factory=list)


class PendingApproval(BaseModel):
    tool_use_id: str
    name: str
    input: dict[str, Any]
    # The session the call belongs to: this one, or one of its sub-agents.
    session_id: str | None = None
    # Why it waits when no rule asked for a person: the loop policy's `ask` (workflows/loops.py).
    reason: str | None = None


class LimitReached(BaseModel):
    """A limit the session reached under `on_limit = "ask"` (workflows/budgets.py): it waits
    for a person to raise it (`raise_limit`) or decline (`decline_limit`)."""

    name: Literal["max_steps", "token_budget", "cost_budget"]
    limit: float
    used: float
    at: datetime
    # Its approval timeout: past it, the session stops (None: it waits).
    deadline: datetime | None = None


class ChildSpend(BaseModel):
    """What a running sub-agent has spent so far, as it last told its parent."""

    usage: Usage = Field(default_factory=Usage)
    cost_usd: float | None = None


class PendingMessage(BaseModel):
    """A person's message the model has not had yet (`send_message`): `queue` waits for the
    run's answer and starts the next run (a chat's); `steer` goes to the model's next call in
    the current run, after the pending tool results; `interrupt` too, once the work in flight
    has been cut short."""

    id: int
    mode: MessageMode
    text: str
    sent_at: datetime | None = None  # None: queued by a session that kept no time


class Repeat(BaseModel):
    """A call the model repeats (workflows/loops.py): the same input `count` times over the
    session (`input`), or the same output `count` times in a row (`output`)."""

    name: str
    kind: Literal["input", "output"]
    count: int


class OutputStreak(BaseModel):
    """How many of a tool's latest calls in a row returned the same output (its digest)."""

    digest: str
    count: int = 1


class ReceivedEvent(BaseModel):
    """An event sent to the session (`send_event`, the `event` signal) that no wait has taken yet."""

    name: str
    data: Any = None
    at: datetime


class ToolCallRecord(BaseModel):
    tool_use_id: str
    step: int
    name: str
    input: dict[str, Any]
    policy: ToolPolicy | None = None
    requires_approval: bool = False
    status: CallStatus = "pending"
    output: str | None = None
    is_error: bool = False
    reason: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    duration_ms: int | None = None
    repeats: int = 1
    approved: bool = False
    # The input a person approved instead of the model's `input`: what the tool ran with.
    approved_input: dict[str, Any] | None = None
    decided_by: str | None = None
    on_behalf_of: str | None = None  # whom `decided_by` acted for (the command line's --as)
    # Why the call did or did not wait for a person: `required` (the tool's rule or the
    # agent's "always") or `auto` (no rule, or the agent's "never").
    approval: Literal["required", "auto"] | None = None
    # A sub-agent call: the child session that ran it.
    child_session_id: str | None = None
    output_ref: str | None = None  # the output's hash in the transcript store
    # The end of the wait the call is in, in wall time: its approval deadline while it waits
    # for a person, its wake time while `sleep` runs, its timeout while `wait_for_event` runs.
    # Kept absolute, so a continue-as-new or a worker crash never restarts the wait.
    deadline: datetime | None = None
    # Under a loop policy (workflows/loops.py): why the call is a repeat, and its output's digest.
    repeat_reason: str | None = None
    output_digest: str | None = None

    def in_wait(self, tool: str) -> bool:
        """Whether this is a durable wait (`sleep`, `wait_for_event`) that has started and not ended."""
        return self.name == tool and self.status == "running" and self.deadline is not None

    def run_input(self) -> dict[str, Any]:
        """The input the tool runs with: the approved edit, or the model's own."""
        return self.approved_input if self.approved_input is not None else self.input

    def repeat_key(self) -> str:
        """What makes two calls the same call (`SessionState.repeats` counts them): the tool
        and the hash of the model's input."""
        digest = hashlib.sha256(self.plain_repeat_key().encode()).hexdigest()[:32]
        return f"{self.name}:{digest}"

    def plain_repeat_key(self) -> str:
        """The key as sessions before `repeat_key` hashed the input counted it."""
        return f"{self.name}:{json.dumps(self.input, sort_keys=True, ensure_ascii=False)}"


class Fallback(BaseModel):
    """A model a step was not made with, and why: the step went on to the next model."""

    model: str
    reason: str


class TraceTurn(BaseModel):
    step: int
    model: str  # the model that answered, as its provider names it
    prompt_version: str
    started_at: datetime
    ended_at: datetime
    stop_reason: str | None
    text: str
    tool_use_ids: list[str] = Field(default_factory=list)
    usage: Usage
    cost_usd: float | None
    latency_ms: int
    attempt: int
    context_dropped: int = 0
    # 1 when this call found no transcript in the store and the whole conversation was
    # sent again (a worker on another host without the shared store, a lost store).
    transcript_resends: int = 0
    # Temporal Cloud's billable actions from this model call's start to the next one's:
    # the call, the tools it asked for, and the signals, updates and timers meanwhile.
    temporal_actions: int = 0
    # The models this step was tried with before the one that answered, in order.
    fallback: list[Fallback] = Field(default_factory=list)
