"""Typed answers: a session with an output schema answers JSON that validates, given
parsed as `output`; invalid answers go back to the model with the error, and the third
ends the session `failed`. From the command line, an agent definition and the API."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Harness, answer, tool_use
from tests.test_agents import cli
from workflows.typed_output import FINAL_ANSWER

pytest_plugins = ["tests.test_openai_provider"]  # the `chat` harness and its fake

REPORT = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "temperature": {"type": "number"}},
    "required": ["city", "temperature"],
}


def final(value: dict[str, Any], id: str | None = None) -> dict[str, Any]:
    return tool_use(FINAL_ANSWER, value, id=id)


def results(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for b in request["body"]["messages"][-1]["content"] if b.get("type") == "tool_result"]


async def test_an_invalid_answer_goes_back_with_the_error_then_the_valid_one_is_the_output(harness: Harness):
    status = await harness.run(
        [
            tool_use("get_time", id="t1"),
            final({"city": "Oslo"}, id="a1"),
            final({"city": "Oslo", "temperature": -3.5}, id="a2"),
        ],
        output_schema=REPORT,
    )
    assert status.status == "completed", status.error
    assert status.output == {"city": "Oslo", "temperature": -3.5}
    assert json.loads(status.answer or "") == status.output
    requests = harness.requests(status.session_id)
    assert len(requests) == 3
    first = requests[0]["body"]
    [spec] = [t for t in first["tools"] if t["name"] == FINAL_ANSWER]
    assert spec["input_schema"] == REPORT  # an object schema is the tool's input as it is
    assert FINAL_ANSWER in first["system"][0]["text"]
    [refused] = results(requests[2])
    assert refused["tool_use_id"] == "a1" and refused["is_error"] is True
    assert "'temperature' is a required property" in refused["content"]
    assert "2 more invalid answers" in refused["content"]


async def test_three_invalid_answers_fail_the_session_saying_why(harness: Harness):
    status = await harness.run(
        [final({"city": 1, "temperature": 2}), answer("It is cold in Oslo."), final({"city": "Oslo"})],
        output_schema=REPORT,
    )
    assert status.status == "failed"
    assert status.error is not None and "3 answers that do not match the output schema" in status.error
    assert "'temperature' is a required property" in status.error
    assert status.output is None
    requests = harness.requests(status.session_id)
    assert len(requests) == 3  # no fourth call after the third invalid answer
    told = requests[2]["body"]["messages"][-1]["content"]
    assert "the answer is not JSON" in told[0]["text"]  # the plain text answer, answered


async def test_a_schema_that_is_not_an_object_travels_wrapped_and_json_text_is_accepted(harness: Harness):
    schema = {"type": "array", "items": {"$ref": "#/$defs/step"}, "minItems": 1,
              "$defs": {"step": {"type": "string"}}}  # fmt: skip
    status = await harness.run(
        [final({"answer": []}), final({"answer": ["plan", "do"]})], output_schema=schema
    )
    assert status.status == "completed" and status.output == ["plan", "do"]
    [spec] = [t for t in harness.requests(status.session_id)[0]["body"]["tools"] if t["name"] == FINAL_ANSWER]
    assert spec["input_schema"]["properties"]["answer"]["items"] == {"$ref": "#/$defs/step"}
    assert spec["input_schema"]["$defs"] == {"step": {"type": "string"}}
    [refused] = results(harness.requests(status.session_id)[1])
    assert "should be non-empty" in refused["content"] and "$.answer" not in refused["content"]

    text = await harness.run(
        [answer('```json\n{"city": "Rome", "temperature": 21}\n```')], output_schema=REPORT
    )
    assert text.status == "completed" and text.output == {"city": "Rome", "temperature": 21}


def definitions(tmp_path: Path) -> Path:
    (tmp_path / "report.schema.json").write_text(json.dumps(REPORT))
    path = tmp_path / "agents.toml"
    path.write_text(
        """
[agents.table]
tools = ["get_time"]
[agents.table.output_schema]
type = "object"
required = ["city"]
[agents.table.output_schema.properties.city]
type = "string"

[agents.filed]
tools = []
output_schema_file = "report.schema.json"

[agents.broken]
tools = []
output_schema = {type = "object", required = "city"}
"""
    )
    return path


async def test_the_command_line_and_the_agent_definitions(harness: Harness, tmp_path: Path):
    agents = definitions(tmp_path)
    session = f"test-{uuid.uuid4().hex[:10]}"
    harness.script(session, [final({"city": "Lima"})])
    code, out, err = await cli(harness, "start", "weather", "--agent", "table", "--session", session, "--wait",
                               definitions=agents)  # fmt: skip
    assert code == 0, err
    code, out, err = await cli(harness, "status", session, "--json", definitions=agents)
    assert code == 0 and json.loads(out)["output"] == {"city": "Lima"}

    session = f"test-{uuid.uuid4().hex[:10]}"
    harness.script(session, [final({"city": "Lima", "temperature": 19})])
    code, _, err = await cli(harness, "start", "weather", "--agent", "filed", "--session", session, "--wait",
                             definitions=agents)  # fmt: skip
    assert code == 0, err
    request = harness.requests(session)[0]["body"]
    assert [t["input_schema"] for t in request["tools"]] == [REPORT]

    flag = tmp_path / "flag.json"
    flag.write_text(
        json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    )
    session = f"test-{uuid.uuid4().hex[:10]}"
    harness.script(session, [final({"n": 4})])
    code, _, err = await cli(harness, "start", "count", "--tools", "get_time", "--output-schema", str(flag),
                             "--session", session, "--wait", definitions=agents)  # fmt: skip
    assert code == 0, err
    code, out, _ = await cli(harness, "status", session, "--json", definitions=agents)
    assert json.loads(out)["output"] == {"n": 4}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--agent", "broken"],
            "the output schema is not valid JSON Schema: at required: 'city' is not of type 'array'",
        ),
        (["--output-schema", "missing.json"], "cannot read the output schema file missing.json"),
        (["--output-schema", "{flag}", "--chat"], "a chat session cannot have an output schema"),
    ],
)
async def test_a_schema_that_cannot_be_used_is_refused_at_start(
    harness: Harness, tmp_path: Path, args: list[str], message: str
):
    agents = definitions(tmp_path)
    (tmp_path / "flag.json").write_text(json.dumps(REPORT))
    args = [a.replace("{flag}", str(tmp_path / "flag.json")) for a in args]
    code, out, err = await cli(harness, "start", "weather", *args, definitions=agents)
    assert code == 1 and not out
    assert len(err.strip().splitlines()) == 1 and message in err, err


async def test_the_api_and_mcp_start_with_a_schema_and_give_the_output(
    client, dev_server, fake_model, data_dir: Path, tmp_path: Path
):
    from tests.support.api import serve_api, wait_for
    from tests.test_mcp_server import result
    from tests.test_mcp_server_http import over_http

    async with (
        serve_api(client, dev_server.address, fake_model, data_dir, tmp_path) as api,
        api.client("alice") as alice,
    ):
        bad = await alice.post("/v1/sessions", json={"goal": "g", "output_schema": {"type": "objekt"}})
        assert bad.status_code == 422 and "not valid JSON Schema" in bad.json()["error"]["message"]
        session = f"api-{uuid.uuid4().hex[:10]}"
        fake_model.script.set(session, [final({"city": "Quito", "temperature": 14})])
        started = await alice.post(
            "/v1/sessions", json={"goal": "weather", "session_id": session, "output_schema": REPORT}
        )
        assert started.status_code == 201, started.text

        async def done() -> dict[str, Any] | None:
            found = (await alice.get(f"/v1/sessions/{session}")).json()
            return found if found["status"] == "completed" else None

        found = await wait_for(done, what="the session to complete")
        assert found["output"] == {"city": "Quito", "temperature": 14}
        async with over_http(api, "alice") as mcp:  # and the MCP tools, as the same user
            got = result(await mcp.call_tool("get_session", {"session_id": session}))
            assert got["output"] == {"city": "Quito", "temperature": 14}


async def test_an_openai_compatible_model_answers_through_the_same_tool(chat):
    status = await chat.run(
        [
            {"tool_calls": [{"name": FINAL_ANSWER, "arguments": '{"city": "Oslo"', "id": "call_a1"}]},
            {
                "tool_calls": [
                    {"name": FINAL_ANSWER, "input": {"city": "Oslo", "temperature": 2}, "id": "call_a2"}
                ]
            },
        ],
        output_schema=REPORT,
        tools=[],
    )
    assert status.status == "completed", status.error
    assert status.output == {"city": "Oslo", "temperature": 2}
    requests = chat.requests(status.session_id)
    [tool] = requests[0]["body"]["tools"]
    assert tool["function"]["name"] == FINAL_ANSWER and tool["function"]["parameters"] == REPORT
    [refused] = [m for m in requests[1]["body"]["messages"] if m["role"] == "tool"]
    assert refused["content"].startswith("Error: The answer does not match the output schema")
