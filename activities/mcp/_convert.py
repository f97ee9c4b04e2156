"""MCP's types converted at the edge: a listed tool becomes a `ToolSpec`, a call's result
becomes text, and an input is checked against the tool's JSON Schema.

Nothing of the MCP SDK's own classes reaches history: only `ToolSpec` and strings. Parts
of a result are told apart by their `type`, as MCP spells them on the wire.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, cast

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.protocols import Validator

from activities.wire import ToolSpec
from infra.definitions import McpServer
from infra.policy import ToolPolicy

if TYPE_CHECKING:  # the SDK is imported by the worker only (see _errors)
    from mcp.types import CallToolResult, Tool

SEPARATOR = "__"
# What every model provider accepts as a tool name (OpenAI's limit is the shortest).
USABLE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def full_name(server: str, tool: str) -> str:
    return f"{server}{SEPARATOR}{tool}"


def split_name(name: str) -> tuple[str, str]:
    """`files__read_file` -> (`files`, `read_file`); server names never contain `__`."""
    server, sep, tool = name.partition(SEPARATOR)
    if not sep or not server or not tool:
        raise ValueError(f"{name!r} is not an MCP tool name (SERVER__TOOL)")
    return server, tool


def policy_of(tool: Tool, config: McpServer) -> ToolPolicy:
    """The server's configured policy, else the tool's own hints.

    MCP's defaults say a tool may be destructive and is not idempotent, so a tool that
    says nothing is run at most once.
    """
    if config.policy is not None:
        return config.policy
    hints = tool.annotations
    if hints is not None and hints.read_only_hint:
        return "read_only"
    if hints is not None and hints.idempotent_hint:
        return "idempotent"
    return "at_most_once"


def to_spec(server: str, tool: Tool, config: McpServer) -> ToolSpec:
    return ToolSpec(
        name=full_name(server, tool.name),
        description=tool.description or tool.name,
        input_schema=tool.input_schema,
        policy=policy_of(tool, config),
        requires_approval=False,
        server=server,
        timeout_seconds=config.timeout_seconds,
    )


def input_error(spec: ToolSpec, value: dict[str, Any]) -> str | None:
    """What is wrong with `value` for this tool, naming the field; None when it fits."""
    try:
        validator = cast("Validator", Draft202012Validator(spec.input_schema))  # its stub is partly untyped
        problems: list[ValidationError] = sorted(
            validator.iter_errors(value), key=lambda e: list(e.absolute_path)
        )
    except SchemaError as err:
        return f"the MCP server's schema for {spec.name} is not valid JSON Schema: {err.message}"
    if not problems:
        return None
    parts: list[str] = []
    for problem in problems:
        where = ".".join(str(p) for p in problem.absolute_path) or "input"
        parts.append(f"{where}: {problem.message}")
    return f"invalid input for {spec.name}: " + "; ".join(parts)


def _sized(kind: str, data: str, mime: str | None = None) -> str:
    # Base64: four characters carry three bytes, less the padding.
    size = len(data) * 3 // 4 - data[-2:].count("=")
    return f"[{kind}, {size} bytes{', ' + mime if mime else ''}]"


def _part_text(part: Any) -> str:
    kind = getattr(part, "type", "unknown")
    if kind == "text":
        return part.text
    if kind in ("image", "audio"):
        return _sized(kind, part.data, part.mime_type)
    if kind == "resource_link":
        return f"[resource link {part.uri}: {part.name}]"
    if kind == "resource":
        resource = part.resource
        text = getattr(resource, "text", None)
        if text is not None:
            return text
        return _sized(f"resource {resource.uri}", getattr(resource, "blob", ""), resource.mime_type)
    return f"[{kind} content]"


def result_text(result: CallToolResult) -> str:
    """The text the model reads: text parts joined, other parts described."""
    if not result.content and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False, default=str)
    return "\n".join(_part_text(part) for part in result.content)
