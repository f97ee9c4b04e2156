"""Deciders cannot be forged. `timeout` is what a session records for a call no one decided
in time: no caller records it, by update or by signal, as `decided_by` or as
`on_behalf_of`, and no user of the service may be named so. The command line records who
ran it (`cli:<login>`); `--as USER` is recorded as `on_behalf_of`, beside it."""

from __future__ import annotations

import asyncio
import getpass
import os
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError

from sessions import control
from tests.conftest import ROOT, Harness, answer, tool_use
from tests.support.procs import wait_for_status
from tests.test_agents import cli
from tests.test_watch import EMAIL
from workflows.agent import AgentWorkflow
from workflows.contract import CancelRequest, Decision

pytestmark = pytest.mark.xdist_group("security-deciders")


async def waiting(harness: Harness) -> WorkflowHandle:
    session_id = f"dec-{uuid.uuid4().hex[:10]}"
    handle = await harness.start(
        [tool_use("send_email", EMAIL, id="e1"), answer("done")], session_id=session_id
    )
    await wait_for_status(handle, "waiting_approval")
    return handle


async def call_e1(harness: Harness, session_id: str) -> dict:
    found = control.history_document(await control.history(harness.client, session_id))
    return next(c for c in found["tool_calls"] if c["tool_use_id"] == "e1")


async def test_no_caller_records_the_timeout_decider(harness: Harness):
    handle = await waiting(harness)
    forged = [
        (AgentWorkflow.deny_call, Decision(tool_use_id="e1", decided_by="timeout")),
        (AgentWorkflow.approve_call, Decision(tool_use_id="e1", decided_by="timeout")),
        (AgentWorkflow.deny_call, Decision(tool_use_id="e1", decided_by="olga", on_behalf_of="timeout")),
        (AgentWorkflow.cancel_session, CancelRequest(decided_by="timeout")),
    ]
    for update, payload in forged:
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(update, payload)
        assert "reserved" in str(refused.value.cause), refused.value.cause
    # The same as raw signals: ignored, the call still waits.
    await handle.signal(AgentWorkflow.deny, Decision(tool_use_id="e1", decided_by="timeout"))
    await handle.signal(AgentWorkflow.cancel, CancelRequest(decided_by="timeout"))
    await handle.signal(AgentWorkflow.pause)  # handled after the two before it
    await wait_for_status(handle, "paused")
    call = await call_e1(harness, handle.id)
    assert call["status"] == "waiting_approval" and call["decided_by"] is None, call
    await handle.execute_update(AgentWorkflow.resume_session)
    # The command line: who ran it, and for whom.
    code, _, err = await cli(harness, "cancel", handle.id, "--as", "timeout")
    assert code == 1 and "reserved" in err and len(err.strip().splitlines()) == 1, err
    code, _, err = await cli(harness, "deny", handle.id, "e1", "--as", "bob", "--reason", "not now")
    assert code == 0, err
    call = await call_e1(harness, handle.id)
    assert (call["decided_by"], call.get("on_behalf_of")) == (f"cli:{getpass.getuser()}", "bob"), call


async def test_a_user_may_not_be_named_like_a_decider_the_session_records(tmp_path: Path):
    async def refused(name: str) -> None:
        users = tmp_path / f"users-{len(name)}.toml"
        users.write_text(f'[users."{name}"]\ntoken = "a-token-of-{name}"\n')
        env = {**os.environ, "AGENT_API_USERS": str(users), "AGENT_DATA_DIR": str(tmp_path)}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "api.py", "--port", "1", cwd=ROOT, env=env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await asyncio.wait_for(process.communicate(), 60)
        lines = err.decode().strip().splitlines()
        assert process.returncode == 1 and len(lines) == 1 and f"user name {name!r}" in lines[0], lines

    await asyncio.gather(refused("timeout"), refused("olga:admin"))
