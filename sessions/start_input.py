"""From agent definitions (`infra/definitions.py`) to what a session records at start.

`resolve(...)` is the one way an entry point (`client.py start` and `schedule create`,
`POST /v1/sessions`) turns a caller's goal, agent name, limits and fields into the start
input: it checks the model's provider, reads the definitions, resolves the agent (its
model, prompt, tools, MCP servers by name, approval rules, limits, and its sub-agents,
each resolved the same way) with the caller's settings on top, and refuses a cost budget
for a model without prices and a notification URL that `AGENT_NOTIFY_ALLOW` does not
allow (infra/notify.py; the caller's `notify` list replaces the agent's). Every refusal is a one-line `BadRequest`; a value that breaks
the input's schema is pydantic's `ValidationError`, which each entry point words its own
way. The start input is in history, so a later edit of the file never changes a running
session.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.exceptions import ApplicationError

from activities.providers import split
from activities.transcript import open_store
from infra.attachments import PDF, AttachmentError, check_total, detect
from infra.definitions import (
    AgentDefinition,
    DefinitionError,
    Definitions,
    definitions_path,
    load_definitions,
)
from infra.errors import BadRequest
from infra.notify import NotifyRefused, allowed_prefixes, check_targets
from sessions.pricing import PRICES, price_for
from workflows.contract import (
    DEFAULT_MODEL,
    DEFAULT_SYSTEM,
    AgentSpec,
    Attachment,
    Limits,
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
}


def resolve(
    *,
    goal: str,
    agent: str | None,
    limits: dict[str, Any],
    fields: dict[str, Any],
    attachments: list[NewAttachment] | None = None,
) -> SessionInput:
    """The start input for the caller's goal, agent (None: the file's default) and
    settings: `limits` as `Limits` fields and `fields` as `SessionInput` fields, None
    meaning not given; `attachments` are files for the goal's message, stored in the
    object store here (the input records them by reference)."""
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
    check_output_schema(resolved)
    if attachments:
        resolved = resolved.model_copy(update={"attachments": attach(resolved.model, attachments)})
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


def attach(model: str, files: list[NewAttachment]) -> list[Attachment]:
    """The files checked (type by their bytes, limits, what the model's provider can take),
    stored, and recorded by reference."""
    try:
        found = [detect(f.name, f.data, f.media_type) for f in files]
        check_total([len(f.data) for f in files])
    except AttachmentError as err:
        raise BadRequest(str(err)) from None
    check_attachments_for(model, [(f.name, d.media_type) for f, d in zip(files, found, strict=True)])
    refs = store_attachments([f.data for f in files])
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
        "output_schema": agent_output_schema(definition),
        "notify": definition.notify,
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
