"""Control actions as a person uses them: approving with an edited input (checked against
the tool's recorded schema before anything changes), who decided, and what a session
that cannot start or cannot go on shows."""

from __future__ import annotations

import asyncio
import json
import uuid

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.tools import ToolActivities
from infra.datadir import read_effects
from sessions import control
from tests.conftest import Harness, answer, model_activities, tool_use
from tests.support.reliability import record
from tests.support.tools import TOOLS
from tests.test_races import state
from tests.test_watch import EMAIL, run_cli, wait_for_status
from worker import build_worker
from workflows.agent import AgentWorkflow
from workflows.contract import SessionHistory, SessionInput, SessionStatus

AREA = "Control"


async def test_approve_with_an_edited_input(harness: Harness):
    handle = await harness.start([tool_use("send_email", EMAIL, id="e1"), answer("Sent.")])
    await wait_for_status(handle, "waiting_approval")
    before = await handle.query(AgentWorkflow.history)

    # An edit that breaks the tool's schema: one line naming the field, nothing changes.
    code, out, err = await run_cli(
        harness, "approve", handle.id, "e1", "--input", json.dumps({**EMAIL, "to": "nobody"})
    )
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "invalid input for send_email: to:" in err and "does not match" in err
    code, _, err = await run_cli(harness, "approve", handle.id, "e1", "--input", json.dumps({"to": "a@b.co"}))
    assert code == 1 and "'subject' is a required property" in err, err
    after = await handle.query(AgentWorkflow.history)
    # Nothing changes but the count of billable actions: each refused update is one.
    assert state(after) == state(before) and after.temporal_actions == before.temporal_actions + 2

    edited = {**EMAIL, "to": "boss@example.com"}
    code, out, err = await run_cli(
        harness, "approve", handle.id, "e1", "--input", json.dumps(edited), "--as", "alice"
    )
    assert code == 0, err
    assert out.strip() == "approved send_email (e1) with an edited input"
    result: SessionStatus = await handle.result()
    assert result.status == "completed"

    sent = [e for e in read_effects() if e["session_id"] == handle.id and e["tool"] == "send_email"]
    assert [e["input"]["to"] for e in sent] == ["boss@example.com"]
    history: SessionHistory = await handle.query(AgentWorkflow.history)
    call = history.tool_calls[0]
    assert call.input == EMAIL and call.approved_input == edited
    assert (call.decided_by, call.on_behalf_of) == (control.cli_user(), "alice")  # who ran it, and for whom
    assert call.status == "done"
    # The model is told what the tool really ran with.
    tool_result = harness.requests(handle.id)[-1]["body"]["messages"][-1]["content"][0]
    text = (
        tool_result["content"]
        if isinstance(tool_result["content"], str)
        else tool_result["content"][0]["text"]
    )
    assert "a person edited the input" in text and "boss@example.com" in text

    code, out, _ = await run_cli(harness, "history", handle.id)
    assert (
        code == 0
        and "edited before approval" in out
        and "boss@example.com" in out
        and f"by {control.cli_user()} for alice" in out
    )
    code, out, _ = await run_cli(harness, "history", handle.id, "--json")
    document = json.loads(out)
    assert document["tool_calls"][0]["input"]["to"] == "team@example.com"
    assert document["tool_calls"][0]["approved_input"]["to"] == "boss@example.com"
    record(AREA, "approve with an edited input (`approve ID TOOL_USE_ID --input JSON`)",
           "a schema-breaking edit is refused with one line naming the field and changes nothing; the valid "
           "edit is recorded beside the original, the tool runs with it, the model is told",
           {"refused edits": 2, "effects": len(sent)})  # fmt: skip


async def test_deciders_are_recorded_and_a_bare_signal_has_none(harness: Harness):
    handle = await harness.start([tool_use("send_email", EMAIL, id="e1"), answer("Not sent.")])
    await wait_for_status(handle, "waiting_approval")
    code, _, err = await run_cli(harness, "deny", handle.id, "e1", "--reason", "no")
    assert code == 0, err
    await handle.result()
    call = (await handle.query(AgentWorkflow.history)).tool_calls[0]
    assert call.status == "denied" and call.decided_by is not None and call.decided_by.startswith("cli:")

    other = await harness.start([tool_use("send_email", EMAIL, id="e1"), answer("Sent.")])
    await wait_for_status(other, "waiting_approval")
    # The JSON body any client sends; the workflow reads it as a Decision.
    await other.signal(AgentWorkflow.approve, {"tool_use_id": "e1"})  # pyright: ignore[reportCallIssue, reportArgumentType]
    await other.result()
    call = (await other.query(AgentWorkflow.history)).tool_calls[0]
    assert call.status == "done" and call.decided_by is None


async def test_a_worker_that_cannot_list_its_tools_fails_the_start(client: Client, fake_model, data_dir):
    class Broken(ToolActivities):
        @activity.defn(name="describe_tools")
        async def describe_tools(self):  # type: ignore[override]
            raise RuntimeError("the tool registry is unreachable")

    queue = f"test-{uuid.uuid4().hex[:8]}"
    tools = Broken(TOOLS)
    worker = Worker(
        client, task_queue=queue, workflows=[AgentWorkflow], workflow_runner=UnsandboxedWorkflowRunner(),
        activities=[model_activities(fake_model, data_dir).call_model, tools.describe_tools, tools.check_tool_input, tools.run_tool],
    )  # fmt: skip
    async with worker:
        handle = await client.start_workflow(
            AgentWorkflow.run,
            SessionInput(goal="hello"),
            id=f"test-{uuid.uuid4().hex[:10]}",
            task_queue=queue,
        )
        result: SessionStatus = await asyncio.wait_for(handle.result(), timeout=60)
    assert result.status == "failed"
    assert result.error is not None and result.error.startswith("cannot start:")
    assert "the tool registry is unreachable" in result.error and "after 3 attempts" in result.error
    record(AREA, "the worker cannot list its tools at start",
           "the session fails with the reason after 3 attempts instead of staying `running`",
           {"error": result.error})  # fmt: skip


@workflow.defn(name="AgentWorkflow")
class _LoopWithABug(AgentWorkflow):
    """The session workflow with a bug in its loop: every workflow task fails."""

    @workflow.run
    async def run(self, input: SessionInput) -> SessionStatus:
        return await super().run(input)

    async def _loop(self) -> None:
        raise RuntimeError("a bug in the loop: division by zero")


async def test_a_session_whose_workflow_task_keeps_failing_is_stuck_until_a_fixed_worker_runs_it(
    harness: Harness, client: Client, fake_model, data_dir
):
    session_id = f"test-{uuid.uuid4().hex[:10]}"
    harness.script(session_id, [answer("Done after the fix.")])
    broken = Worker(
        client, task_queue=harness.task_queue + "-b", workflows=[_LoopWithABug],
        workflow_runner=UnsandboxedWorkflowRunner(),
        activities=[model_activities(fake_model, data_dir).call_model, *ToolActivities(TOOLS).activities()],
    )  # fmt: skip
    harness.task_queue += "-b"  # the CLI talks to the broken worker's queue
    async with broken:
        handle = await client.start_workflow(
            AgentWorkflow.run, SessionInput(goal="hello"), id=session_id, task_queue=harness.task_queue
        )
        snapshot = await _stuck(harness, session_id)
        assert snapshot["stuck"]["message"].startswith("a bug in the loop: division by zero")
        assert snapshot["stuck"]["attempts"] >= 2 and snapshot["stuck"]["since"]
        code, out, _ = await run_cli(harness, "status", session_id)
        assert code == 0 and "stuck" in out and "a bug in the loop" in out and "redeploy" in out
        code, out, _ = await run_cli(harness, "list", "--json")
        rows = {json.loads(line)["session_id"]: json.loads(line) for line in out.splitlines()}
        assert rows[session_id]["status"] == "stuck"
        watched = await _watch_until(harness, session_id, "stuck:", timeout=60)
        assert "a bug in the loop" in watched
    # The fixed worker (the real workflow) carries the session on from its history.
    fixed = build_worker(
        client, TOOLS, queue=harness.task_queue, model=model_activities(fake_model, data_dir)
    )
    async with fixed:
        result: SessionStatus = await asyncio.wait_for(handle.result(), timeout=90)
    assert result.status == "completed" and result.answer == "Done after the fix."
    record(AREA, "a bug fails every workflow task of a session",
           "`status`, `list` and `watch` show `stuck` with the task's error and since when; a fixed worker "
           "carries the session on to the end",
           {"message": snapshot["stuck"]["message"]})  # fmt: skip


async def _watch_until(harness: Harness, session_id: str, needle: str, timeout: float = 30) -> str:
    """What `watch` printed until `needle` appeared; the watch is then ended by its PID."""
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import ROOT
    from tests.test_watch import cli_env

    process = await asyncio.create_subprocess_exec(
        sys.executable, "client.py", "watch", session_id, "--no-prompt", cwd=ROOT, env=cli_env(harness),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    seen = ""
    try:
        async with asyncio.timeout(timeout):
            while needle not in seen:
                assert process.stdout is not None  # stdout=PIPE
                line = await process.stdout.readline()
                if not line:
                    break
                seen += line.decode()
    finally:
        os.kill(process.pid, signal.SIGKILL)
        await process.wait()
    assert needle in seen, seen
    return seen


async def _stuck(harness: Harness, session_id: str, timeout: float = 60) -> dict:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        code, out, err = await run_cli(harness, "status", session_id, "--json")
        assert code == 0, err
        snapshot = json.loads(out)
        if snapshot["status"] == "stuck":
            return snapshot
        assert asyncio.get_running_loop().time() < deadline, f"never stuck: {snapshot}"
        await asyncio.sleep(0.5)
