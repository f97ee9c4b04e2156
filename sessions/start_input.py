"""From agent definitions (`infra/definitions.py`) to what a session records at start.

`resolve(...)` is the one way an entry point (`client.py start` and `schedule create`,
`POST /v1/sessions`) turns a caller's goal, agent name, limits and fields into the start
input: it checks the model's provider, reads the definitions, resolves the agent (its
model, prompt, tools, MCP servers by name, approval rules, limits, and its sub-agents,
each resolved the same way) with the caller's settings on top, and refuses a cost budget
for a model without prices. Every refusal is a one-line `BadRequest`; a value that breaks
the input's schema is pydantic's `ValidationError`, which each entry point words its own
way. The start input is in history, so a later edit of the file never changes a running
session.
"""

from __future__ import annotations

from typing import Any

from temporalio.exceptions import ApplicationError

from activities.providers import split
from infra.definitions import AgentDefinition, DefinitionError, Definitions, load_definitions
from infra.errors import BadRequest
from sessions.pricing import PRICES, price_for
from workflows.contract import DEFAULT_MODEL, DEFAULT_SYSTEM, AgentSpec, Limits, SessionInput, SubAgent

# Sub-agents of sub-agents are resolved this deep; an agent already on the path is left
# out, so a definition that names itself cannot recurse forever.
MAX_DEPTH = 3
LIMIT_FIELDS = {  # definition field -> Limits field
    "max_steps": "max_steps",
    "token_budget": "token_budget",
    "cost_budget": "cost_budget_usd",
    "timeout": "timeout_seconds",
    "max_tokens": "max_tokens",
    "model_timeout": "model_timeout_seconds",
    "context_tokens": "context_tokens",
    "approval_timeout": "approval_timeout_seconds",
}


def resolve(*, goal: str, agent: str | None, limits: dict[str, Any], fields: dict[str, Any]) -> SessionInput:
    """The start input for the caller's goal, agent (None: the file's default) and
    settings: `limits` as `Limits` fields and `fields` as `SessionInput` fields, None
    meaning not given."""
    if fields.get("model") is not None:
        check_model(fields["model"])
    found = read_definitions()
    try:
        chosen = chosen_agent(found, agent)
        resolved = session_input(
            found, chosen, goal=goal, limits={k: v for k, v in limits.items() if v is not None}, fields=fields
        )
    except DefinitionError as err:
        raise BadRequest(str(err)) from None
    if resolved.limits.cost_budget_usd is not None and resolved.price is None:
        raise BadRequest(
            f"no prices for model {resolved.model!r}, so a cost budget cannot be kept; "
            f"models with prices: {', '.join(sorted(PRICES))}"
        )
    return resolved


def check_model(model: str) -> None:
    """An unknown provider prefix is the caller's mistake, said before anything starts."""
    try:
        split(model)
    except ApplicationError as err:
        raise BadRequest(err.message) from None


def read_definitions() -> Definitions:
    """The agent definitions; a file that cannot be used is a `BadRequest` naming it."""
    try:
        return load_definitions()
    except DefinitionError as err:
        raise BadRequest(str(err)) from None


def chosen_agent(definitions: Definitions, name: str | None) -> str | None:
    """The agent to run: the one named, else the file's default, else none."""
    if name is not None:
        definitions.agent(name)  # says which agents exist when it is unknown
        return name
    return definitions.default


def agent_limits(definition: AgentDefinition, overrides: dict[str, Any]) -> dict[str, Any]:
    """The agent's limits as `Limits` fields, with the caller's overrides on top."""
    limits = {
        LIMIT_FIELDS[k]: getattr(definition, k) for k in LIMIT_FIELDS if getattr(definition, k) is not None
    }
    return {**limits, **overrides}


def agent_spec(definitions: Definitions, name: str, path: tuple[str, ...] = ()) -> AgentSpec:
    definition = definitions.agent(name)
    path = (*path, name)
    subagents = []
    if len(path) < MAX_DEPTH:
        subagents = [_subagent(definitions, sub, path) for sub in definition.subagents if sub not in path]
    return AgentSpec(
        name=name, description=definition.description, mcp_servers=list(definition.mcp_servers),
        approval=dict(definition.approval), subagents=subagents,
    )  # fmt: skip


def _subagent(definitions: Definitions, name: str, path: tuple[str, ...]) -> SubAgent:
    definition = definitions.agent(name)
    model = definition.model or DEFAULT_MODEL
    return SubAgent(
        name=name, description=definition.description, model=model, system=definition.system or DEFAULT_SYSTEM,
        limits=Limits(**agent_limits(definition, {})), price=price_for(model), tools=definition.tools,
        agent=agent_spec(definitions, name, path),
    )  # fmt: skip


def session_input(
    definitions: Definitions, agent: str | None, *, goal: str, limits: dict[str, Any], fields: dict[str, Any]
) -> SessionInput:
    """The start input: the agent's settings, then the caller's (`fields` with None left out)."""
    given = {k: v for k, v in fields.items() if v is not None}
    if agent is None:
        return SessionInput(
            goal=goal, limits=Limits(**limits), price=price_for(given.get("model", DEFAULT_MODEL)), **given
        )
    definition = definitions.agent(agent)
    settings: dict[str, Any] = {
        "model": definition.model,
        "system": definition.system,
        "tools": definition.tools,
    }
    settings = {k: v for k, v in settings.items() if v is not None} | given
    model = settings.get("model", DEFAULT_MODEL)
    return SessionInput(
        goal=goal, limits=Limits(**agent_limits(definition, limits)), price=price_for(model),
        agent=agent_spec(definitions, agent), **settings,
    )  # fmt: skip


def describe(definitions: Definitions) -> list[dict[str, Any]]:
    """The definitions as `agents` lists them."""
    return [
        {
            "name": name, "description": d.description, "model": d.model or DEFAULT_MODEL,
            "tools": d.tools, "mcp_servers": d.mcp_servers, "subagents": d.subagents,
            "approval": d.approval, "default": name == definitions.default,
        }
        for name, d in definitions.agents.items()
    ]  # fmt: skip
