"""From agent definitions (`infra/definitions.py`) to what a session records at start.

`resolve(...)` is the one way an entry point (`client.py start` and `schedule create`,
`POST /v1/sessions`) turns a caller's goal, agent name, limits and fields into the start
input: it checks the model's provider, reads the definitions, resolves the agent (its
model, prompt, tools, MCP servers by name, approval rules, limits, and its sub-agents,
each resolved the same way) with the caller's settings on top, and refuses a cost budget
for a model or fallback model without prices and a notification URL that `AGENT_NOTIFY_ALLOW` does not
allow (infra/notify.py; the caller's `notify` list replaces the agent's). Model settings
(thinking, temperature, top_p, stop sequences, tool choice: the agent's, then the
caller's) are checked against what the model's API refuses (`check_settings`). Every
refusal is a one-line `BadRequest`; a value that breaks
the input's schema is pydantic's `ValidationError`, which each entry point words its own
way. The start input is in history, so a later edit of the file never changes a running
session.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio.exceptions import ApplicationError

from activities.providers import split
from activities.transcript import open_store
from activities.wire import MIN_THINKING_BUDGET, TOOL_CHOICE_WORDS
from infra.attachments import PDF, AttachmentError, check_total, detect
from infra.definitions import (
    AgentDefinition,
    DefinitionError,
    Definitions,
    definitions_path,
    load_definitions,
)
from infra.errors import BadRequest
from infra.model_names import DEFAULT_PROVIDER, refuses_sampling, refuses_temperature_with_top_p, split_prefix
from infra.notify import NotifyRefused, allowed_prefixes, check_targets
from sessions.pricing import PRICES, price_for
from workflows.contract import (
    DEFAULT_MODEL,
    DEFAULT_SYSTEM,
    AgentSpec,
    Attachment,
    Limits,
    LoopPolicy,
    ModelPrice,
    ModelSettings,
    SessionInput,
    SubAgent,
)
from workflows.typed_output import check_schema

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


def limits_of(source: object) -> dict[str, Any]:
    """The `Limits` fields a door's arguments set, read by their start names (`LIMIT_FIELDS`:
    the command line's flags and the API's body use the definitions' names); a door that
    has no such argument leaves it unset."""
    return {field: getattr(source, name, None) for name, field in LIMIT_FIELDS.items()}


# The cost-bearing limits a user may lower but not raise at the service's doors (start
# name -> `Limits` field; `service/quotas.py`).
CEILING_FIELDS = {
    "max_steps": "max_steps",
    "token_budget": "token_budget",
    "cost_budget": "cost_budget_usd",
    "timeout": "timeout_seconds",
    "max_tokens": "max_tokens",
    "continue_as_new_after_steps": "continue_as_new_after_steps",
}
SETTING_FIELDS = ("thinking_budget", "temperature", "top_p", "stop_sequences", "tool_choice")
# Chat Completions takes at most this many stop sequences.
OPENAI_MAX_STOP_SEQUENCES = 4


def resolve(
    *,
    goal: str,
    agent: str | None,
    limits: dict[str, Any],
    fields: dict[str, Any],
    attachments: list[NewAttachment] | None = None,
    settings: dict[str, Any] | None = None,
    store: bool = True,
) -> SessionInput:
    """The start input for the caller's goal, agent (None: the file's default) and
    settings: `limits` as `Limits` fields, `fields` as `SessionInput` fields and
    `settings` as `ModelSettings` fields, None meaning not given; `attachments` are files
    for the goal's message, stored in the object store here (the input records them by
    reference), or, without `store`, checked only: the caller stores them
    (`store_attachments`) once it has decided to start."""
    if fields.get("model") is not None:
        check_model(fields["model"])
    for model in fields.get("fallback_models") or []:
        check_model(model)
    found = read_definitions()
    try:
        chosen = chosen_agent(found, agent)
        resolved = session_input(
            found, chosen, goal=goal, limits={k: v for k, v in limits.items() if v is not None}, fields=fields
        )
    except DefinitionError as err:
        raise BadRequest(str(err)) from None
    definition = found.agent(chosen) if chosen is not None else None
    resolved.model_settings = model_settings(definition, settings or {}, resolved)
    if resolved.limits.cost_budget_usd is not None:
        for model in resolved.models():
            if resolved.price_of(model) is None:
                which = "model" if model == resolved.model else "fallback model"
                raise BadRequest(
                    f"no prices for {which} {model!r}, so a cost budget cannot be kept; "
                    f"models with prices: {', '.join(sorted(PRICES))}"
                )
    check_output_schema(resolved)
    if attachments:
        resolved = resolved.model_copy(update={"attachments": attach(resolved.model, attachments, store)})
    try:
        targets = check_targets(resolved.notify, allowed_prefixes())
    except NotifyRefused as err:
        raise BadRequest(str(err)) from None
    return resolved.model_copy(update={"notify": targets})


# ---- attachments (infra/attachments.py) ----------------------------------------------


@dataclass(frozen=True)
class NewAttachment:
    """A file as a caller gives it: its name, its bytes, and the type it says it is (if any)."""

    name: str
    data: bytes
    media_type: str | None = None


def attach(model: str, files: list[NewAttachment], store: bool = True) -> list[Attachment]:
    """The files checked (type by their bytes, limits, what the model's provider can take),
    stored (unless not `store`), and recorded by reference: their SHA-256, the store's key."""
    try:
        found = [detect(f.name, f.data, f.media_type) for f in files]
        check_total([len(f.data) for f in files])
    except AttachmentError as err:
        raise BadRequest(str(err)) from None
    check_attachments_for(model, [(f.name, d.media_type) for f, d in zip(files, found, strict=True)])
    blobs = [f.data for f in files]
    refs = store_attachments(blobs) if store else [hashlib.sha256(blob).hexdigest() for blob in blobs]
    return [
        Attachment(name=f.name, media_type=d.media_type, ref=ref, size=len(f.data), width=d.width,
                   height=d.height, pages=d.pages)
        for f, d, ref in zip(files, found, refs, strict=True)
    ]  # fmt: skip


def check_attachments_for(model: str, attachments: list[tuple[str, str]]) -> None:
    """Files (name, media type) the model's provider cannot send are refused before a start."""
    pdfs = [name for name, media_type in attachments if media_type == PDF]
    if split(model)[0] == "openai" and pdfs:
        raise BadRequest(
            f"model {model!r} cannot read PDF attachments ({', '.join(pdfs)}): the OpenAI-compatible "
            "provider sends images and text only"
        )


def store_attachments(blobs: list[bytes]) -> list[str]:
    """Write the files to the object store this process's environment names (sealed when
    payload keys are set); their SHA-256s. The store is async and `resolve` is not (it
    runs in a command and in the service's handlers alike): the writes run on an event
    loop of their own, in a thread."""

    async def put_all() -> list[str]:
        store = open_store()
        return [await store.put_attachment(blob) for blob in blobs]

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, put_all()).result()


# ---- typed answers (workflows/typed_output.py) ---------------------------------------


def read_schema_file(path: Path, what: str = "the output schema file") -> dict[str, Any]:
    """The JSON Schema in the JSON file `path`; a file that cannot be used is one line."""
    try:
        schema = json.loads(path.read_text())
    except OSError as err:
        raise BadRequest(f"cannot read {what} {path}: {err.strerror}") from None
    except ValueError as err:
        raise BadRequest(f"{what} {path} is not JSON: {err}") from None
    if not isinstance(schema, dict):
        raise BadRequest(f"{what} {path} must hold a JSON object (a JSON Schema)")
    return schema  # pyright: ignore[reportUnknownVariableType]: any JSON object


def agent_output_schema(definition: AgentDefinition) -> dict[str, Any] | None:
    """The agent's output schema: its table, or its file (relative to the definitions file)."""
    if definition.output_schema_file is None:
        return definition.output_schema
    path = Path(definition.output_schema_file)
    if not path.is_absolute():
        path = definitions_path().parent / path
    return read_schema_file(path, "the agent's output_schema_file")


def check_output_schema(resolved: SessionInput) -> None:
    """A schema that is not JSON Schema, or one on a chat session, is refused before anything starts."""
    if resolved.output_schema is None:
        return
    if (problem := check_schema(resolved.output_schema)) is not None:
        raise BadRequest(problem)
    if resolved.chat:
        raise BadRequest("a chat session cannot have an output schema: it answers more than once")


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


def ceilings(definitions: Definitions, agent: str | None, max_cost_budget: float | None) -> dict[str, float]:
    """The most a user may set of each cost-bearing limit at the service's doors (by its
    start name): the agent's own value, else the deployment's `[ceilings]`; a cost budget
    no more than the user's `max_cost_budget` either."""
    definition = definitions.agent(agent) if agent is not None else None
    found: dict[str, float] = {}
    for name in CEILING_FIELDS:
        own = getattr(definition, name, None)
        found[name] = own if own is not None else getattr(definitions.ceilings, name)
    if max_cost_budget is not None:
        found["cost_budget"] = min(found["cost_budget"], max_cost_budget)
    return found


def check_ceilings(given: dict[str, Any], ceiling: dict[str, float]) -> None:
    """A limit given above its ceiling (`given` by start name, None meaning not given) is
    refused: one line naming the field and its ceiling."""
    for name, value in given.items():
        if value is not None and name in ceiling and value > ceiling[name]:
            raise BadRequest(
                f"{name} {_number(value)} is above its ceiling of {_number(ceiling[name])}: it may be lowered, "
                "and raised only by an operator"
            )


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def capped_defaults(ceiling: dict[str, float]) -> dict[str, Any]:
    """The `Limits` fields whose default is above its ceiling (a `[ceilings]` set below the
    defaults), at the ceiling: what a start that gives none of them gets."""
    defaults = Limits()
    capped: dict[str, Any] = {}
    for name, field in CEILING_FIELDS.items():
        value = getattr(defaults, field)
        if value is not None and value > ceiling[name]:
            capped[field] = type(value)(ceiling[name])
    return capped


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
        approval=dict(definition.approval), subagents=subagents, memory=definition.memory or "agent",
        memory_prompt=definition.memory_prompt or 0,
    )  # fmt: skip


def _subagent(definitions: Definitions, name: str, path: tuple[str, ...]) -> SubAgent:
    definition = definitions.agent(name)
    model = definition.model or DEFAULT_MODEL
    fallbacks = _fallback_models(definition.fallback_models or [], f"agents.{name}.fallback_models")
    sub = SubAgent(
        name=name, description=definition.description, model=model, system=definition.system or DEFAULT_SYSTEM,
        limits=Limits(**agent_limits(definition, {})), price=price_for(model), tools=definition.tools,
        agent=agent_spec(definitions, name, path), fallback_models=fallbacks, fallback_prices=fallback_prices(fallbacks),
        loop_policy=_loop_policy(definition),
    )  # fmt: skip
    try:
        sub.model_settings = model_settings(definition, {}, sub)
    except BadRequest as err:
        raise DefinitionError(f"agents.{name}: {err}") from None
    return sub


def model_settings(
    definition: AgentDefinition | None, overrides: dict[str, Any], session: SessionInput | SubAgent
) -> ModelSettings | None:
    """The agent's model settings with the caller's on top, checked for the session's
    model; None when none is set (the model's defaults)."""
    chosen: dict[str, Any] = {}
    if definition is not None:
        chosen = {k: getattr(definition, k) for k in SETTING_FIELDS if getattr(definition, k) is not None}
    chosen |= {k: v for k, v in overrides.items() if v is not None and v != []}
    if not chosen:
        return None
    try:
        settings = ModelSettings(**chosen)
    except ValidationError as err:
        issue = err.errors()[0]
        raise BadRequest(f"{issue['loc'][0]}: {issue['msg'].removeprefix('Value error, ')}") from None
    check_settings(settings, session.model, session.limits.max_tokens)
    check_tool_choice(settings.tool_choice, session.tools, session.agent)
    return settings


def check_settings(settings: ModelSettings, model: str, max_tokens: int) -> None:
    """What the model's API refuses, said before the session starts."""
    budget, temperature, top_p = settings.thinking_budget, settings.temperature, settings.top_p
    provider = split_prefix(model)[0]
    if isinstance(budget, int):
        if budget < MIN_THINKING_BUDGET:
            raise BadRequest(f"thinking_budget must be at least {MIN_THINKING_BUDGET} tokens, not {budget}")
        if budget >= max_tokens:
            raise BadRequest(
                f"thinking_budget ({budget}) must be below max_tokens ({max_tokens}): "
                "raise max_tokens or lower the budget"
            )
    elif budget == "adaptive" and max_tokens <= MIN_THINKING_BUDGET:
        raise BadRequest(f"thinking needs max_tokens above {MIN_THINKING_BUDGET}, not {max_tokens}")
    if provider == DEFAULT_PROVIDER and temperature is not None and temperature > 1:
        raise BadRequest(f"temperature must be between 0 and 1 for Anthropic's models, not {temperature:g}")
    if budget is not None:
        if temperature is not None and temperature != 1:
            raise BadRequest(
                f"thinking takes no temperature but 1 (not {temperature:g}): leave temperature out"
            )
        if top_p is not None and top_p < 0.95:
            raise BadRequest(f"thinking takes top_p from 0.95 to 1, not {top_p:g}")
        if settings.tool_choice not in (None, "auto", "none"):
            raise BadRequest(
                f"thinking cannot be on with tool_choice {settings.tool_choice!r}, which forces a tool call: "
                "use auto or none"
            )
    if (temperature is not None or top_p is not None) and refuses_sampling(model):
        raise BadRequest(f"model {model} takes no temperature or top_p")
    if temperature is not None and top_p is not None and refuses_temperature_with_top_p(model):
        raise BadRequest(f"model {model} takes temperature or top_p, not both")
    if provider == "openai" and len(settings.stop_sequences) > OPENAI_MAX_STOP_SEQUENCES:
        raise BadRequest(
            f"OpenAI-compatible models take at most {OPENAI_MAX_STOP_SEQUENCES} stop sequences, "
            f"not {len(settings.stop_sequences)}"
        )


def check_tool_choice(choice: str | None, tools: list[str] | None, agent: AgentSpec | None) -> None:
    """A tool choice naming a tool the session cannot have. With the worker's tools (no
    list) the session checks it when it has listed them."""
    if choice is None or choice in TOOL_CHOICE_WORDS or tools is None:
        return
    servers = agent.mcp_servers if agent else []
    subagents = [f"agent__{s.name}" for s in agent.subagents] if agent else []
    if choice in tools or choice in subagents or any(choice.startswith(f"{s}__") for s in servers):
        return
    named = ", ".join([*tools, *subagents]) or "none"
    raise BadRequest(
        f"tool_choice {choice!r} is not one of the session's tools ({named}); "
        f"use auto, any, none or a tool name"
    )


def fallback_prices(models: list[str]) -> dict[str, ModelPrice]:
    """The prices known for the fallback models, by model."""
    return {model: price for model in models if (price := price_for(model)) is not None}


def _fallback_models(models: list[str], where: str) -> list[str]:
    """An agent's fallback models, each with a known provider."""
    for model in models:
        try:
            split(model)
        except ApplicationError as err:
            raise DefinitionError(f"{where}: {err.message}") from None
    return models


def _loop_policy(definition: AgentDefinition) -> LoopPolicy | None:
    policy = definition.loop_policy
    return LoopPolicy(**policy.model_dump()) if policy is not None else None


def session_input(
    definitions: Definitions, agent: str | None, *, goal: str, limits: dict[str, Any], fields: dict[str, Any]
) -> SessionInput:
    """The start input: the agent's settings, then the caller's (`fields` with None left out)."""
    given = {k: v for k, v in fields.items() if v is not None}
    if agent is None:
        return SessionInput(
            goal=goal, limits=Limits(**limits), price=price_for(given.get("model", DEFAULT_MODEL)),
            fallback_prices=fallback_prices(given.get("fallback_models", [])), **given,
        )  # fmt: skip
    definition = definitions.agent(agent)
    settings: dict[str, Any] = {
        "model": definition.model,
        "fallback_models": definition.fallback_models
        and _fallback_models(definition.fallback_models, f"agents.{agent}.fallback_models"),
        "system": definition.system,
        "tools": definition.tools,
        "output_schema": agent_output_schema(definition),
        "notify": definition.notify,
        "loop_policy": _loop_policy(definition),
        "on_limit": definition.on_limit,
    }
    settings = {k: v for k, v in settings.items() if v is not None} | given
    model = settings.get("model", DEFAULT_MODEL)
    return SessionInput(
        goal=goal, limits=Limits(**agent_limits(definition, limits)), price=price_for(model),
        fallback_prices=fallback_prices(settings.get("fallback_models", [])),
        agent=agent_spec(definitions, agent), **settings,
    )  # fmt: skip


def describe(definitions: Definitions) -> list[dict[str, Any]]:
    """The definitions as `agents` lists them."""
    return [
        {
            "name": name, "description": d.description, "model": d.model or DEFAULT_MODEL,
            "tools": d.tools, "mcp_servers": d.mcp_servers, "subagents": d.subagents,
            "approval": d.approval, "default": name == definitions.default,
            "fallback_models": d.fallback_models or [], "approval_timeout": d.approval_timeout,
            "notify": d.notify or [], "typed_answer": d.output_schema is not None or d.output_schema_file is not None,
            "loop_policy": d.loop_policy.model_dump() if d.loop_policy else None, "on_limit": d.on_limit or "stop",
            **{key: getattr(d, key) for key in SETTING_FIELDS},
        }
        for name, d in definitions.agents.items()
    ]  # fmt: skip
