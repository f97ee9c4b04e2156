"""The records a session keeps of what happened: its run status, each tool call, each
model turn. They are part of its state and of what the queries return."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from activities.wire import ToolPolicy, Usage

RunStatus = Literal[
    "running",
    "paused",
    "waiting_approval",
    "waiting_input",
    "completed",
    "stopped",
    "failed",
    "cancelled",
]
# `unknown`: an at-most-once call was interrupted; it may have taken effect, and it is
# never run again.
CallStatus = Literal[
    "pending", "waiting_approval", "running", "done", "error", "denied", "cancelled", "not_run", "unknown"
]


class PendingApproval(BaseModel):
    tool_use_id: str
    name: str
    input: dict[str, Any]
    # The session the call belongs to: this one, or one of its sub-agents.
    session_id: str | None = None


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
    # Why the call did or did not wait for a person: `required` (the tool's rule or the
    # agent's "always") or `auto` (no rule, or the agent's "never").
    approval: Literal["required", "auto"] | None = None
    # A sub-agent call: the child session that ran it.
    child_session_id: str | None = None
    output_ref: str | None = None  # the output's hash in the transcript store

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


class TraceTurn(BaseModel):
    step: int
    model: str
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
