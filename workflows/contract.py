"""Wire types of the session workflow: its input, control payloads, snapshot and trace."""

from __future__ import annotations

import fnmatch
import json
from datetime import datetime
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from activities.memory import scope_id
from activities.wire import ContentBlock, DocumentBlock, ImageBlock, Message, StoredSource, Usage
from activities.wire import ModelSettings as ModelSettings  # a wire type, re-exported
from infra.model_names import DEFAULT_MODEL
from workflows.records import CallStatus as CallStatus  # a wire type, re-exported
from workflows.records import Fallback as Fallback  # a wire type, re-exported
from workflows.records import (
    LimitReached,
    Notifications,
    PendingApproval,
    Repeat,
    RunStatus,
    ToolCallRecord,
    TraceTurn,
)
from workflows.records import MessageMode as MessageMode  # a wire type, re-exported
from workflows.state import SessionState

FINAL_STATUSES = ("completed", "stopped", "failed", "cancelled")
# Not a run status the workflow keeps: the entry points report a running session whose
# workflow task keeps failing (a bug, a non-deterministic change) as `stuck`.
STUCK = "stuck"
# The error type of an update refused because an edited tool input breaks the tool's schema.
INVALID_TOOL_INPUT = "InvalidToolInput"
# The `decided_by` of a call denied because no one decided before its approval deadline:
# the session's own, which no caller may record (workflows/actions.py `check_decider`).
TIMED_OUT = "timeout"
SessionStopReason = Literal[
    "max_steps", "token_budget", "timeout", "cost_budget", "max_tokens", "refusal", "loop"
]
MAX_FALLBACK_MODELS = 5
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
    # A call that waits for approval this long (wall time) is denied; None: it waits on.
    approval_timeout_seconds: float | None = Field(default=None, gt=0, le=365 * 24 * 3600)

    def raised(self, raised: dict[str, float]) -> Limits:
        """These limits with the ones a person raised (`SessionState.raised_limits`)."""
        if not raised:
            return self
        update = {
            LIMIT_FIELDS[name]: value if name == "cost_budget" else int(value)
            for name, value in raised.items()
        }
        return self.model_copy(update=update)


# The limits `on_limit = "ask"` waits at, by their names in `raise_limit`, and their `Limits` fields.
LimitName = Literal["max_steps", "token_budget", "cost_budget"]
LIMIT_FIELDS: dict[str, str] = {
    "max_steps": "max_steps",
    "token_budget": "token_budget",
    "cost_budget": "cost_budget_usd",
}


ApprovalRule = Literal["always", "never", "tool"]


class LoopPolicy(BaseModel):
    """What a session does when the model repeats a call (workflows/loops.py): from the
    `after`-th repeat on, tell the model (`note`), ask a person (`ask`) or stop (`stop`)."""

    model_config = ConfigDict(extra="forbid")
    after: int = Field(ge=2, le=1000)
    action: Literal["note", "ask", "stop"]


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
    # Whose memories its `remember`, `recall` and `forget` reach: the user's for this agent
    # (`agent`), or the user's own, shared by every agent that says `user` (activities/memory.py).
    memory: Literal["agent", "user"] = "agent"
    # The user's most relevant memories (to the goal) put in the system prompt at start: how many.
    memory_prompt: int = Field(default=0, ge=0, le=50)

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
    model_settings: ModelSettings | None = None
    fallback_models: list[str] = Field(default_factory=list)
    fallback_prices: dict[str, ModelPrice] = Field(default_factory=dict)
    loop_policy: LoopPolicy | None = None


class Attachment(BaseModel):
    """A file given with the goal (infra/attachments.py). Its bytes are in the object
    store under `ref`, never in history."""

    name: str = Field(min_length=1, max_length=500)
    media_type: str
    ref: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)
    width: int | None = None
    height: int | None = None
    pages: int | None = None

    def block(self) -> ContentBlock:
        """The goal message's block for it: an image, or a document (a PDF, or text)."""
        source = StoredSource(**self.model_dump()).model_dump(exclude_none=True)
        if self.media_type.startswith("image/"):
            return ImageBlock(source=source)
        return DocumentBlock(source=source)


class ForkPoint(BaseModel):
    session_id: str
    step: int


class ParentLink(BaseModel):
    """A sub-agent's parent: the session and the tool call it answers."""

    session_id: str
    tool_use_id: str
    # Whether the child tells its parent what it spends as it goes (workflows/subagents.py);
    # children started before it never did, and a replay of theirs must not.
    tells_spend: bool = False


class SessionInput(BaseModel):
    """Everything a session runs with. It is recorded in history: never put a secret here."""

    goal: str = Field(min_length=1, max_length=200_000)
    user_id: str = Field(default="anonymous", min_length=1, max_length=200)
    model: str = Field(default=DEFAULT_MODEL, min_length=1, max_length=200)
    system: str = Field(default=DEFAULT_SYSTEM, max_length=200_000)
    prompt_version: str = "v1"
    limits: Limits = Field(default_factory=Limits)
    price: ModelPrice | None = None
    # Models that make a step in turn when the one before fails as unavailable, rate
    # limited or refusing the key (workflows/model_calls.py), and the prices known for them.
    fallback_models: list[str] = Field(default_factory=list, max_length=MAX_FALLBACK_MODELS)
    fallback_prices: dict[str, ModelPrice] = Field(default_factory=dict)
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
    # Typed answers (workflows/typed_output.py): the answer is JSON that matches this JSON Schema.
    output_schema: dict[str, Any] | None = None
    # Files for the goal's message, by reference (sent as image, document or text blocks).
    attachments: list[Attachment] = Field(default_factory=list)
    # URLs told when a call waits for approval, the session waits for an event, and it
    # ends (workflows/notify.py); each starts with a prefix in AGENT_NOTIFY_ALLOW.
    notify: list[str] = Field(default_factory=list, max_length=10)
    # Thinking, temperature, top_p, stop sequences, tool choice (None: the model's defaults).
    model_settings: ModelSettings | None = None
    # What a repeated call does (None: the model is told at the third identical call).
    loop_policy: LoopPolicy | None = None
    # At max_steps, token_budget or cost_budget: stop (None too), or ask a person to raise it.
    on_limit: Literal["stop", "ask"] | None = None
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

    @field_validator("fallback_models")
    @classmethod
    def _fallbacks_distinct(cls, models: list[str]) -> list[str]:
        for model in models:
            if not model.strip() or len(model) > 200:
                raise ValueError(f"{model!r} is not a model name")
        if len(set(models)) != len(models):
            raise ValueError("a fallback model is named twice")
        return models

    @model_validator(mode="after")
    def _fallbacks_not_the_model(self) -> SessionInput:
        if self.model in self.fallback_models:
            raise ValueError(f"the model {self.model!r} is its own fallback model")
        return self

    def models(self) -> list[str]:
        """The model, then its fallback models, in the order a step tries them."""
        return [self.model, *self.fallback_models]

    def price_of(self, model: str) -> ModelPrice | None:
        """The price of one of the session's models; None when it has none."""
        return self.price if model == self.model else self.fallback_prices.get(model)

    @field_validator("goal")
    @classmethod
    def _goal_not_blank(cls, goal: str) -> str:
        if not goal.strip():
            raise ValueError("the goal is empty")
        return goal


class UserMessage(BaseModel):
    text: str = Field(min_length=1, max_length=200_000)
    # `queue`: after the run's answer (a chat's default); `steer`: at the model's next call in
    # the current run (the default otherwise); `interrupt`: the work in flight is cut short and
    # the message is the model's next user turn. workflows/messages.py.
    mode: MessageMode | None = None

    @field_validator("text")
    @classmethod
    def _not_blank(cls, text: str) -> str:
        if not text.strip():
            raise ValueError("the message is empty")
        return text


# The most characters an event's data may take, as compact JSON.
MAX_EVENT_DATA = 4000


class EventInput(BaseModel):
    """An event sent to a session: taken by a `wait_for_event` for its name, now or later."""

    name: str = Field(min_length=1, max_length=200)
    data: Any = None

    @field_validator("name")
    @classmethod
    def _name_not_blank(cls, name: str) -> str:
        if not name.strip():
            raise ValueError("the event name is empty")
        return name

    @field_validator("data")
    @classmethod
    def _data_small(cls, data: Any) -> Any:
        size = len(json.dumps(data, ensure_ascii=False, separators=(",", ":")))
        if size > MAX_EVENT_DATA:
            raise ValueError(f"the event data takes {size} characters as JSON; at most {MAX_EVENT_DATA}")
        return data


class WaitingFor(BaseModel):
    """The event a `wait_for_event` call waits for, and until when."""

    name: str
    until: datetime


class PendingMessageView(BaseModel):
    """A pending message as `status` shows it: its id, mode, length and when it was sent."""

    id: int
    mode: MessageMode
    chars: int
    sent_at: datetime | None = None


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
    # A session with an output schema: its answer, parsed (None until it has one).
    output: Any = None
    error: str | None = None
    chat: bool = False
    user_turns: int = 1
    queued_messages: int = 0
    # Messages sent and not yet given to the model, oldest first (workflows/messages.py).
    pending_messages: list[PendingMessageView] = Field(default_factory=list)
    runs: int = 1
    model: str
    # The model the latest step was made with: `model`, or a fallback model while one is in use.
    model_in_use: str | None = None
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
    # Notifications delivered, failed (abandoned) and still pending (workflows/notify.py).
    notifications: Notifications = Field(default_factory=Notifications)
    # Seconds of work so far: model calls, tools, sub-agents and the loop between them
    # (waiting for a person, paused, idle, sleeping and waiting for an event do not count).
    worked_seconds: float = 0.0
    # While `sleep` runs: when it wakes. While `wait_for_event` runs: what it waits for.
    wake_at: datetime | None = None
    waiting_for: WaitingFor | None = None
    # The calls the model repeats, most repeated first (workflows/loops.py).
    repeats: list[Repeat] = Field(default_factory=list)
    # The limit a session with on_limit "ask" waits at (`waiting_budget`), or stopped at.
    limit_reached: LimitReached | None = None


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
    # Who decided: the API user, or `cli:<login>` from the command line; None for a bare signal.
    decided_by: str | None = Field(default=None, max_length=200)
    # Whom the decider acted for: the command line's `--as USER` (never in place of decided_by).
    on_behalf_of: str | None = Field(default=None, max_length=200)


class LimitRaise(BaseModel):
    """A new absolute limit for a session: above what it has used (workflows/budgets.py)."""

    name: LimitName
    value: float = Field(gt=0)
    decided_by: str | None = Field(default=None, max_length=200)
    on_behalf_of: str | None = Field(default=None, max_length=200)


class LimitDecline(BaseModel):
    """No more budget: the session waiting at a limit ends `stopped`, the limit its reason."""

    reason: str | None = Field(default=None, max_length=2000)
    decided_by: str | None = Field(default=None, max_length=200)
    on_behalf_of: str | None = Field(default=None, max_length=200)


class CancelRequest(BaseModel):
    reason: str | None = Field(default=None, max_length=2000)
    decided_by: str | None = Field(default=None, max_length=200)
    on_behalf_of: str | None = Field(default=None, max_length=200)


AgentSpec.model_rebuild()


def memory_scope(input: SessionInput) -> str:
    """The memory workflow of the session's user: per agent, unless the agent says
    `memory = "user"`; a session without an agent has the user's own."""
    agent = input.agent
    return scope_id(input.user_id, agent.name if agent is not None and agent.memory == "agent" else None)
