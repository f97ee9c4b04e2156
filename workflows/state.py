"""`SessionState`: everything a session knows, in one object.

The workflow holds it as it is, the loop, the tool calls and the control actions act on
it, and continue-as-new hands it to the next run as it is. Adding a field is one edit
here. The methods are the state's own rules (what its run status is, which calls are
unanswered); nothing in this module does I/O or issues a Temporal command.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from pydantic import BaseModel, Field, field_validator, model_validator
from temporalio.contrib.workflow_streams import WorkflowStreamState

from activities.wire import ContentBlock, Message, TextBlock, ToolResultBlock, ToolSpec, ToolUseBlock, Usage
from workflows.records import (
    SLEEP,
    WAIT_FOR_EVENT,
    ChildSpend,
    LimitReached,
    Notifications,
    OutputStreak,
    PendingApproval,
    PendingMessage,
    ReceivedEvent,
    RunStatus,
    ToolCallRecord,
    TraceTurn,
)

# Events kept for a later `wait_for_event`, at most: one more is refused.
MAX_UNDELIVERED_EVENTS = 100
# ... and the characters of their data as JSON, together: what a run hands to the next stays small.
MAX_UNDELIVERED_DATA = 64_000
# Tool call statuses after which a call has its result.
SETTLED = ("done", "error", "denied", "cancelled", "not_run", "unknown")


class Ending(BaseModel):
    """How the session ended."""

    status: RunStatus
    stop_reason: str | None = None
    error: str | None = None


class SessionState(BaseModel):
    started_at: datetime
    runs: int = 0  # the run that holds the state (the next run counts one more)
    messages: list[Message]
    unsent: list[Message] = Field(default_factory=list)  # not yet in the transcript store
    transcript_ref: str | None = None
    specs: list[ToolSpec] = Field(default_factory=list)
    calls: dict[str, ToolCallRecord] = Field(default_factory=dict)
    trace: list[TraceTurn] = Field(default_factory=list)
    repeats: dict[str, int] = Field(default_factory=dict)
    # Under a loop policy: each tool's latest run of calls that returned the same output.
    output_streaks: dict[str, OutputStreak] = Field(default_factory=dict)
    steps: int = 0
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float | None = None
    paused: bool = False
    idle: bool = False  # a chat between runs, waiting for input
    closing: bool = False
    # Messages sent and not yet given to the model, oldest first (workflows/messages.py).
    pending: list[PendingMessage] = Field(default_factory=list)
    # The id of the latest message sent (None: as sessions before it counted, from the turns).
    last_message_id: int | None = None
    # The next model call carries a steer: it is not a run's first (tool_choice is not applied).
    steered: bool = False
    user_turns: int = 1
    answer: str | None = None
    run_started_at: datetime | None = None
    stream_state: WorkflowStreamState | None = None
    cancel_requested: str | None = None
    ending: Ending | None = None
    updated_at: datetime | None = None
    transcript_resends: int = 0  # whole-transcript resends over the session
    subagent_runs: int = 0  # numbers the child sessions: PARENT.sub-1, PARENT.sub-2, ...
    # What each running child session waits for, as it last told this one.
    child_approvals: dict[str, list[PendingApproval]] = Field(default_factory=dict)
    # The running child sessions that said they wait and do not work (`working`).
    child_waits: list[str] = Field(default_factory=list)
    # Temporal Cloud's billable actions the session caused (workflows/metering.py), and
    # those not yet in a trace turn (before the first, and during a model call).
    temporal_actions: int = 0
    unattributed_actions: int = 0
    # What each running child session has spent so far, as it last told this one.
    child_spend: dict[str, ChildSpend] = Field(default_factory=dict)
    # Budgets that ask (workflows/budgets.py): the limits a person raised (by name:
    # max_steps, token_budget, cost_budget), the limit the session waits at, and a decline.
    raised_limits: dict[str, float] = Field(default_factory=dict)
    limit_reached: LimitReached | None = None
    limit_declined: str | None = None
    # The user's memories put in the system prompt at start (an agent's `memory_prompt`):
    # recorded, so a replay or a fork sees the same ones; None: none were asked for.
    memory_note: str | None = None
    # Typed answers (workflows/typed_output.py): the accepted answer, and the invalid ones so far.
    output: Any = None
    has_output: bool = False
    invalid_answers: int = 0
    # Notifications sent (they are numbered SESSION.notify-1, -2, ...) and their outcomes.
    notifications_sent: int = 0
    notifications: Notifications = Field(default_factory=Notifications)
    # The model of the latest call when it was a fallback model (None: the session's
    # `model`); the next call in the same tool loop starts with it (workflows/model_calls.py).
    model_in_use: str | None = None
    # Working time (workflows/working_time.py): the seconds worked before the current
    # stretch of work, since when it runs (None: nothing works now), and the seconds the
    # current run had worked when it started (a chat's limit counts each run's).
    worked_seconds: float = 0.0
    working_since: datetime | None = None
    run_worked_from: float = 0.0
    # Events that arrived before a wait for them, oldest first (`MAX_UNDELIVERED_EVENTS`).
    undelivered_events: list[ReceivedEvent] = Field(default_factory=list)
    # What earlier runs handed to the store instead of to the next run (workflows/archive.py):
    # the newest archived part (each names the one before it), and how many messages it holds.
    archive_ref: str | None = None
    archived_messages: int = 0

    @model_validator(mode="before")
    @classmethod
    def _queue_is_pending(cls, value: Any) -> Any:
        # Runs before `pending` queued a chat's messages as plain texts in `queue`.
        if not isinstance(value, dict):
            return value
        fields = dict(cast("dict[str, Any]", value))
        if "queue" not in fields:
            return fields
        queue = cast("list[str]", fields.pop("queue") or [])
        if queue and not fields.get("pending"):
            turns = int(fields.get("user_turns", 1))
            fields["pending"] = [
                {"id": turns + i + 1, "mode": "queue", "text": t} for i, t in enumerate(queue)
            ]
        return fields

    @field_validator("calls", mode="before")
    @classmethod
    def _calls_by_id(cls, value: Any) -> Any:
        # Runs before this object existed carried the calls as a list.
        if not isinstance(value, list):
            return value
        return {_call_id(c): c for c in cast("list[Any]", value)}

    @classmethod
    def new(
        cls, goal: str, now: datetime, priced: bool, attachments: list[ContentBlock] | None = None
    ) -> SessionState:
        # Attachments first, as the Messages API suggests: the model reads them, then the goal.
        first = Message(role="user", content=[*(attachments or []), TextBlock(text=goal)])
        return cls(
            started_at=now, messages=[first], unsent=[first], cost_usd=0.0 if priced else None,
            run_started_at=now, updated_at=now,
        )  # fmt: skip

    # ---- derived -------------------------------------------------------------------------

    def run_status(self) -> RunStatus:
        if self.ending is not None:
            return self.ending.status
        if self.paused:
            return "paused"
        if self.limit_reached is not None:
            return "waiting_budget"
        if self.waiting() or any(self.child_approvals.values()):
            return "waiting_approval"
        if self.in_waits(WAIT_FOR_EVENT):
            return "waiting_event"
        if self.in_waits(SLEEP):
            return "sleeping"
        if self.idle:
            return "waiting_input"
        return "running"

    def waiting(self) -> list[ToolCallRecord]:
        return [c for c in self.calls.values() if c.status == "waiting_approval"]

    def in_waits(self, tool: str) -> list[ToolCallRecord]:
        """The calls of `tool` (`sleep`, `wait_for_event`) waiting now, the earliest end first."""
        waits = [c for c in self.calls.values() if c.in_wait(tool)]
        return sorted(waits, key=lambda c: c.deadline or self.started_at)

    def working(self) -> bool:
        """Whether the run works now: a tool or sub-agent runs, or nothing holds the loop.
        Waiting for a person, paused, idle and the durable waits are not work, nor is a
        sub-agent that waits in one of them."""
        if self.ending is not None or self.idle:
            return False
        waits = False
        for call in self.calls.values():
            if call.status != "running":
                continue
            if call.in_wait(SLEEP) or call.in_wait(WAIT_FOR_EVENT) or self._child_waits(call):
                waits = True
                continue
            return True
        return not waits and self.run_status() == "running"

    def _child_waits(self, call: ToolCallRecord) -> bool:
        """Whether the call's sub-agent said it waits: for a person, or in a wait that is not work."""
        child = call.child_session_id
        return child is not None and (bool(self.child_approvals.get(child)) or child in self.child_waits)

    def worked(self, now: datetime) -> float:
        """Seconds of work over the session, the stretch running now included."""
        running = (now - self.working_since).total_seconds() if self.working_since is not None else 0.0
        return self.worked_seconds + max(0.0, running)

    def pending_approvals(self, session_id: str) -> list[PendingApproval]:
        """This session's calls waiting for a person, then those of its sub-agents."""
        own = [
            PendingApproval(
                tool_use_id=c.tool_use_id, name=c.name, input=c.input, session_id=session_id,
                reason=c.repeat_reason,
            )
            for c in self.waiting()
        ]  # fmt: skip
        return own + [p for pending in self.child_approvals.values() for p in pending]

    def unanswered_uses(self) -> list[ToolUseBlock]:
        """The tool calls of the last response, if their results are not in yet."""
        last = self.messages[-1]
        return last.tool_uses() if last.role == "assistant" else []

    def next_call_starts_run(self) -> bool:
        """Whether the next model call is a run's first: it answers a person's message (the
        goal, a chat message), not tool results or a steer."""
        last = self.messages[-1]
        return (
            not self.steered and last.role == "user" and any(isinstance(b, TextBlock) for b in last.content)
        )

    def queued(self) -> list[PendingMessage]:
        return [m for m in self.pending if m.mode == "queue"]

    def for_this_run(self) -> list[PendingMessage]:
        """The messages for the model's next call in the current run: steers and interrupts."""
        return [m for m in self.pending if m.mode != "queue"]

    def interrupts(self) -> list[PendingMessage]:
        return [m for m in self.pending if m.mode == "interrupt"]

    def spec(self, name: str) -> ToolSpec | None:
        return next((s for s in self.specs if s.name == name), None)

    # ---- changes -------------------------------------------------------------------------

    def append(self, message: Message, *, sent: bool) -> None:
        self.messages.append(message)
        if not sent:
            self.unsent.append(message)

    def end(self, status: RunStatus, stop_reason: str | None, error: str | None) -> bool:
        """Record the end; calls still open get results that say why. False if it had ended."""
        if self.ending is not None:
            return False
        reason = stop_reason or error or status
        for call in self.calls.values():
            if call.status in ("pending", "waiting_approval"):
                call.status, call.is_error, call.output = "not_run", True, f"not run: {reason}"
            elif call.status == "running":
                call.status, call.is_error, call.output = "cancelled", True, f"cancelled: {reason}"
        self.ending = Ending(status=status, stop_reason=stop_reason, error=error)
        return True

    def close_unanswered(self) -> list[ToolResultBlock]:
        """Results for the last response's calls that will not run (a new message came first)."""
        results: list[ToolResultBlock] = []
        for use in self.unanswered_uses():
            call = self.calls[use.id]
            reason = call.output or "not run: the run ended before it"
            if call.status in ("pending", "waiting_approval"):
                call.status, call.is_error, call.output = "not_run", True, reason
            results.append(ToolResultBlock(tool_use_id=use.id, content=reason, is_error=True))
        return results


def _call_id(call: Any) -> str:
    """The id of a recorded call, as a dict or as a `ToolCallRecord`."""
    return cast("dict[str, Any]", call)["tool_use_id"] if isinstance(call, dict) else call.tool_use_id
