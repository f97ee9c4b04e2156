"""The API's request bodies. Unknown fields are refused (422), so a typo never passes
silently as a default."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SESSION_ID = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$"


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StartSession(Body):
    goal: str = Field(min_length=1, max_length=200_000)
    agent: str | None = Field(
        default=None, max_length=200, description="an agent from the definitions (agents.toml)"
    )
    session_id: str | None = Field(default=None, pattern=SESSION_ID)
    system: str | None = Field(default=None, max_length=200_000)
    model: str | None = Field(default=None, min_length=1, max_length=200)
    fallback_models: list[str] | None = Field(
        default=None, max_length=5,
        description="models tried in turn when a step's model is unavailable, rate limited or refuses the key",
    )  # fmt: skip
    max_steps: int | None = Field(default=None, ge=1)
    token_budget: int | None = Field(default=None, ge=1)
    cost_budget: float | None = Field(default=None, gt=0, description="USD")
    timeout: float | None = Field(default=None, gt=0, description="seconds of working time")
    approval_timeout: float | None = Field(
        default=None, gt=0, description="seconds a call may wait for a decision before it is denied"
    )
    chat: bool = False
    output_schema: dict[str, Any] | None = Field(
        default=None, description="a JSON Schema: the answer is JSON that matches it, given as `output`"
    )
    attachments: list[NewAttachment] = Field(
        default_factory=list, max_length=100,
        description="files for the goal's message: PNG, JPEG, GIF or WebP images, PDF, plain text",
    )  # fmt: skip
    notify: list[str] | None = Field(
        default=None, max_length=10,
        description="URLs told when a call waits for approval, the session waits for an event, and it ends "
                    "(each must start with a prefix in the service's AGENT_NOTIFY_ALLOW)",
    )  # fmt: skip

    thinking_budget: int | Literal["adaptive"] | None = Field(
        default=None, description="extended thinking: tokens (1024 or more, below max_tokens) or adaptive"
    )
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, ge=0, le=1)
    stop_sequences: list[str] | None = Field(default=None, description="stop when the model writes one")
    tool_choice: str | None = Field(
        default=None, description="the first model call of each run: auto, any, none or a tool name"
    )


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


class Event(Body):
    name: str = Field(min_length=1, max_length=200, description="what the session's wait_for_event waits for")
    data: Any = Field(default=None, description="any JSON value: the wait's result")


class Empty(Body):
    pass


class SessionList(BaseModel):
    sessions: list[dict[str, Any]]


class Me(BaseModel):
    user: str
    operator: bool
    namespace: str
    temporal_ui_url: str
