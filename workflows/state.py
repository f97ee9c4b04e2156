"""`SessionState`: everything a session knows, in one object.

The workflow holds it as it is, the loop, the tool calls and the control actions act on
it, and continue-as-new hands it to the next run as it is. Adding a field is one edit
here. The methods are the state's own rules (what its run status is, which calls are
unanswered); nothing in this module does I/O or issues a Temporal command.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from pydantic import BaseModel, Field, field_validator
from temporalio.contrib.workflow_streams import WorkflowStreamState

from activities.wire import Message, TextBlock, ToolResultBlock, ToolSpec, ToolUseBlock, Usage
from workflows.records import PendingApproval, RunStatus, ToolCallRecord, TraceTurn

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
    steps: int = 0
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float | None = None
    paused: bool = False
    idle: bool = False  # a chat between runs, waiting for input
    closing: bool = False
    queue: list[str] = Field(default_factory=list)
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
    # Temporal Cloud's billable actions the session caused (workflows/metering.py), and
    # those not yet in a trace turn (before the first, and during a model call).
    temporal_actions: int = 0
    unattributed_actions: int = 0
    # What earlier runs handed to the store instead of to the next run (workflows/archive.py):
    # the newest archived part (each names the one before it), and how many messages it holds.
    archive_ref: str | None = None
    archived_messages: int = 0

    @field_validator("calls", mode="before")
    @classmethod
    def _calls_by_id(cls, value: Any) -> Any:
        # Runs before this object existed carried the calls as a list.
        if not isinstance(value, list):
            return value
        return {_call_id(c): c for c in cast("list[Any]", value)}

    @classmethod
    def new(cls, goal: str, now: datetime, priced: bool) -> SessionState:
        first = Message(role="user", content=[TextBlock(text=goal)])
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
        if self.waiting() or any(self.child_approvals.values()):
            return "waiting_approval"
        if self.idle:
            return "waiting_input"
        return "running"

    def waiting(self) -> list[ToolCallRecord]:
        return [c for c in self.calls.values() if c.status == "waiting_approval"]

    def pending_approvals(self, session_id: str) -> list[PendingApproval]:
        """This session's calls waiting for a person, then those of its sub-agents."""
        own = [
            PendingApproval(tool_use_id=c.tool_use_id, name=c.name, input=c.input, session_id=session_id)
            for c in self.waiting()
        ]
        return own + [p for pending in self.child_approvals.values() for p in pending]

    def unanswered_uses(self) -> list[ToolUseBlock]:
        """The tool calls of the last response, if their results are not in yet."""
        last = self.messages[-1]
        return last.tool_uses() if last.role == "assistant" else []

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
