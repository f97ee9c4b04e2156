"""Reads that cost nothing: `status`, `history` and `state` come from a replay of the
session's history in the reading process (sessions/reading.py), never from a query, and
answer what the query answers."""

from __future__ import annotations

import asyncio

from temporalio.client import Client

from sessions import control, reading
from tests.conftest import Harness, answer, tool_use
from tests.test_watch import EMAIL
from workflows.agent import AgentWorkflow
from workflows.contract import Decision, SessionStatus

AREA = "Free reads"


async def read_until(client: Client, session_id: str, status: str, timeout: float = 30) -> SessionStatus:
    """The session's status once it is `status`, read without a query."""
    deadline = asyncio.get_running_loop().time() + timeout
    while (found := await control.status(client, session_id)).status != status:
        assert asyncio.get_running_loop().time() < deadline, f"still {found.status}, wanted {status}"
        await asyncio.sleep(0.1)
    return found


async def test_a_read_answers_what_the_query_answers(harness: Harness):
    handle = await harness.start(
        [tool_use("get_time", {"timezone_name": "UTC"}, id="t1"), tool_use("send_email", EMAIL, id="e1"),
         answer("Sent.")],
    )  # fmt: skip
    await read_until(harness.client, handle.id, "waiting_approval")
    assert await control.status(harness.client, handle.id) == await handle.query(AgentWorkflow.status)
    assert await control.state(harness.client, handle.id) == await handle.query(AgentWorkflow.state)
    history = await control.history(harness.client, handle.id)
    assert history == await handle.query(AgentWorkflow.history)
    await handle.execute_update(AgentWorkflow.approve_call, Decision(tool_use_id="e1"))
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert (await control.history(harness.client, handle.id)).status == result
