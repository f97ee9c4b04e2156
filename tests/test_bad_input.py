"""Bad input at every surface: the client (as a person runs it), workflow inputs and
update payloads, tool arguments. Each gets a clear error and changes nothing."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError, WorkflowUpdateFailedError

from devservers import temporal_server
from infra.datadir import read_effects
from tests.conftest import ROOT, Harness, answer, tool_use
from tests.support.reliability import record
from tests.test_loop import wait_for_status
from workflows.contract import Decision, SessionHistory, SessionStatus

AREA = "Bad input"


@dataclass
class Run:
    args: list[str]
    code: int
    out: str
    err: str


PARALLEL = asyncio.Semaphore(4)  # each client process is a Python start-up: keep the machine responsive


async def client(address: str, *args: str, queue: str = "bad-input", timeout: float = 90) -> Run:
    async with PARALLEL:
        return await _client(address, *args, queue=queue, timeout=timeout)


async def _client(address: str, *args: str, queue: str, timeout: float) -> Run:
    env = {**os.environ, "TEMPORAL_ADDRESS": address, "TEMPORAL_TASK_QUEUE": queue}
    env.pop("TEMPORAL_PROFILE", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "client.py", *args, cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"python client.py {' '.join(args)} did not finish in {timeout} s") from None
    return Run(list(args), await proc.wait(), out.decode(), err.decode())


def assert_one_line_error(run: Run, *needles: str) -> str:
    assert run.code == 1, run
    assert "Traceback" not in run.err and "Traceback" not in run.out, run.err
    lines = run.err.strip().splitlines()
    assert len(lines) == 1, run.err
    assert lines[0].startswith("error: "), lines
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# ---- the client ---------------------------------------------------------------------


async def test_client_mistakes_are_one_line_and_exit_1(harness: Harness, dev_server, tmp_path: Path):
    address = dev_server.address
    done = await harness.run([answer("done")])
    running = await harness.start(
        [tool_use("send_email", {"to": "a@example.com", "subject": "s", "body": "b"}, id="e1"), answer("ok")]
    )
    await wait_for_status(running, "waiting_approval")
    big_goal = tmp_path / "big-goal.txt"
    big_goal.write_text("g" * 200_001)
    closed_port = temporal_server.free_port()  # bound, then closed: nothing listens there
    cases = {
        "unknown session": (["status", "no-such-session-42"], ["no session 'no-such-session-42'"]),
        "finished session (approve)": (["approve", done.session_id, "t1"], [done.session_id, "ended"]),
        "finished session (pause)": (["pause", done.session_id], [done.session_id, "ended"]),
        "duplicate session id": (["start", "again", "--session", done.session_id], ["already exists"]),
        "malformed number (--max-steps abc)": (["start", "g", "--max-steps", "abc"], ["not a whole number"]),
        "malformed number (--cost-budget nan)": (["start", "g", "--cost-budget", "nan"], ["positive number"]),
        "malformed number (--timeout -5)": (["start", "g", "--timeout", "-5"], ["--timeout"]),
        "goal file that does not exist": (
            ["start", "--goal-file", str(tmp_path / "nope.txt")],
            ["cannot read the goal file", "No such file"],
        ),
        "goal over 200,000 characters": (["start", "--goal-file", str(big_goal)], ["goal", "200000"]),
        "blank goal": (["start", "   "], ["goal"]),
        "unknown tool_use_id": (
            ["approve", running.id, "toolu_nope"],
            ["rejected", "no tool call 'toolu_nope'"],
        ),
        "empty tool_use_id": (["deny", running.id, ""], ["tool_use_id"]),
    }
    runs = await asyncio.gather(
        *(client(address, *args, queue=harness.task_queue) for args, _ in cases.values())
    )
    unreachable = await client(f"127.0.0.1:{closed_port}", "status", "x")
    lines = {}
    for (name, (_, needles)), run in zip(cases.items(), runs, strict=False):
        lines[name] = assert_one_line_error(run, *needles)
    lines["Temporal unreachable"] = assert_one_line_error(
        unreachable, "cannot reach Temporal", str(closed_port)
    )
    # Nothing changed: the waiting call still waits, no duplicate was started.
    snapshot = await running.query("status", result_type=SessionStatus)
    assert [p.tool_use_id for p in snapshot.pending_approvals] == ["e1"]
    await running.execute_update("approve_call", Decision(tool_use_id="e1"), result_type=str)
    assert (await running.result()).status == "completed"
    for name, line in lines.items():
        for real, shown in (
            (done.session_id, "ID"),
            (running.id, "ID"),
            (str(tmp_path), "DIR"),
            (str(closed_port), "PORT"),
        ):
            line = line.replace(real, shown)
        record(AREA, f"client: {name}", f"exit 1, one line on stderr: `{line[:150]}`", {})


async def test_duplicate_session_id_does_not_touch_the_first(harness: Harness, dev_server):
    first = await harness.start([{**answer("first"), "delay": 1}])
    before = (await first.describe()).run_id
    run = await client(
        dev_server.address, "start", "second goal", "--session", first.id, queue=harness.task_queue
    )
    assert_one_line_error(run, "already exists", f"watch {first.id}")
    result = await first.result()
    assert result.answer == "first" and (await first.describe()).run_id == before
    assert len(harness.requests(first.id)) == 1


# ---- workflow inputs and update payloads -------------------------------------------------


async def test_workflow_input_that_does_not_validate_fails_at_once(harness: Harness):
    # As a start from the Temporal CLI or UI with hand-written JSON would.
    for bad, needle in (
        (({"goal": ""}), "goal"),
        ({"goal": "g", "limits": {"max_steps": "many"}}, "max_steps"),
    ):
        handle = await harness.client.start_workflow(
            "AgentWorkflow", bad, id=f"bad-{uuid.uuid4().hex[:8]}", task_queue=harness.task_queue
        )
        with pytest.raises(WorkflowFailureError) as caught:
            await asyncio.wait_for(handle.result(), 20)
        message = str(caught.value.cause)
        assert "validation error for SessionInput" in message and needle in message
        failed_tasks = [
            e
            async for e in handle.fetch_history_events()
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        ]
        assert failed_tasks == []  # failed once, not a workflow task retried forever
    record(
        AREA,
        "workflow input that does not validate (a start by hand with bad JSON)",
        "the workflow fails at once with pydantic's message naming the field; no task retried",
        {},
    )


async def test_bad_update_payloads_are_rejected_and_change_nothing(harness: Harness):
    handle = await harness.start(
        [tool_use("send_email", {"to": "a@example.com", "subject": "s", "body": "b"}, id="e1"), answer("ok")]
    )
    await wait_for_status(handle, "waiting_approval")
    before = (await handle.query("history", result_type=SessionHistory)).model_dump_json()
    payloads = [
        {"tool_use_id": ""},
        {"wrong": 1},
        "not an object",
        {"tool_use_id": "x" * 300},
        {"tool_use_id": 7},
    ]
    reasons = []
    for payload in payloads:
        with pytest.raises(WorkflowUpdateFailedError) as caught:
            await handle.execute_update("approve_call", payload, result_type=str)
        reasons.append(str(caught.value.cause))
    assert all("validation error for Decision" in r for r in reasons), reasons
    assert "tool_use_id" in reasons[0] and "at least 1 character" in reasons[0]
    await handle.signal("approve", {"wrong": 1})  # a bad signal is dropped
    await asyncio.sleep(0.5)
    assert (await handle.query("history", result_type=SessionHistory)).model_dump_json() == before
    accepted = [
        e
        async for e in handle.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    ]
    assert accepted == []
    await handle.execute_update("approve_call", Decision(tool_use_id="e1"), result_type=str)
    assert (await handle.result()).status == "completed"
    record(
        AREA,
        "update payloads of the wrong shape (empty, missing, extra, wrong type, too long)",
        "rejected with pydantic's message naming the field; nothing recorded; the session goes on",
        {},
    )


# ---- tool arguments ------------------------------------------------------------------------

TOOL_CASES = {
    "wrong type": ({"title": 42, "text": "x"}, ["title", "string"]),
    "missing": ({"title": "t"}, ["text", "Field required"]),
    "extra": ({"title": "t", "text": "x", "owner": "mallory"}, ["owner", "Extra inputs are not permitted"]),
    "huge": ({"title": "t", "text": "z" * 1_500_000}, ["text", "at most 100000 characters"]),
}


@pytest.mark.parametrize("case", list(TOOL_CASES), ids=lambda c: c.replace(" ", "-"))
async def test_bad_tool_arguments_go_back_to_the_model(harness: Harness, case: str):
    arguments, needles = TOOL_CASES[case]
    turn = {"content": [{"type": "tool_use", "id": "n1", "name": "save_note", "input": arguments}]}
    handle = await harness.start([turn, answer("ok")])
    result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "completed", result
    sent = harness.requests(handle.id)[1]["body"]["messages"][-1]["content"][0]
    assert sent["is_error"] is True and sent["content"].startswith("invalid input for save_note")
    for needle in needles:
        assert needle in sent["content"], sent["content"][:500]
    assert len(sent["content"]) < 2000  # the message does not echo a huge value back
    assert [e for e in read_effects() if e["session_id"] == handle.id] == []
    record(
        AREA,
        f"tool arguments: {case}",
        f"an is_error result naming the field; the tool did not run: `{sent['content'][:120]}`",
        {},
    )
