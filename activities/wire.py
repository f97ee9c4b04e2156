"""Wire types shared by the workflow and the activities.

Everything here crosses into Temporal history, so it is plain pydantic: Anthropic
content blocks as the Messages API spells them, the model request and reply, the tool
request and outcome. SDK classes (anthropic's) never appear here; the model activity
converts at the edge.
"""

from __future__ import annotations

import hashlib
import json
import typing
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator

from infra.policy import ToolPolicy


class TextBlock(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["text"] = "text"
    text: str


class ToolUseBlock(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class ToolResultBlock(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str | list[dict[str, Any]] = ""
    is_error: bool = False


class ImageBlock(BaseModel):
    """An image, as the Messages API spells it. In history and the transcript store its
    source is `StoredSource`; the model activity sends it as base64."""

    model_config = ConfigDict(extra="allow")
    type: Literal["image"] = "image"
    source: dict[str, Any]


class DocumentBlock(BaseModel):
    """A PDF (or, stored, a plain text file, sent as a text block), as `ImageBlock`."""

    model_config = ConfigDict(extra="allow")
    type: Literal["document"] = "document"
    source: dict[str, Any]


class StoredSource(BaseModel):
    """An attachment's bytes by reference: the SHA-256 they are kept under in the object
    store (activities/transcript.py), with what the context estimate needs."""

    type: Literal["stored"] = "stored"
    ref: str
    media_type: str
    name: str
    size: int
    width: int | None = None
    height: int | None = None
    pages: int | None = None


class ThinkingBlock(BaseModel):
    """The model's extended thinking, with the signature the API checks when it comes back:
    kept and sent back exactly as it came, in its place before the turn's tool calls."""

    model_config = ConfigDict(extra="allow")
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str = ""


class RedactedThinkingBlock(BaseModel):
    """Thinking the API sends encrypted (`data`); sent back exactly as it came."""

    model_config = ConfigDict(extra="allow")
    type: Literal["redacted_thinking"] = "redacted_thinking"
    data: str


THINKING_TYPES = ("thinking", "redacted_thinking")


class OtherBlock(BaseModel):
    """Any block this loop does not act on (server tools, new types): kept as sent."""

    model_config = ConfigDict(extra="allow")
    type: str


def _block_kind(value: Any) -> str:
    kind = (
        cast("dict[str, Any]", value).get("type") if isinstance(value, dict) else getattr(value, "type", None)
    )
    return (
        kind if kind in ("text", "tool_use", "tool_result", "image", "document", *THINKING_TYPES) else "other"
    )


ContentBlock = Annotated[
    Annotated[TextBlock, Tag("text")]
    | Annotated[ToolUseBlock, Tag("tool_use")]
    | Annotated[ToolResultBlock, Tag("tool_result")]
    | Annotated[ImageBlock, Tag("image")]
    | Annotated[DocumentBlock, Tag("document")]
    | Annotated[ThinkingBlock, Tag("thinking")]
    | Annotated[RedactedThinkingBlock, Tag("redacted_thinking")]
    | Annotated[OtherBlock, Tag("other")],
    Discriminator(_block_kind),
]


class Message(BaseModel):
    role: Literal["user", "assistant"]
    content: list[ContentBlock]

    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    def tool_uses(self) -> list[ToolUseBlock]:
        return [b for b in self.content if isinstance(b, ToolUseBlock)]

    def thinking(self) -> str:
        return "".join(b.thinking for b in self.content if isinstance(b, ThinkingBlock))


class Usage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def total(self) -> int:
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_creation_input_tokens
            + self.cache_read_input_tokens
        )

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_creation_input_tokens=self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            cache_read_input_tokens=self.cache_read_input_tokens + other.cache_read_input_tokens,
        )


class ToolSpec(BaseModel):
    """What the workflow knows of a tool: what the model sees, and how it may be run."""

    name: str
    description: str
    input_schema: dict[str, Any]
    policy: ToolPolicy = "idempotent"
    requires_approval: bool = False
    # Short retry-safe tools run as local activities, in the workflow task that received
    # the model's response: one workflow task per step instead of two. Resolved when the
    # tool is declared (`@tool(local=None)`), so the recorded tool list decides.
    local: bool = False
    # An MCP tool: the server (from the worker's definitions) that runs it. None for the
    # worker's Python tools.
    server: str | None = None
    # The bound on one attempt: a Python tool's `@tool(timeout=)`, an MCP server's
    # `timeout_seconds`. None in Python tool lists recorded before tools had one (they
    # keep the old bounds, workflows/options.py).
    timeout_seconds: float | None = None
    # A sub-agent, called as a tool: it runs as a child session of the workflow.
    subagent: str | None = None

    def for_model(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


def tool_specs_text(specs: list[ToolSpec]) -> tuple[str, str]:
    """The canonical text of a tool list and its SHA-256, the same in workflow and activity."""
    # exclude_none: fields added later do not change the text (and hash) of older lists.
    text = json.dumps(
        [s.model_dump(mode="json", exclude_none=True) for s in specs], sort_keys=True, ensure_ascii=False
    )
    return text, hashlib.sha256(text.encode()).hexdigest()


# `tool_choice`: the model chooses (auto), must call some tool (any), may call none
# (none), or must call the tool named.
TOOL_CHOICE_WORDS = ("auto", "any", "none")
MIN_THINKING_BUDGET = 1024  # the Messages API's least `budget_tokens`


class ModelSettings(BaseModel):
    """How the model samples, as a session's start input records them (None: the
    provider's default). `tool_choice` applies to the first model call of each run;
    in a `ModelRequest` it is that call's own (None: auto)."""

    # Extended thinking: a budget of tokens (at least 1024, below max_tokens), or
    # "adaptive" (the model decides how much to think).
    thinking_budget: int | Literal["adaptive"] | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    stop_sequences: list[Annotated[str, Field(min_length=1, max_length=1000)]] = Field(
        default_factory=list, max_length=16
    )
    tool_choice: str | None = Field(default=None, min_length=1, max_length=200)

    def is_default(self) -> bool:
        return self == ModelSettings()


class ModelRequest(BaseModel):
    """One model call. The transcript travels by reference; only new messages are inline."""

    session_id: str
    step: int
    model: str
    system: str
    max_tokens: int
    # The tool specs go inline once; later calls name them by their content hash.
    tools: list[ToolSpec] | None
    tools_ref: str
    transcript_ref: str | None = None
    # Tool results may carry `content_ref` instead of their content (stored by the tool
    # activity), so a tool's output is recorded in history once, not twice.
    new_messages: list[Message]
    stream: bool = True
    context_tokens: int = 200_000
    summarize_dropped: bool = False
    # Thinking, sampling, stop sequences and this call's tool choice; None: the defaults.
    settings: ModelSettings | None = None
    # Updates the session refused since the last call, which the reply carries back so that
    # history records them (workflows/metering.py, "updates refused").
    refusals: int = 0


# Why a model response ended, the same for every provider. The workflow acts on these
# alone: `tool_use` runs the tools, `pause_turn` calls again, `end_turn` is an answer,
# `max_tokens` and `refusal` stop the run; `other` stops it too, as `unknown`.
StopReason = Literal["end_turn", "tool_use", "max_tokens", "refusal", "pause_turn", "other"]
STOP_REASONS: tuple[str, ...] = typing.get_args(StopReason)


class ModelReply(BaseModel):
    """A provider's response, normalised: neutral content blocks, stop reason and usage."""

    message: Message
    stop_reason: StopReason
    usage: Usage
    model: str
    transcript_ref: str
    latency_ms: int
    attempt: int = 1
    # Messages left out of this call to fit the context window (the transcript keeps them).
    context_dropped: int = 0
    # Heartbeats the call sent over all its attempts (activities/heartbeat.py).
    heartbeats: int = 0
    # The request's `refusals`, unchanged.
    refusals: int = 0

    @field_validator("stop_reason", mode="before")
    @classmethod
    def _normalised(cls, value: Any) -> str:
        # Replies recorded before the provider seam carry Anthropic's own spellings.
        if value == "stop_sequence":
            return "end_turn"
        return value if value in STOP_REASONS else "other"


class TextDelta(BaseModel):
    """Streamed model text, published by the model activity while a call runs."""

    model_config = ConfigDict(extra="ignore")
    type: Literal["delta"] = "delta"
    step: int
    attempt: int = 1
    text: str


class ThinkingDelta(BaseModel):
    """Streamed thinking text, published like `TextDelta` but never part of the answer."""

    model_config = ConfigDict(extra="ignore")
    type: Literal["thinking_delta"] = "thinking_delta"
    step: int
    attempt: int = 1
    text: str


LiveDelta = Annotated[TextDelta | ThinkingDelta, Field(discriminator="type")]


class ToolRequest(BaseModel):
    session_id: str
    user_id: str
    tool_use_id: str
    name: str
    input: dict[str, Any]
    max_output: int
    # Set for the memory tools only: the scope's workflow id (activities/memory.py).
    memory_scope: str | None = None


class ToolOutcome(BaseModel):
    content: str
    # Set when the content is also in the transcript store under this hash.
    content_ref: str | None = None
    is_error: bool = False
    truncated_chars: int = 0
    duration_ms: int = 0
    # The attempt that ran it, and the heartbeats it sent over all its attempts.
    attempt: int = 1
    heartbeats: int = 0


class ArchivePart(BaseModel):
    """What a session's run hands to the store instead of to its next run: the messages,
    finished tool calls and trace turns the loop no longer needs (workflows/archive.py).
    Calls and turns travel as the JSON of the workflow's own records."""

    session_id: str
    parent: str | None  # the session's previous part, or None for its first
    messages: list[Message]
    calls: list[dict[str, Any]] = Field(default_factory=list)
    trace: list[dict[str, Any]] = Field(default_factory=list)


class ArchiveReceipt(BaseModel):
    ref: str  # the part's hash in the store
    attempt: int = 1


class StopCalls(BaseModel):
    """Which session run's calls in flight to stop where they run (activities/stopping.py)."""

    session_id: str
    run_id: str


class CallsStopped(BaseModel):
    """What `stop_calls` found: calls stopped, calls their worker refused to interrupt
    (at-most-once), and calls whose worker it could not ask (no live server, unreachable)."""

    stopped: list[str] = []
    refused: list[str] = []
    unreachable: list[str] = []
    attempt: int = 1
