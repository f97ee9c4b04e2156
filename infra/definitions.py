"""Agent definitions: the agents a deployment runs and the MCP servers they use, from a
TOML file (`AGENT_DEFINITIONS`, default `agents.toml` at the project root).

Both the client (which records the resolved agent in the session's start input) and the
worker (which runs the MCP servers and checks tool names) read it. A mistake is one line
naming the file, the agent and the field. MCP server commands, URLs and environments
stay here, in the worker's configuration: a session records only the servers' names.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from infra.errors import ConfigError
from infra.policy import ToolPolicy

PROJECT_ROOT = Path(__file__).resolve().parent.parent
ApprovalRule = Literal["always", "never", "tool"]
NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,47}$"
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"


class DefinitionError(ConfigError):
    """The definitions file cannot be used; the text names the file and the field."""


class McpServer(BaseModel):
    """One MCP tool server: a command the worker starts (stdio) or a URL (streamable HTTP)."""

    model_config = ConfigDict(extra="forbid")
    command: list[str] | None = Field(default=None, min_length=1)
    url: str | None = None
    # A stdio server's environment: these, the worker's variables named in `env_passthrough`,
    # and a minimal base (activities/mcp/_connections.py `server_environment`); nothing else
    # of the worker's, whose own keys stay in the worker.
    env: dict[str, str] = Field(default_factory=dict)
    env_passthrough: list[Annotated[str, Field(pattern=ENV_NAME)]] = Field(
        default_factory=list, max_length=100
    )
    # Bounds every call: a dead or stuck server fails the call, never the session.
    timeout_seconds: float = Field(default=30, gt=0, le=3600)
    # How the server's tools may be retried; default from each tool's MCP annotations.
    policy: ToolPolicy | None = None

    @model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of command (stdio) or url (streamable HTTP)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError("url must start with http:// or https://")
        if self.url is not None and (self.env or self.env_passthrough):
            raise ValueError(
                "env and env_passthrough are a stdio server's (command): a server at a url has its own"
            )
        return self


class LoopPolicy(BaseModel):
    """`loop_policy = {after = N, action = "note" | "ask" | "stop"}` (workflows/loops.py)."""

    model_config = ConfigDict(extra="forbid")
    after: int = Field(ge=2, le=1000)
    action: Literal["note", "ask", "stop"]


class AgentDefinition(BaseModel):
    model_config = ConfigDict(extra="forbid")
    description: str = Field(default="", max_length=2000)
    model: str | None = Field(default=None, min_length=1, max_length=200)
    # Tried in turn when a step's model is unavailable, rate limited or refuses the key.
    fallback_models: list[str] | None = Field(default=None, max_length=5)
    system: str | None = Field(default=None, max_length=200_000)
    tools: list[str] | None = None  # Python tools by name; None: every tool the worker has
    mcp_servers: list[str] = Field(default_factory=list)
    subagents: list[str] = Field(default_factory=list)
    approval: dict[str, ApprovalRule] = Field(default_factory=dict)
    # A typed answer: a JSON Schema as a TOML table, or a JSON file holding one (a path
    # relative to the definitions file); the start input's resolution checks it.
    output_schema: dict[str, Any] | None = None
    output_schema_file: str | None = Field(default=None, min_length=1)
    # URLs told when a call waits for approval, a wait for an event starts, and the session
    # ends; each must start with a prefix in AGENT_NOTIFY_ALLOW (infra/notify.py).
    notify: list[str] | None = None
    # Any limit of `start`. At the service's doors they are ceilings a user may only lower;
    # an operator and the command line may raise them.
    max_steps: int | None = Field(default=None, ge=1, le=10_000)
    token_budget: int | None = Field(default=None, ge=1)
    cost_budget: float | None = Field(default=None, gt=0)
    timeout: float | None = Field(default=None, gt=0)
    max_tokens: int | None = Field(default=None, ge=1, le=128_000)
    model_timeout: float | None = Field(default=None, ge=1, le=3600)
    context_tokens: int | None = Field(default=None, ge=1000)
    # Seconds a call may wait for a decision before it is denied; None: it waits.
    approval_timeout: float | None = Field(default=None, gt=0)
    # Whose memories `remember`, `recall` and `forget` reach: the user's for this agent, or
    # the user's own (shared by the agents that say "user"); and how many of the most
    # relevant go into the system prompt at start.
    memory: Literal["agent", "user"] | None = None
    memory_prompt: int | None = Field(default=None, ge=0, le=50)
    # What a repeated call does (None: the model is told at the third identical call).
    loop_policy: LoopPolicy | None = None
    # At max_steps, token_budget or cost_budget: stop, or wait for a person to raise it.
    on_limit: Literal["stop", "ask"] | None = None
    # How the model samples (sessions/start_input.py checks them against the model).
    thinking_budget: int | Literal["adaptive"] | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    stop_sequences: list[str] | None = None
    tool_choice: str | None = Field(default=None, min_length=1, max_length=200)

    @model_validator(mode="after")
    def _one_schema(self) -> AgentDefinition:
        if self.output_schema is not None and self.output_schema_file is not None:
            raise ValueError("give output_schema or output_schema_file, not both")
        return self


class Ceilings(BaseModel):
    """`[ceilings]`: the most a user may set, at the service's doors, of a cost-bearing limit
    that the agent (or a start without one) does not set itself. An operator and the
    command line may go past them."""

    model_config = ConfigDict(extra="forbid")
    max_steps: int = Field(default=100, ge=1, le=10_000)
    token_budget: int = Field(default=2_000_000, ge=1)
    cost_budget: float = Field(default=10.0, gt=0)
    timeout: float = Field(default=4 * 3600, gt=0)
    max_tokens: int = Field(default=32_000, ge=1, le=128_000)
    continue_as_new_after_steps: int = Field(default=500, ge=1)


class Definitions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # The agent a start without one runs (`default` is the older spelling); without one,
    # such a start runs with no tools.
    default: str | None = Field(default=None, validation_alias=AliasChoices("default_agent", "default"))
    ceilings: Ceilings = Field(default_factory=Ceilings)
    agents: dict[str, AgentDefinition] = Field(default_factory=dict)
    mcp_servers: dict[str, McpServer] = Field(default_factory=dict)

    @field_validator("agents", "mcp_servers")
    @classmethod
    def _names(cls, value: dict) -> dict:
        import re

        for name in value:
            if not re.match(NAME_PATTERN, name) or "__" in name:
                raise ValueError(f"{name!r} is not a usable name (letters, digits, - and _, no '__')")
        return value

    @model_validator(mode="after")
    def _references(self) -> Definitions:
        if self.default is not None and self.default not in self.agents:
            raise ValueError(f"default_agent: no agent {self.default!r}")
        for name, agent in self.agents.items():
            for server in agent.mcp_servers:
                if server not in self.mcp_servers:
                    raise ValueError(f"agents.{name}.mcp_servers: no MCP server {server!r}")
            for sub in agent.subagents:
                if sub not in self.agents:
                    raise ValueError(f"agents.{name}.subagents: no agent {sub!r}")
        return self

    def agent(self, name: str) -> AgentDefinition:
        try:
            return self.agents[name]
        except KeyError:
            known = ", ".join(sorted(self.agents)) or "none"
            raise DefinitionError(f"no agent {name!r} in the definitions; agents: {known}") from None


def definitions_path() -> Path:
    return Path(os.environ.get("AGENT_DEFINITIONS") or PROJECT_ROOT / "agents.toml")


def load_definitions(path: Path | None = None) -> Definitions:
    """The definitions in `path` (default: `definitions_path()`); none if the default file is absent."""
    explicit = path is not None or bool(os.environ.get("AGENT_DEFINITIONS"))
    path = path or definitions_path()
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        if explicit:
            raise DefinitionError(f"{path}: no such file") from None
        return Definitions()
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise DefinitionError(f"{path}: {err}") from None
    except UnicodeDecodeError as err:
        raise DefinitionError(f"{path}: not UTF-8 text (byte {err.start}): save it as UTF-8") from None
    try:
        return Definitions.model_validate(raw)
    except ValidationError as err:
        issue = err.errors()[0]
        where = ".".join(str(p) for p in issue["loc"])
        message = issue["msg"].removeprefix("Value error, ")
        raise DefinitionError(f"{path}: {where + ': ' if where else ''}{message}") from None
