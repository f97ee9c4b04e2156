"""MCP tools in whole sessions: listed at start and recorded, called over stdio and over
streamable HTTP with the agent's approval rules, and a server killed mid-call giving the
model an error result instead of hanging the session."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest_asyncio
from temporalio.client import Client

from activities.mcp import McpActivities
from infra.definitions import McpServer
from tests.conftest import Harness, answer, model_activities, tool_use
from tests.support.mcp_servers import SLOW_STARTED
from tests.support.reliability import record
from tests.support.tools import TOOLS
from tests.test_mcp import ENV, STDIO, HttpServer, slow_call_started
from tests.test_watch import wait_for_status
from worker import build_worker
from workflows.agent import AgentWorkflow
from workflows.contract import AgentSpec, SessionHistory, SessionStatus

AREA = "MCP tool servers"
AGENT = AgentSpec(name="mcp-user", mcp_servers=["local", "remote"], approval={"remote__set_*": "always"})


@pytest_asyncio.fixture
async def mcp_harness(
    client: Client, fake_model, data_dir, tmp_path
) -> AsyncIterator[tuple[Harness, HttpServer]]:
    http = HttpServer(env={SLOW_STARTED: str(tmp_path / "slow-started")})
    mcp = McpActivities(
        {"local": McpServer(command=STDIO, env=ENV, timeout_seconds=5),
         "remote": McpServer(url=http.url, timeout_seconds=5)}
    )  # fmt: skip
    queue = f"test-{uuid.uuid4().hex[:8]}"
    worker = build_worker(client, TOOLS, queue=queue, model=model_activities(fake_model, data_dir), mcp=mcp)
    try:
        async with worker:
            yield Harness(client, fake_model, queue), http
    finally:
        await mcp.aclose()
        http.kill()


async def test_mcp_tools_over_stdio_and_http_with_approval(mcp_harness):
    harness, _ = mcp_harness
    handle = await harness.start(
        [tool_use("local__greet", {"name": "Ada"}, id="g1"), tool_use("remote__set_value", {"key": "k", "value": 7}, id="s1"),
         answer("Greeted and stored.")],
        agent=AGENT, tools=["get_time"],
    )  # fmt: skip
    snapshot = await wait_for_status(handle, "waiting_approval", timeout=60)
    assert [p.name for p in snapshot.pending_approvals] == ["remote__set_value"]
    await handle.execute_update(AgentWorkflow.approve_call, {"tool_use_id": "s1"})
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed"
    tools = [t["name"] for t in harness.requests(handle.id)[0]["body"]["tools"]]
    assert "local__greet" in tools and "remote__set_value" in tools and "get_time" in tools
    calls = {c.tool_use_id: c for c in (await handle.query(AgentWorkflow.history)).tool_calls}
    assert (
        calls["g1"].status == "done"
        and calls["g1"].output == "hello, Ada"
        and calls["g1"].policy == "read_only"
    )
    assert calls["s1"].status == "done" and calls["s1"].output == "k=7" and calls["s1"].approval == "required"
    record(AREA, "MCP tools over stdio and streamable HTTP in a session",
           "listed at start as SERVER__TOOL beside the Python tools, called as activities, approval by the agent's "
           "glob rule (`remote__set_*`)", {})  # fmt: skip


async def test_an_mcp_server_killed_mid_call_gives_an_error_result(mcp_harness, tmp_path):
    harness, http = mcp_harness
    started = tmp_path / "slow-started"
    handle = await harness.start(
        [tool_use("remote__slow", {"seconds": 30}, id="w1"), answer("The server went away.")], agent=AGENT
    )
    history: SessionHistory
    deadline = time.monotonic() + 60
    while True:
        history = await handle.query(AgentWorkflow.history)
        if any(c.tool_use_id == "w1" and c.status == "running" for c in history.tool_calls):
            break
        assert time.monotonic() < deadline
        await asyncio.sleep(0.2)
    await slow_call_started(started)  # the request is in the server now
    killed = time.monotonic()
    http.kill()
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    took = time.monotonic() - killed
    assert result.status == "completed" and result.answer == "The server went away."
    call = (await handle.query(AgentWorkflow.history)).tool_calls[0]
    # `slow` is read-only: retried on the dead server until the retry policy gives up.
    assert call.policy == "read_only" and call.status == "error" and call.is_error
    assert "cannot be reached" in (call.output or "") and "retries exhausted" in (call.output or "")
    sent = harness.requests(handle.id)[-1]["body"]["messages"][-1]["content"][0]
    assert sent["is_error"] is True
    assert took < 30
    record(AREA, "the HTTP MCP server killed (kill -9) during a call",
           "the read-only call is retried by its policy (5 attempts), then the model gets an error result; the "
           "session goes on and completes", {"kill to end of session": f"{took:.1f} s"})  # fmt: skip
