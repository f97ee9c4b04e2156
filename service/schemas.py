"""The API's request bodies. Unknown fields are refused (422), so a typo never passes
silently as a default."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SESSION_ID = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$"


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


# The start's choices, shared by `POST /v1/sessions` and the MCP tool `start_session`
# (`service.mcp_tools`): the same names, types, bounds and descriptions.
Model = Annotated[str | None, Field(min_length=1, max_length=200)]
FallbackModels = Annotated[
    list[str] | None,
    Field(max_length=5, description="models tried in turn when a step's model is unavailable, rate limited or refuses the key"),
]  # fmt: skip
MaxSteps = Annotated[int | None, Field(ge=1)]
TokenBudget = Annotated[int | None, Field(ge=1)]
CostBudget = Annotated[float | None, Field(gt=0, description="USD")]
Timeout = Annotated[float | None, Field(gt=0, description="seconds of working time")]
ApprovalTimeout = Annotated[
    float | None, Field(gt=0, description="seconds a call may wait for a decision before it is denied")
]
OutputSchema = Annotated[
    dict[str, Any] | None,
    Field(description="a JSON Schema: the answer is JSON that matches it, given as `output`"),
]
ThinkingBudget = Annotated[
    int | Literal["adaptive"] | None,
    Field(description="extended thinking: tokens (1024 or more, below max_tokens) or adaptive"),
]
Temperature = Annotated[float | None, Field(ge=0)]
TopP = Annotated[float | None, Field(ge=0, le=1)]
OnLimit = Annotated[
    Literal["stop", "ask"] | None,
    Field(description="at max_steps, token_budget or cost_budget: stop (the default), or wait for a raise"),
]
StopSequences = Annotated[list[str] | None, Field(description="stop when the model writes one")]
ToolChoice = Annotated[
    str | None, Field(description="the first model call of each run: auto, any, none or a tool name")
]
ATTACHMENTS = "files for the goal's message: PNG, JPEG, GIF or WebP images, PDF, plain text"
MAX_ATTACHMENTS = 100
# The body's fields that `steering.start` takes besides goal, agent, session id, model and chat.
START_CHOICES = (
    "fallback_models", "max_steps", "token_budget", "cost_budget", "timeout", "approval_timeout",
    "output_schema", "attachments", "thinking_budget", "temperature", "top_p", "stop_sequences", "tool_choice",
    "on_limit",
)  # fmt: skip


class StartSession(Body):
    goal: str = Field(min_length=1, max_length=200_000)
    agent: str | None = Field(
        default=None, max_length=200, description="an agent from the definitions (agents.toml)"
    )
    session_id: str | None = Field(default=None, pattern=SESSION_ID)
    system: str | None = Field(default=None, max_length=200_000)
    model: Model = None
    fallback_models: FallbackModels = None
    max_steps: MaxSteps = None
    token_budget: TokenBudget = None
    cost_budget: CostBudget = None
    timeout: Timeout = None
    approval_timeout: ApprovalTimeout = None
    on_limit: OnLimit = None
    chat: bool = False
    output_schema: OutputSchema = None
    attachments: list[NewAttachment] = Field(
        default_factory=list, max_length=MAX_ATTACHMENTS, description=ATTACHMENTS
    )
    notify: list[str] | None = Field(
        default=None, max_length=10,
        description="URLs told when a call waits for approval, the session waits for an event, and it ends "
                    "(each must start with a prefix in the service's AGENT_NOTIFY_ALLOW)",
    )  # fmt: skip

    thinking_budget: ThinkingBudget = None
    temperature: Temperature = None
    top_p: TopP = None
    stop_sequences: StopSequences = None
    tool_choice: ToolChoice = None


class NewAttachment(Body):
    name: str = Field(min_length=1, max_length=500)
    media_type: str = Field(min_length=1, max_length=200, description="checked against the bytes")
    data: str = Field(description="the file, base64")


class Approve(Body):
    tool_use_id: str = Field(min_length=1, max_length=200)
    input: dict[str, Any] | None = Field(default=None, description="approve with this input instead")


class Deny(Body):
    tool_use_id: str = Field(min_length=1, max_length=200)
    reason: str | None = Field(default=None, max_length=2000)


class Cancel(Body):
    reason: str | None = Field(default=None, max_length=2000)


class Message(Body):
    text: str = Field(min_length=1, max_length=200_000)
    mode: Literal["queue", "steer", "interrupt"] | None = Field(
        default=None,
        description="queue: after the run's answer (a chat's default); steer: at the model's next call in "
        "the current run (the default of a session that is not a chat); interrupt: the model call and the "
        "tools in flight are cut short (an at-most-once tool ends), then the model's next user turn",
    )


class Event(Body):
    name: str = Field(min_length=1, max_length=200, description="what the session's wait_for_event waits for")
    data: Any = Field(default=None, description="any JSON value: the wait's result")


class Limit(Body):
    """A new limit (`name`, `value`), or `decline: true` (with an optional `reason`)."""

    name: Literal["max_steps", "token_budget", "cost_budget"] | None = None
    value: float | None = Field(default=None, gt=0, description="the new absolute limit, above what is used")
    decline: bool = Field(default=False, description="no more: a session waiting at a limit stops")
    reason: str | None = Field(default=None, max_length=2000, description="why, with decline")

    @model_validator(mode="after")
    def _one_of(self) -> Limit:
        if self.decline == (self.name is not None or self.value is not None):
            raise ValueError("give name and value to raise a limit, or decline: true")
        if not self.decline and (self.name is None or self.value is None):
            raise ValueError("a raise takes both name and value")
        return self


class Empty(Body):
    pass


BATCH_IDS = 1000  # ids one batch names at most (sessions.batch.MAX_IDS)
BatchId = Annotated[str, Field(min_length=1, max_length=200)]


class Batch(Body):
    """One action on many sessions: `ids`, or (cancel, pause, resume) the sessions `query` matches."""

    action: Literal["cancel", "pause", "resume", "approve", "deny"]
    ids: list[BatchId] | None = Field(
        default=None, min_length=1, max_length=BATCH_IDS,
        description="session ids; for approve and deny, the tool_use_ids of calls waiting in `session_id`",
    )  # fmt: skip
    query: str | None = Field(
        default=None, min_length=1, max_length=4000,
        description="a Temporal visibility filter, e.g. AgentStatus = 'running' (cancel, pause, resume; "
                    "acts on at most 1000 matches, only the caller's own unless an operator)",
    )  # fmt: skip
    session_id: str | None = Field(
        default=None, pattern=SESSION_ID, description="approve and deny: the session the calls wait in"
    )
    reason: str | None = Field(default=None, max_length=2000, description="cancel and deny: why")

    @model_validator(mode="after")
    def _coherent(self) -> Batch:
        deciding = self.action in ("approve", "deny")
        if (self.ids is None) == (self.query is None):
            raise ValueError("give ids or query, not both")
        if deciding and self.query is not None:
            raise ValueError(f"{self.action} takes ids (the calls' tool_use_ids), not a query")
        if deciding != (self.session_id is not None):
            raise ValueError(
                "session_id names the session of the calls approve and deny decide; only with them"
            )
        if self.reason is not None and self.action not in ("cancel", "deny"):
            raise ValueError("a reason goes with cancel or deny")
        return self


class ErrorDetail(BaseModel):
    type: str = Field(description="the kind of failure, as in the API's error object")
    message: str


class BatchResult(BaseModel):
    id: str = Field(description="the session id (approve, deny: the call's tool_use_id)")
    ok: bool
    error: ErrorDetail | None = Field(default=None, description="why it failed; null when ok")


class BatchResults(BaseModel):
    results: list[BatchResult] = Field(description="one per id, in the order given (a query's: newest first)")


class SessionList(BaseModel):
    sessions: list[dict[str, Any]]
    next_page_token: str | None = Field(
        default=None, description="give it back as `page_token` for the next page; null after the last"
    )


class SessionPage(BaseModel):
    """MCP's `list_sessions` answer: a page, and the cursor to the next (MCP's names)."""

    sessions: list[dict[str, Any]]
    next_cursor: str | None = Field(
        default=None, description="give it back as `cursor` for the next page; null after the last"
    )


class AgentChoice(BaseModel):
    name: str
    description: str
    default: bool = Field(description="the agent a start without one runs (the definitions' default_agent)")


class AgentChoices(BaseModel):
    agents: list[AgentChoice]


class Me(BaseModel):
    user: str
    operator: bool
    namespace: str
    temporal_ui_url: str
