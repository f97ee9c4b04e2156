"""Agents as definitions: an agent from agents.toml, per-agent approval rules, sub-agents
(budgets charged to the parent, approvals decided through it, pause and cancel passed
on), schedules, and forks."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from temporalio.client import WorkflowExecutionStatus, WorkflowHandle

from activities.wire import Message, TextBlock, ToolResultBlock, ToolSpec, ToolUseBlock, Usage
from infra.datadir import read_effects
from sessions import control
from sessions.fork import forked_state
from tests.conftest import ROOT, Harness, answer, tool_use
from tests.support.reliability import record
from tests.test_watch import EMAIL, cli_env, wait_for_status
from workflows import ids
from workflows.agent import AgentWorkflow
from workflows.contract import SessionHistory, SessionStatus
from workflows.records import (
    OutputStreak,
    PendingApproval,
    PendingMessage,
    ReceivedEvent,
    ToolCallRecord,
    TraceTurn,
)
from workflows.state import Ending, SessionState

AREA = "Agents"
NOTE = {"title": "t", "text": "x"}

TEAM = """
[agents.trusting]
description = "Emails without asking; asks before every note"
tools = ["send_email", "save_note"]
[agents.trusting.approval]
send_email = "never"
"save_*" = "always"

[agents.lead]
description = "Hands work to a helper"
tools = ["get_time"]
subagents = ["helper"]
token_budget = 50000

[agents.helper]
description = "Sends the emails it is asked to"
model = "anthropic:claude-haiku-4-5"
tools = ["send_email", "wait_for_cancel"]
[agents.helper.approval]
send_email = "always"
"""


async def cli(
    harness: Harness, *args: str, definitions: Path | None = None, timeout: float = 60
) -> tuple[int, str, str]:
    env = cli_env(harness)
    if definitions is not None:
        env["AGENT_DEFINITIONS"] = str(definitions)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "client.py", *args, cwd=ROOT, env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    return await process.wait(), out.decode(), err.decode()


def team(tmp_path: Path) -> Path:
    path = tmp_path / "agents.toml"
    path.write_text(TEAM)
    return path


async def test_an_agent_from_agents_toml(harness: Harness):
    session = f"test-{uuid.uuid4().hex[:10]}"
    harness.script(
        session,
        [tool_use("save_note", NOTE, id="n1"), tool_use("send_email", EMAIL, id="e1"), answer("Done.")],
    )
    code, out, err = await cli(
        harness, "start", "note and email", "--agent", "assistant", "--session", session
    )
    assert code == 0, err
    handle = harness.client.get_workflow_handle_for(AgentWorkflow.run, session)
    await wait_for_status(handle, "waiting_approval")
    code, out, err = await cli(harness, "status", session, "--json")
    snapshot = json.loads(out)
    assert snapshot["agent"] == "assistant" and snapshot["model"] == "anthropic:claude-sonnet-4-6"
    assert snapshot["limits"]["max_steps"] == 30
    code, _, err = await cli(harness, "approve", session, "e1")
    assert code == 0, err
    result: SessionStatus = await handle.result()
    assert result.status == "completed" and result.agent == "assistant"
    request = harness.requests(session)[0]["body"]
    assert [t["name"] for t in request["tools"]] == [
        "get_time",
        "save_note",
        "send_email",
        "agent__researcher",
    ]
    assert request["model"] == "claude-sonnet-4-6"
    calls = {c.tool_use_id: c for c in (await handle.query(AgentWorkflow.history)).tool_calls}
    assert calls["n1"].approval == "auto" and calls["e1"].approval == "required"
    code, out, _ = await cli(harness, "agents", "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [row["name"] for row in rows] == ["assistant", "researcher", "note-keeper"]
    # Every setting a start takes from an agent is listed, None or empty where it sets none.
    assert {"fallback_models", "approval_timeout", "notify", "typed_answer", "thinking_budget", "temperature",
            "top_p", "stop_sequences", "tool_choice"} <= set(rows[0])  # fmt: skip
    assert (rows[0]["fallback_models"], rows[0]["thinking_budget"], rows[0]["typed_answer"]) == (
        [],
        None,
        False,
    )


async def test_approval_rules_per_agent_and_tool(harness: Harness, tmp_path: Path):
    session = f"test-{uuid.uuid4().hex[:10]}"
    harness.script(
        session,
        [tool_use("send_email", EMAIL, id="e1"), tool_use("save_note", NOTE, id="n1"), answer("Done.")],
    )
    code, _, err = await cli(
        harness, "start", "go", "--agent", "trusting", "--session", session, definitions=team(tmp_path)
    )
    assert code == 0, err
    handle = harness.client.get_workflow_handle_for(AgentWorkflow.run, session)
    snapshot = await wait_for_status(handle, "waiting_approval")
    # send_email (the tool's own rule: approval) ran without a person: "never"
    assert [p.name for p in snapshot.pending_approvals] == ["save_note"]
    assert [e["tool"] for e in read_effects() if e["session_id"] == session] == ["send_email"]
    # The JSON body any client sends; the workflow reads it as a Decision.
    await handle.execute_update(AgentWorkflow.approve_call, {"tool_use_id": "n1"})  # pyright: ignore[reportCallIssue, reportArgumentType]
    await handle.result()
    calls = {c.tool_use_id: c for c in (await handle.query(AgentWorkflow.history)).tool_calls}
    assert (calls["e1"].approval, calls["e1"].requires_approval) == ("auto", False)
    assert (calls["n1"].approval, calls["n1"].requires_approval) == ("required", True)
    record(
        AREA,
        "approval rules per agent and tool (`never` for send_email, `always` for save_*)",
        "send_email ran with no wait, save_note waited; each call records approval auto/required",
        {},
    )


async def test_a_subagent_is_charged_to_its_parent_and_decided_through_it(harness: Harness, tmp_path: Path):
    parent = f"test-{uuid.uuid4().hex[:10]}"
    child = f"{parent}.sub-1"
    harness.script(parent, [
        tool_use("agent__helper", {"task": "email the team"}, id="h1") | {"usage": {"input_tokens": 100, "output_tokens": 10}},
        answer("The helper sent it.", usage={"input_tokens": 100, "output_tokens": 10}),
    ])  # fmt: skip
    harness.script(child, [
        tool_use("send_email", EMAIL, id="e9") | {"usage": {"input_tokens": 1000, "output_tokens": 20}},
        answer("Sent to the team.", usage={"input_tokens": 1000, "output_tokens": 20}),
    ])  # fmt: skip
    code, _, err = await cli(
        harness, "start", "get it sent", "--agent", "lead", "--session", parent, definitions=team(tmp_path)
    )
    assert code == 0, err
    handle = harness.client.get_workflow_handle_for(AgentWorkflow.run, parent)
    snapshot = await wait_for_status(handle, "waiting_approval")
    [pending] = snapshot.pending_approvals
    assert (pending.tool_use_id, pending.name, pending.session_id) == ("e9", "send_email", child)

    # A refused decision routed to the child still exits 1 with the child's reason.
    code, _, err = await cli(harness, "approve", parent, "e9", "--input", json.dumps({**EMAIL, "to": "x"}))
    assert code == 1 and "rejected: invalid input for send_email: to:" in err, err
    code, out, err = await cli(harness, "approve", parent, "e9", "--as", "carol")
    assert code == 0 and "approved send_email (e9)" in out, err
    result: SessionStatus = await handle.result()
    assert result.status == "completed" and result.answer == "The helper sent it."
    child_status: SessionStatus = await harness.client.get_workflow_handle_for(
        AgentWorkflow.run, child
    ).query(AgentWorkflow.status)
    assert child_status.parent_session_id == parent and child_status.agent == "helper"
    assert child_status.usage.total() > 0
    own = sum(t.usage.total() for t in (await handle.query(AgentWorkflow.history)).trace)
    assert result.usage.total() == own + child_status.usage.total()
    call = (await handle.query(AgentWorkflow.history)).tool_calls[0]
    assert call.child_session_id == child and call.output == "Sent to the team."
    assert child_status.limits.token_budget <= 50_000
    decided = (
        await harness.client.get_workflow_handle_for(AgentWorkflow.run, child).query(AgentWorkflow.history)
    ).tool_calls[0]
    assert (decided.decided_by, decided.on_behalf_of) == (control.cli_user(), "carol")
    record(
        AREA,
        "a sub-agent (child session PARENT.sub-1) whose email needs approval",
        "its pending approval shows in the parent's status and `approve PARENT ID` decides it in the child; "
        "the child's tokens are added to the parent's; its answer is the tool result",
        {"parent tokens": result.usage.total(), "child tokens": child_status.usage.total()},
    )


async def test_pause_and_cancel_of_the_parent_reach_the_subagent(harness: Harness, tmp_path: Path):
    parent = f"test-{uuid.uuid4().hex[:10]}"
    child = f"{parent}.sub-1"
    harness.script(parent, [tool_use("agent__helper", {"task": "wait"}, id="h1"), answer("never")])
    harness.script(child, [tool_use("wait_for_cancel", {"seconds": 60}, id="w1"), answer("never")])
    code, _, err = await cli(
        harness, "start", "wait", "--agent", "lead", "--session", parent, definitions=team(tmp_path)
    )
    assert code == 0, err
    handle = harness.client.get_workflow_handle_for(AgentWorkflow.run, parent)
    child_handle = harness.client.get_workflow_handle_for(AgentWorkflow.run, child)
    await _until(lambda: _call_running(child_handle, "w1"))
    assert await handle.execute_update(AgentWorkflow.pause_session) == "paused"
    await wait_for_status(child_handle, "paused")
    assert await handle.execute_update(AgentWorkflow.resume_session) == "resumed"
    await wait_for_status(child_handle, "running")
    code, _, err = await cli(harness, "cancel", parent, "--reason", "enough")
    assert code == 0, err
    assert (await handle.result()).status == "cancelled"
    child_result: SessionStatus = await asyncio.wait_for(child_handle.result(), 30)
    assert child_result.status == "cancelled"
    described = await child_handle.describe()
    assert described.status == WorkflowExecutionStatus.COMPLETED


async def test_fork_at_step_2_takes_another_path(harness: Harness):
    source = f"test-{uuid.uuid4().hex[:10]}"
    harness.script(
        source, [tool_use("save_note", NOTE, id="n1"), tool_use("get_time", {}, id="t1"), answer("original")]
    )
    original = await harness.run(None, session_id=source)
    assert original.status == "completed" and original.steps == 3
    before = (
        await harness.client.get_workflow_handle_for(AgentWorkflow.run, source).query(AgentWorkflow.history)
    ).model_dump_json()

    fork = f"{source}-fork"
    harness.script(fork, [answer("the other path")])
    code, out, err = await cli(
        harness, "fork", source, "--at-step", "2", "--session", fork, "--message", "now say it differently"
    )
    assert code == 0 and out.strip() == fork, err
    handle = harness.client.get_workflow_handle_for(AgentWorkflow.run, fork)
    result: SessionStatus = await handle.result()
    assert result.status == "completed" and result.answer == "the other path" and result.steps == 3
    assert result.forked_from is not None and (result.forked_from.session_id, result.forked_from.step) == (
        source,
        2,
    )
    sent = harness.requests(fork)[0]["body"]["messages"]
    assert sent[-1]["role"] == "user" and sent[-1]["content"][-1]["text"] == "now say it differently"
    assert [b["type"] for b in sent[-1]["content"]] == ["tool_result", "text"]
    history: SessionHistory = await handle.query(AgentWorkflow.history)
    assert [c.tool_use_id for c in history.tool_calls] == ["n1", "t1"] and len(history.trace) == 3
    after = (
        await harness.client.get_workflow_handle_for(AgentWorkflow.run, source).query(AgentWorkflow.history)
    ).model_dump_json()
    assert after == before
    # the note of step 1 was not written again by the fork
    assert len([e for e in read_effects() if e["session_id"] == fork]) == 0
    # the fork runs with the tools the source recorded at its start: it does not list them again
    source_state: SessionState = await harness.client.get_workflow_handle(source).query(AgentWorkflow.state)
    fork_state: SessionState = await handle.query(AgentWorkflow.state)
    assert fork_state.specs == source_state.specs and len(source_state.specs) > 1
    source_handle = harness.client.get_workflow_handle(source)
    assert await _lists_the_worker_tools(source_handle) and not await _lists_the_worker_tools(handle)
    code, _, err = await cli(harness, "fork", source, "--at-step", "9")
    assert code == 1 and "no step 9" in err
    record(
        AREA,
        "fork a 3-step session at step 2 with another message",
        "the fork starts from the state after step 2 (no tool call runs again), takes another path, "
        "records forked_from; the original's history is unchanged",
        {"fork steps": result.steps},
    )


def test_a_fork_copies_the_whole_state_and_changes_only_what_it_must():
    """Every field of the source's state reaches the fork as it was, but those cut back to
    the fork's step and those of a run. The tool specs, the sub-agent count and the
    transcript resends used to be reset: a field added later carries over by itself."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    spec = ToolSpec(name="save_note", description="d", input_schema={"type": "object"})
    turn = lambda step, resends: TraceTurn(  # noqa: E731
        step=step, model="m", prompt_version="v1", started_at=t0, ended_at=t0, stop_reason="tool_use", text="",
        tool_use_ids=[f"u{step}"], usage=Usage(input_tokens=10, output_tokens=step), cost_usd=0.5, latency_ms=1,
        attempt=1, transcript_resends=resends,
    )  # fmt: skip
    uses = [
        Message(role="assistant", content=[ToolUseBlock(id=f"u{i}", name="save_note", input=NOTE)])
        for i in (1, 2)
    ]
    results = [
        Message(role="user", content=[ToolResultBlock(tool_use_id=f"u{i}", content="saved")]) for i in (1, 2)
    ]
    goal = Message(role="user", content=[TextBlock(text="the goal")])
    calls = {
        f"u{i}": ToolCallRecord(
            tool_use_id=f"u{i}",
            step=i,
            name="save_note",
            input=NOTE,
            status="done",
            output="saved",
            output_digest="d",
        )
        for i in (1, 2)
    }
    source = SessionState(
        started_at=t0, runs=3, messages=[goal, uses[0], results[0], uses[1], results[1]], unsent=[results[1]],
        transcript_ref="ref", specs=[spec], calls=calls, trace=[turn(1, 1), turn(2, 1)], repeats={"x": 2},
        steps=2, usage=Usage(input_tokens=99), cost_usd=9.0, paused=True, idle=True, closing=True,
        pending=[PendingMessage(id=3, mode="queue", text="next")],
        user_turns=2, answer="a", run_started_at=t0, cancel_requested="stop", ending=Ending(status="cancelled"),
        updated_at=t0 + timedelta(hours=1), transcript_resends=5, subagent_runs=2, model_in_use="openai:gpt-4o",
        child_approvals={"s.sub-2": [PendingApproval(tool_use_id="c", name="n", input={})]}, child_waits=["s.sub-2"],
        worked_seconds=12.5, working_since=t0, run_worked_from=2.0,
        undelivered_events=[ReceivedEvent(name="build", data={"ok": True}, at=t0)], last_message_id=4, steered=True,
        output_streaks={"save_note": OutputStreak(digest="d", count=2)},
    )  # fmt: skip
    fork = forked_state("s", source, 1, None)

    # cut back to step 1
    assert (
        fork.messages == source.messages[:3] and fork.unsent == fork.messages and fork.transcript_ref is None
    )
    assert list(fork.calls) == ["u1"] and fork.trace == source.trace[:1] and fork.steps == 1
    assert fork.usage == Usage(input_tokens=10, output_tokens=1) and fork.cost_usd == 0.5
    assert fork.transcript_resends == 1 and fork.repeats == {calls["u1"].repeat_key(): 1}
    assert fork.output_streaks == {"save_note": OutputStreak(digest="d", count=1)}
    assert (fork.user_turns, fork.answer) == (1, None)
    # a new session's first run
    assert (fork.runs, fork.paused, fork.idle, fork.closing, fork.pending) == (0, False, False, False, [])
    older = SessionState.model_validate(
        {"started_at": t0, "messages": [goal], "user_turns": 2, "queue": ["next"]}
    )
    assert older.pending == source.pending  # the queue of runs before `pending`, read
    assert (fork.last_message_id, fork.steered) == (None, False)
    assert (fork.run_started_at, fork.cancel_requested, fork.ending, fork.updated_at) == (
        None,
        None,
        None,
        None,
    )
    assert fork.stream_state is None and fork.child_approvals == {} and fork.model_in_use is None
    assert fork.child_waits == []
    assert (fork.worked_seconds, fork.working_since, fork.run_worked_from) == (0.0, None, 0.0)
    assert fork.undelivered_events == []
    # everything else as it was
    assert fork.specs == [spec] and fork.subagent_runs == 2 and fork.started_at == t0
    changed = {"messages", "unsent", "transcript_ref", "calls", "trace", "steps", "usage", "cost_usd",
               "transcript_resends", "repeats", "user_turns", "answer", "runs", "paused", "idle", "closing", "pending",
               "last_message_id", "steered",
               "run_started_at", "cancel_requested", "ending", "updated_at", "stream_state", "child_approvals",
               "child_waits", "model_in_use", "worked_seconds", "working_since", "run_worked_from",
               "undelivered_events", "output_streaks"}  # fmt: skip
    for field in SessionState.model_fields.keys() - changed:
        assert getattr(fork, field) == getattr(source, field), field
    # and shares nothing with the source
    fork.specs[0].description = "changed"
    assert source.specs[0].description == "d"


async def _lists_the_worker_tools(handle: WorkflowHandle) -> bool:
    """Whether the session's first run listed the worker's tools (a local activity's marker)."""
    markers = [
        e async for e in handle.fetch_history_events() if e.HasField("marker_recorded_event_attributes")
    ]
    return any(b"describe_tools" in marker.SerializeToString() for marker in markers)


async def test_a_schedule_starts_sessions_and_is_deleted(harness: Harness):
    name = f"sched-{uuid.uuid4().hex[:6]}"
    code, out, err = await cli(
        harness, "schedule", "create", name, "--every", "1h", "--agent", "researcher", "look it up"
    )
    assert code == 0 and f"created schedule {name}" in out, err
    code, _, err = await cli(harness, "schedule", "create", name, "--every", "1h", "again")
    assert code == 1 and "already exists" in err and len(err.strip().splitlines()) == 1
    code, _, err = await cli(harness, "schedule", "create", f"{name}-bad", "--cron", "99 * * *", "x")
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    for _ in range(2):
        code, _, err = await cli(harness, "schedule", "trigger", name)
        assert code == 0, err
        await asyncio.sleep(1.2)  # the session id carries the time to the second
    started = await _until(lambda: _sessions_of(harness, name, 2))
    assert len(started) == 2 and all(s.startswith(f"{name}-") for s in started)
    assert all(ids.is_reserved(s) for s in started), started  # no start may take a run's id
    first: SessionStatus = await harness.client.get_workflow_handle_for(AgentWorkflow.run, started[0]).query(
        AgentWorkflow.status
    )
    assert first.agent == "researcher"
    code, out, _ = await cli(harness, "schedule", "list", "--json")
    assert name in [json.loads(line)["name"] for line in out.splitlines()]
    code, out, err = await cli(harness, "schedule", "delete", name)
    assert code == 0 and f"deleted {name}" in out, err
    code, _, err = await cli(harness, "schedule", "trigger", name)
    assert code == 1 and "no schedule" in err
    for session in started:
        await harness.client.get_workflow_handle_for(AgentWorkflow.run, session).cancel()


async def _sessions_of(harness: Harness, prefix: str, count: int) -> list[str] | None:
    found = [w.id async for w in harness.client.list_workflows(f"WorkflowId STARTS_WITH '{prefix}-'")]
    return sorted(found) if len(found) >= count else None


async def _call_running(handle, tool_use_id: str) -> bool:
    try:
        history: SessionHistory = await handle.query(AgentWorkflow.history)
    except Exception:
        return False
    return any(c.tool_use_id == tool_use_id and c.status == "running" for c in history.tool_calls)


async def _until(check, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.3)
