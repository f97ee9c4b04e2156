"""The sessions as an MCP server over streamable HTTP at the API's `/mcp` (a real
`python api.py`), driven by the `mcp` SDK's own client with a bearer token: elicitation at
both protocol revisions, decisions as the token's user, and a user who reaches only their
own sessions (an operator every session); no token, a wrong one or the page's cookie is
401."""

from __future__ import annotations

import base64
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from temporalio.client import Client as TemporalClient
from temporalio.service import RPCError

from devservers.fakemodel import FakeModelServer
from tests.conftest import answer, tool_use
from tests.support.api import TOKENS, ApiProcess, module_api
from tests.test_mcp_server import (
    EMAIL,
    LEGACY,
    MODERN,
    Approver,
    approved_with_elicitation,
    assert_asked_with_a_flat_form,
    error_line,
    new_id,
    result,
)
from workflows.typed_output import FINAL_ANSWER

# One `python api.py` for the module: its tests run in one xdist process.
pytestmark = pytest.mark.xdist_group("mcp-api")


api = module_api("mcp-api")


def over_http(api: ApiProcess, user: str, mode: str = MODERN, **kwargs: Any) -> Client:
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {TOKENS[user]}"}, timeout=httpx2.Timeout(30, read=120)
    )
    return Client(streamable_http_client(f"{api.url}/mcp", http_client=http), mode=mode, **kwargs)


@pytest.mark.parametrize("mode", [MODERN, LEGACY])
async def test_http_with_elicitation_as_the_token_user(
    mode: str, api: ApiProcess, client: TemporalClient, fake_model: FakeModelServer
):
    approver = Approver()
    async with over_http(api, "alice", mode, elicitation_callback=approver) as mcp:
        assert mcp.protocol_version == (MODERN if mode == MODERN else "2025-11-25")
        await approved_with_elicitation(mcp, fake_model, client, "alice")
    assert_asked_with_a_flat_form(approver.asked)


async def test_http_a_user_reaches_only_their_own_sessions(api: ApiProcess, fake_model: FakeModelServer):
    session_id = new_id()
    fake_model.script.set(session_id, [tool_use("send_email", EMAIL, id="e1"), answer("done")])
    async with over_http(api, "alice") as alice, over_http(api, "bob") as bob, over_http(api, "olga") as olga:
        result(await alice.call_tool("start_session", {"goal": "email", "session_id": session_id}))
        waited = result(
            await alice.call_tool("wait_for_session", {"session_id": session_id, "timeout_seconds": 30})
        )
        assert waited["returned_because"] == "waiting_approval" and waited["user_id"] == "alice"
        for name, args in [
            ("get_session", {}), ("wait_for_session", {"timeout_seconds": 1}), ("approve_tool_call", {"tool_use_id": "e1"}),
            ("deny_tool_call", {"tool_use_id": "e1"}), ("cancel_session", {}), ("pause_session", {}),
        ]:  # fmt: skip
            refused = error_line(await bob.call_tool(name, {"session_id": session_id, **args}))
            assert f"no session {session_id!r}" in refused, (name, refused)
        with pytest.raises(Exception, match="no session"):
            await bob.read_resource(f"session://{session_id}/transcript")
        assert session_id not in {
            s["session_id"] for s in result(await bob.call_tool("list_sessions", {}))["sessions"]
        }
        # An operator sees and decides every session; the decision is theirs.
        assert session_id in {
            s["session_id"] for s in result(await olga.call_tool("list_sessions", {}))["sessions"]
        }
        result(await olga.call_tool("approve_tool_call", {"session_id": session_id, "tool_use_id": "e1"}))
        assert (
            result(await alice.call_tool("wait_for_session", {"session_id": session_id}))["status"]
            == "completed"
        )
    async with httpx2.AsyncClient() as http:
        for headers in ({}, {"Authorization": "Bearer wrong-token-000"}, {"Cookie": "agent_session=x"}):
            refused = await http.post(f"{api.url}/mcp", headers=headers, json={})
            assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer", (
                refused.text
            )


REPORT = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
NOTES = b"line one\nline two"
FALLBACK = "anthropic:claude-haiku-4-5"


async def test_http_start_session_takes_the_http_bodys_choices(
    api: ApiProcess, client: TemporalClient, fake_model: FakeModelServer
):
    """A typed answer, a fallback model, model settings, limits and an attachment, as
    `POST /v1/sessions` takes them: the model's requests carry them and the status has the output."""
    session_id = new_id()
    fake_model.script.set(
        session_id,
        [{"status": 401, "message": "invalid x-api-key"}, tool_use(FINAL_ANSWER, {"city": "Lima"}, id="f1")],
    )
    async with over_http(api, "alice") as mcp:
        started = result(
            await mcp.call_tool(
                "start_session",
                {
                    "goal": "which city?", "session_id": session_id, "output_schema": REPORT,
                    "fallback_models": [FALLBACK], "max_steps": 3, "temperature": 0.5, "stop_sequences": ["END"],
                    "attachments": [{"name": "notes.txt", "media_type": "text/plain", "data": base64.b64encode(NOTES).decode()}],
                },
            )
        )  # fmt: skip
        assert started["session_id"] == session_id
        waited = result(
            await mcp.call_tool("wait_for_session", {"session_id": session_id, "timeout_seconds": 60})
        )
    assert waited["status"] == "completed", waited
    assert waited["output"] == {"city": "Lima"}
    first, second = [r["body"] for r in fake_model.script.requests if r["session"] == session_id]
    assert first["model"] != FALLBACK.split(":")[1] and second["model"] == FALLBACK.split(":")[1]
    assert first["temperature"] == 0.5 and first["stop_sequences"] == ["END"]
    assert {"type": "text", "text": "[attached file notes.txt]\nline one\nline two"} in [
        {k: v for k, v in b.items() if k != "cache_control"} for b in first["messages"][0]["content"]
    ]
    assert FINAL_ANSWER in [t["name"] for t in first["tools"]]
    assert waited["limits"]["max_steps"] == 3 and waited["model_in_use"] == FALLBACK


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"output_schema": {"type": "objekt"}}, "not valid JSON Schema"),
        ({"output_schema": ["not", "an", "object"]}, "output_schema"),
        ({"fallback_models": ["nowhere:model-x"]}, "nowhere"),
        ({"attachments": [{"name": "a.txt", "media_type": "text/plain", "data": "%%% not base64"}]}, "not valid base64"),
        ({"max_steps": 0}, "max_steps"),
        ({"temperature": 1.5}, "temperature"),
    ],
)  # fmt: skip
async def test_http_start_session_refuses_bad_choices_in_one_line(
    arguments: dict[str, Any], says: str, api: ApiProcess, client: TemporalClient
):
    session_id = new_id()
    async with over_http(api, "alice") as mcp:
        refused = error_line(
            await mcp.call_tool("start_session", {"goal": "g", "session_id": session_id, **arguments})
        )
    assert says in refused, refused
    with pytest.raises(RPCError):  # nothing started
        await client.get_workflow_handle(session_id).describe()
