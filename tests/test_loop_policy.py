"""Loops that stop: an agent's `loop_policy` notes, asks about or stops a repeated call
(workflows/loops.py), on a real dev server with the fake model."""

from __future__ import annotations

import asyncio
from typing import Any

from infra.datadir import read_effects
from tests.conftest import Harness, answer, tool_use
from tests.support.procs import wait_for_status
from workflows.contract import Decision, SessionStatus


async def status_of(handle: Any) -> SessionStatus:
    return await handle.query("status", result_type=SessionStatus)


def same_note(i: int) -> dict[str, Any]:
    return tool_use("save_note", {"title": "same", "text": "again"}, id=f"s{i}")


async def test_a_loop_stops_at_the_nth_identical_call(harness: Harness):
    result = await harness.run(
        [same_note(i) for i in range(1, 6)] + [answer("never")],
        loop_policy={"after": 3, "action": "stop"},
        limits={"continue_as_new_after_steps": 2},  # counted through continue-as-new
    )
    assert result.status == "stopped" and result.stop_reason == "loop"
    assert result.runs == 2
    mine = [e for e in read_effects() if e["session_id"] == result.session_id]
    assert len(mine) == 2  # the third identical call never ran
    assert len(harness.requests(result.session_id)) == 3
    assert [(r.name, r.kind, r.count) for r in result.repeats] == [
        ("save_note", "input", 3),
        ("save_note", "output", 2),
    ]


async def test_without_a_policy_a_loop_only_gets_the_note(harness: Harness):
    result = await harness.run([same_note(i) for i in range(1, 5)] + [answer("ok")])
    assert result.status == "completed"
    assert [(r.name, r.kind, r.count) for r in result.repeats] == [("save_note", "input", 4)]


async def test_a_same_output_loop_is_asked_about_then_denied(harness: Harness):
    # whoami answers the same whatever its input: three different calls, one output.
    turns = [tool_use("whoami", {"user_id": f"u{i}"}, id=f"w{i}") for i in range(1, 5)] + [answer("stopped")]
    handle = await harness.start(turns, loop_policy={"after": 3, "action": "ask"})
    waiting = await wait_for_status(handle, "waiting_approval")
    [pending] = waiting.pending_approvals
    assert pending.tool_use_id == "w4"
    assert pending.reason is not None and "same output 3 times in a row" in pending.reason
    assert [(r.name, r.kind, r.count) for r in waiting.repeats] == [("whoami", "output", 3)]
    third = harness.requests(handle.id)[3]["body"]["messages"][-1]["content"][0]["content"]
    assert "returned this same output 3 times in a row" in third
    await handle.execute_update("deny_call", Decision(tool_use_id="w4", reason="enough"), result_type=str)
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed"
    told = harness.requests(handle.id)[4]["body"]["messages"][-1]["content"][0]
    assert told["is_error"] is True and "enough" in told["content"]


async def test_an_identical_call_asked_about_runs_once_approved(harness: Harness):
    handle = await harness.start(
        [same_note(i) for i in range(1, 3)] + [answer("done")], loop_policy={"after": 2, "action": "ask"}
    )
    waiting = await wait_for_status(handle, "waiting_approval")
    [pending] = waiting.pending_approvals
    assert pending.tool_use_id == "s2" and "the same input 2 times" in (pending.reason or "")
    await handle.execute_update("approve_call", Decision(tool_use_id="s2"), result_type=str)
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed"
    assert len([e for e in read_effects() if e["session_id"] == handle.id]) == 2


def test_an_agents_loop_policy_is_recorded_in_the_start_input(tmp_path, monkeypatch):
    from sessions import start_input

    definitions = tmp_path / "agents.toml"
    definitions.write_text(
        '[agents.lead]\nsubagents = ["helper"]\nloop_policy = {after = 4, action = "ask"}\n'
        '[agents.helper]\nloop_policy = {after = 2, action = "stop"}\n'
    )
    monkeypatch.setenv("AGENT_DEFINITIONS", str(definitions))
    resolved = start_input.resolve(goal="g", agent="lead", limits={}, fields={})
    assert resolved.loop_policy is not None and resolved.loop_policy.model_dump() == {
        "after": 4,
        "action": "ask",
    }
    [helper] = resolved.agent.subagents if resolved.agent else []
    assert helper.loop_policy is not None and helper.loop_policy.action == "stop"
    assert start_input.resolve(goal="g", agent="helper", limits={}, fields={}).loop_policy is not None
    definitions.write_text('[agents.lead]\nloop_policy = {after = 1, action = "halt"}\n')
    try:
        start_input.resolve(goal="g", agent="lead", limits={}, fields={})
    except Exception as err:  # a mistake in the file is one line naming the field
        assert "agents.lead.loop_policy" in str(err)
    else:
        raise AssertionError("a bad loop_policy was accepted")
