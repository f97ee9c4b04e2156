"""Wire types of the session workflow: its input, control payloads, snapshot and trace."""

from __future__ import annotations

import fnmatch
from datetime import datetime
from typing import Any, Literal, cast

from pydantic import BaseModel, Field, field_validator, model_validator

from activities.wire import Message, Usage
from infra.model_names import DEFAULT_MODEL
from workflows.records import CallStatus as CallStatus  # a wire type, re-exported
from workflows.records import PendingApproval, RunStatus, ToolCallRecord, TraceTurn
from workflows.state import SessionState

FINAL_STATUSES = ("completed", "stopped", "failed", "cancelled")
# Not a run status the workflow keeps: the entry points report a running session whose
# workflow task keeps failing (a bug, a non-deterministic change) as `stuck`.
STUCK = "stuck"
# The error type of an update refused because an edited tool input breaks the tool's schema.
INVALID_TOOL_INPUT = "InvalidToolInput"
SessionStopReason = Literal["max_steps", "token_budget", "timeout", "cost_budget", "max_tokens", "refusal"]
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
    context_tokens: int = Field(default=200_000, ge=1000, le=10_000_000)
    # Continue as new after this many model calls in one run (or when Temporal suggests it).
    continue_as_new_after_steps: int = Field(default=500, ge=1)
    # Start-to-close timeout of one model call attempt; a stalled call is retried after it.
    model_timeout_seconds: float = Field(default=120, ge=1, le=3600)


ApprovalRule = Literal["always", "never", "tool"]


class AgentSpec(BaseModel):
    """The agent a session runs, resolved from the definitions when it starts and recorded
    in its input: a later edit of the definitions never changes a running session. MCP
    servers are named only; their commands, URLs and environments stay with the worker."""

    name: str
    description: str = ""
    mcp_servers: list[str] = Field(default_factory=list)
    # Per tool name or glob ("files__*"): always wait for a person, never, or the tool's rule.
    approval: dict[str, ApprovalRule] = Field(default_factory=dict)
    subagents: list[SubAgent] = Field(default_factory=list)

    def approval_rule(self, tool: str) -> ApprovalRule:
        """The rule for `tool`: an exact key first, then the first glob that matches."""
        if tool in self.approval:
            return self.approval[tool]
        for key, rule in self.approval.items():
            if fnmatch.fnmatchcase(tool, key):
                return rule
        return "tool"


class SubAgent(BaseModel):
    """An agent this session may call as a tool (`agent__NAME`); it runs as a child session."""

    name: str
    description: str = ""
    model: str
    system: str
    limits: Limits
    price: ModelPrice | None = None
    tools: list[str] | None = None
    agent: AgentSpec


class ForkPoint(BaseModel):
    session_id: str
    step: int


class ParentLink(BaseModel):
    """A sub-agent's parent: the session and the tool call it answers."""

    session_id: str
    tool_use_id: str


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
    # A chat session waits for the next message after each answer, until closed or idle.
    chat: bool = False
    idle_timeout_seconds: float = Field(default=24 * 3600, gt=0, le=365 * 24 * 3600)
    # Summarise what is left out of the context window with one model call.
    summarize_dropped: bool = False
    # Set by the client when the namespace has the Agent* search attributes registered.
    search_attributes: bool = False
    # The agent definition it runs (None: the worker's tools, no agent).
    agent: AgentSpec | None = None
    parent: ParentLink | None = None
    forked_from: ForkPoint | None = None
    # The session's state: filled in by the session itself when it continues as new, or
    # by `fork` with the state of another session after one of its steps.
    state: SessionState | None = None

    @model_validator(mode="before")
    @classmethod
    def _state_was_carried(cls, value: Any) -> Any:
        # Runs recorded before `SessionState` handed their state over as `carried`.
        if not isinstance(value, dict):
            return value
        fields = cast("dict[str, Any]", value)
        if "carried" not in fields:
            return fields
        fields = dict(fields)
        carried = fields.pop("carried")
        if fields.get("state") is None:
            fields["state"] = carried
        return fields

    @field_validator("goal")
    @classmethod
    def _goal_not_blank(cls, goal: str) -> str:
        if not goal.strip():
            raise ValueError("the goal is empty")
        return goal


class UserMessage(BaseModel):
    text: str = Field(min_length=1, max_length=200_000)

    @field_validator("text")
    @classmethod
    def _not_blank(cls, text: str) -> str:
        if not text.strip():
            raise ValueError("the message is empty")
        return text


class StuckTask(BaseModel):
    """Why a running session makes no progress: its workflow task fails, over and over."""

    message: str
    since: datetime
    attempts: int


class SessionStatus(BaseModel):
    session_id: str
    status: RunStatus | Literal["stuck"]
    stop_reason: str | None = None
    steps: int = 0
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float | None = None
    pending_approvals: list[PendingApproval] = Field(default_factory=list)
    answer: str | None = None
    error: str | None = None
    chat: bool = False
    user_turns: int = 1
    queued_messages: int = 0
    runs: int = 1
    model: str
    user_id: str
    limits: Limits
    started_at: datetime
    updated_at: datetime
    transcript_resends: int = 0
    agent: str | None = None
    parent_session_id: str | None = None
    forked_from: ForkPoint | None = None
    stuck: StuckTask | None = None
    # Temporal Cloud's billable actions the session caused so far, its sub-agents' included
    # (workflows/metering.py); the query that reads this is one more.
    temporal_actions: int = 0


class SessionHistory(BaseModel):
    session_id: str
    status: SessionStatus
    messages: list[Message]
    trace: list[TraceTurn]
    tool_calls: list[ToolCallRecord]
    temporal_actions: int = 0  # as in the status
    # The running run's part only: the earlier parts are in the store from this one on
    # (workflows/archive.py). The readers (`sessions.archive.whole_history`) join them; None after.
    archive_ref: str | None = None


class Decision(BaseModel):
    """A person's decision on a tool call that waits for approval."""

    tool_use_id: str = Field(min_length=1, max_length=200)
    reason: str | None = Field(default=None, max_length=2000)
    # Approve with this input instead of the model's (checked against the tool's schema).
    input: dict[str, Any] | None = None
    # Who decided: the API user, or the CLI's --as; None for a bare signal.
    decided_by: str | None = Field(default=None, max_length=200)


class CancelRequest(BaseModel):
    reason: str | None = Field(default=None, max_length=2000)
    decided_by: str | None = Field(default=None, max_length=200)


AgentSpec.model_rebuild()
