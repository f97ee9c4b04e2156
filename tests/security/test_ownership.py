"""A user reaches only their own sessions, at every door: the HTTP API, MCP at `/mcp`, A2A at
`/a2a` and the command line. No start takes an id of the shape the system makes for a
session's sub-agents, notifications, forks, memories or scheduled runs; a taken id is a
conflict whoever took it; a session's owner is read from its current run; an MCP session
answers only the user who opened it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from typing import Any

import httpx2 as httpx
import pytest
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy

from devservers.fakemodel import FakeModelServer
from sessions import control
from tests.conftest import ROOT, answer
from tests.support.api import ApiProcess, module_api
from tests.test_a2a import agent, message, send
from tests.test_mcp_server import error_line
from tests.test_mcp_server_http import over_http
from workflows import ids
from workflows.agent import AgentWorkflow

# One `python api.py` for the module: its tests run in one xdist process.
pytestmark = pytest.mark.xdist_group("security-ownership")

RESERVED = ["nightly.sub-1", "nightly.notify-2", "nightly.fork-0a1b2c", "nightly-2026-12-06T01:00:00Z"]
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


api = module_api("ownership")


def new_id() -> str:
    return f"own-{uuid.uuid4().hex[:10]}"


async def cli(api: ApiProcess, *args: str) -> tuple[int, str, str]:
    """`python client.py ARGS` against the service's Temporal and task queue."""
    env = {
        **os.environ,
        **{k: api.env[k] for k in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_TASK_QUEUE")},
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "client.py", *args, cwd=ROOT, env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return await process.wait(), out.decode(), err.decode()


def one_line_error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    text = response.json()["error"]["message"]
    assert text and "\n" not in text, text
    return text


async def chat(http: httpx.AsyncClient, fake_model: FakeModelServer, session_id: str) -> None:
    """A chat session that answered and waits for the next message."""
    fake_model.script.set(session_id, [answer("hello"), answer("again")])
    started = await http.post("/v1/sessions", json={"goal": "hi", "session_id": session_id, "chat": True})
    assert started.status_code == 201, started.text


async def test_no_start_takes_an_id_the_system_makes(
    api: ApiProcess, client: Client, fake_model: FakeModelServer
):
    # The ids the system makes have the shapes no start may take.
    assert all(
        ids.is_reserved(i) for i in (ids.subagent("s", 3), ids.notification("s", 1), ids.fork("s", "abcdef"))
    )
    assert ids.is_reserved(ids.memory("alice", None)) and not ids.is_reserved("session-0a1b2c3d4e5f")
    async with api.client("alice") as alice, over_http(api, "alice") as mcp, agent(api, "alice") as a2a:
        for session_id in RESERVED:
            refused = one_line_error(
                await alice.post("/v1/sessions", json={"goal": "x", "session_id": session_id}), 422
            )
            assert "reserved" in refused, refused
            refused = error_line(
                await mcp.call_tool("start_session", {"goal": "x", "session_id": session_id})
            )
            assert "reserved" in refused, refused
            with pytest.raises(Exception, match="reserved"):
                await send(a2a, message(text="x", context_id=session_id))
        code, _, err = await cli(api, "start", "x", "--session", RESERVED[0])
        assert code == 1 and "reserved" in err and len(err.strip().splitlines()) == 1, err
        for session_id in RESERVED:
            with pytest.raises(Exception, match="not found"):
                await client.get_workflow_handle(session_id).describe()
        # A fork's own id is the system's: the command line's fork still takes it.
        source = new_id()
        fake_model.script.set(source, [answer("one")])
        assert (await alice.post("/v1/sessions", json={"goal": "x", "session_id": source})).status_code == 201
        await client.get_workflow_handle(source).result()
        code, out, err = await cli(api, "fork", source, "--at-step", "1", "--message", "more")
        assert code == 0 and out.strip().startswith(f"{source}.fork-"), err


async def test_a_taken_id_is_a_conflict_whoever_took_it(api: ApiProcess, fake_model: FakeModelServer):
    session_id = new_id()
    async with api.client("alice") as alice, api.client("bob") as bob, api.client("olga") as olga:
        await chat(alice, fake_model, session_id)
        for who in (alice, bob, olga):
            refused = one_line_error(
                await who.post("/v1/sessions", json={"goal": "x", "session_id": session_id}), 409
            )
            assert "already exists" in refused, refused
        one_line_error(await bob.get(f"/v1/sessions/{session_id}"), 404)  # it is still not bob's
    async with over_http(api, "bob") as mcp:
        refused = error_line(await mcp.call_tool("start_session", {"goal": "x", "session_id": session_id}))
        assert "already exists" in refused, refused


async def test_the_owner_is_read_from_the_current_run(
    api: ApiProcess, client: Client, fake_model: FakeModelServer
):
    session_id = new_id()
    async with api.client("alice") as alice, api.client("bob") as bob:
        await chat(alice, fake_model, session_id)
        assert (
            await alice.post(f"/v1/sessions/{session_id}/pause")
        ).status_code == 200  # alice's, as remembered
        # The id's workflow is replaced by a run of bob's (another program on the namespace).
        first, _ = await control.start_input(client, client.get_workflow_handle(session_id))
        await client.start_workflow(
            AgentWorkflow.run, first.model_copy(update={"user_id": "bob"}), id=session_id,
            task_queue=api.env["TEMPORAL_TASK_QUEUE"], id_conflict_policy=WorkflowIDConflictPolicy.TERMINATE_EXISTING,
        )  # fmt: skip
        one_line_error(await alice.post(f"/v1/sessions/{session_id}/cancel"), 404)
        one_line_error(await alice.post(f"/v1/sessions/{session_id}/messages", json={"text": "hi"}), 404)
        assert (await bob.post(f"/v1/sessions/{session_id}/pause")).status_code == 200


async def mcp_post(http: httpx.AsyncClient, body: dict[str, Any], **headers: str) -> httpx.Response:
    return await http.post("/mcp", json=body, headers={**MCP_HEADERS, **headers})


async def test_an_mcp_session_answers_only_the_user_who_opened_it(api: ApiProcess):
    initialize = {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }  # fmt: skip
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    async with api.client("alice") as alice, api.client("bob") as bob, api.client("olga") as olga:
        opened = await mcp_post(alice, initialize)
        assert opened.status_code == 200, opened.text
        mcp_session = opened.headers["mcp-session-id"]
        ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await mcp_post(alice, ready, **{"mcp-session-id": mcp_session})).status_code == 202
        session = {"mcp-session-id": mcp_session, "mcp-protocol-version": "2025-11-25"}
        for other in (bob, olga):  # an operator too: the session is the connection of the user who opened it
            assert (await mcp_post(other, listing, **session)).status_code == 404
            assert (await other.delete("/mcp", headers=session)).status_code == 404
        assert (await mcp_post(alice, listing, **session)).status_code == 200
        assert (await alice.delete("/mcp", headers=session)).status_code == 200
        assert (await mcp_post(alice, listing, **session)).status_code == 404
