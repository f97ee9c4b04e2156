"""Wire types of the session workflow: its input, control payloads, snapshot and trace."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from activities.types import Message, ToolPolicy, Usage

RunStatus = Literal[
    "running", "paused", "waiting_approval", "completed", "stopped", "failed", "cancelled"
]
FINAL_STATUSES = ("completed", "stopped", "failed", "cancelled")
StopReason = Literal["max_steps", "token_budget", "timeout", "cost_budget", "max_tokens", "refusal"]
CallStatus = Literal[
    "pending", "waiting_approval", "running", "done", "error", "denied", "cancelled", "not_run"
]

DEFAULT_MODEL = "claude-sonnet-4-6"
DEFAULT_SYSTEM = "You are a careful assistant. Use the tools when they help, then answer briefly."


class ModelPrice(BaseModel):
    """USD per million tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_write: float = Field(ge=0)
    cache_read: float = Field(ge=0)

    def cost(self, usage: Usage) -> float:
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_creation_input_tokens * self.cache_write
            + usage.cache_read_input_tokens * self.cache_read
        ) / 1_000_000


class Limits(BaseModel):
    max_steps: int = Field(default=20, ge=1, le=10_000)
    token_budget: int = Field(default=1_000_000, ge=1)
    timeout_seconds: float = Field(default=3600, gt=0, le=30 * 24 * 3600)
    cost_budget_usd: float | None = Field(default=None, gt=0)
    max_tokens: int = Field(default=4096, ge=1, le=128_000)
    max_tool_output: int = Field(default=8000, ge=100, le=1_000_000)
    model_attempts: int = Field(default=6, ge=1, le=100)
    # Start-to-close timeout of one model call attempt; a stalled call is retried after it.
    model_timeout_seconds: float = Field(default=120, ge=1, le=3600)


class SessionInput(BaseModel):
    """Everything a session runs with. It is recorded in history: never put a secret here."""

    goal: str = Field(min_length=1, max_length=200_000)
    user_id: str = Field(default="anonymous", min_length=1, max_length=200)
    model: str = Field(default=DEFAULT_MODEL, min_length=1, max_length=200)
    system: str = Field(default=DEFAULT_SYSTEM, max_length=200_000)
    prompt_version: str = "v1"
    limits: Limits = Field(default_factory=Limits)
    price: ModelPrice | None = None
    tools: list[str] | None = None  # None: every tool the worker has
    stream: bool = True
    # Set by the client when the namespace has the Agent* search attributes registered.
    search_attributes: bool = False

    @field_validator("goal")
    @classmethod
    def _goal_not_blank(cls, goal: str) -> str:
        if not goal.strip():
            raise ValueError("the goal is empty")
        return goal


class PendingApproval(BaseModel):
    tool_use_id: str
    name: str
    input: dict[str, Any]


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


class SessionStatus(BaseModel):
    session_id: str
    status: RunStatus
    stop_reason: str | None = None
    steps: int = 0
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float | None = None
    pending_approvals: list[PendingApproval] = Field(default_factory=list)
    answer: str | None = None
    error: str | None = None
    model: str
    user_id: str
    limits: Limits
    started_at: datetime
    updated_at: datetime


class SessionHistory(BaseModel):
    session_id: str
    status: SessionStatus
    messages: list[Message]
    trace: list[TraceTurn]
    tool_calls: list[ToolCallRecord]


class Decision(BaseModel):
    tool_use_id: str = Field(min_length=1, max_length=200)
    reason: str | None = Field(default=None, max_length=2000)


class CancelRequest(BaseModel):
    reason: str | None = Field(default=None, max_length=2000)
