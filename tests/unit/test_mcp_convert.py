"""MCP's types at the edge: policies from annotations, names, and results as text."""

from __future__ import annotations

import base64
import subprocess
import sys
from typing import Any

import pytest
from mcp.types import (
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
    Tool,
    ToolAnnotations,
)

from activities.mcp._convert import input_error, policy_of, result_text, split_name, to_spec
from infra.definitions import McpServer

SERVER = McpServer(command=["true"])


def tool(**hints: Any) -> Tool:
    annotations = ToolAnnotations(**hints) if hints else None
    return Tool(name="t", input_schema={"type": "object"}, annotations=annotations)


@pytest.mark.parametrize(
    ("hints", "policy"),
    [
        ({}, "at_most_once"),
        ({"read_only_hint": True}, "read_only"),
        ({"read_only_hint": False, "idempotent_hint": True}, "idempotent"),
        ({"destructive_hint": False}, "at_most_once"),
        ({"read_only_hint": True, "idempotent_hint": False}, "read_only"),
    ],
)
def test_policy_from_the_hints(hints: dict, policy: str) -> None:
    assert policy_of(tool(**hints), SERVER) == policy


def test_the_servers_policy_wins() -> None:
    config = McpServer(command=["true"], policy="idempotent")
    assert policy_of(tool(), config) == "idempotent"


def test_spec_names_and_bounds() -> None:
    spec = to_spec(
        "files",
        Tool(name="read_file", input_schema={"type": "object"}),
        McpServer(url="http://x", timeout_seconds=7),
    )
    assert (spec.name, spec.description, spec.server, spec.timeout_seconds) == (
        "files__read_file",
        "read_file",
        "files",
        7,
    )
    assert split_name("files__read_file") == ("files", "read_file")
    assert split_name("files__a__b") == ("files", "a__b")
    with pytest.raises(ValueError):
        split_name("read_file")


def test_input_error_names_nested_fields() -> None:
    schema = {
        "type": "object",
        "properties": {"to": {"type": "object", "properties": {"port": {"type": "integer"}}}},
        "required": ["to"],
    }
    spec = to_spec("net", Tool(name="dial", input_schema=schema), SERVER)
    assert (
        input_error(spec, {"to": {"port": "x"}})
        == "invalid input for net__dial: to.port: 'x' is not of type 'integer'"
    )
    assert input_error(spec, {}) == "invalid input for net__dial: input: 'to' is a required property"
    assert input_error(spec, {"to": {"port": 1}}) is None


def test_result_text_describes_what_is_not_text() -> None:
    png = base64.b64encode(b"\x89PNG" + bytes(12341)).decode()
    result = CallToolResult(
        content=[
            TextContent(text="first"),
            ImageContent(data=png, mime_type="image/png"),
            ResourceLink(name="report", uri="file:///r.pdf"),
            EmbeddedResource(resource=TextResourceContents(uri="file:///a.txt", text="inline")),
        ]
    )
    assert (
        result_text(result)
        == "first\n[image, 12345 bytes, image/png]\n[resource link file:///r.pdf: report]\ninline"
    )


def test_structured_content_alone_is_json() -> None:
    assert result_text(CallToolResult(content=[], structured_content={"n": 1})) == '{"n": 1}'


def test_importing_the_activities_leaves_the_sdk_to_the_worker() -> None:
    # The workflow, and so every command of client.py, imports activities.mcp for the
    # activity references; the SDK costs over a second and is needed only to connect.
    code = "import sys, activities.mcp; print(sorted(m for m in ('mcp', 'mcp_types') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
