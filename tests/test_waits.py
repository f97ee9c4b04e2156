"""Sessions that wait: working time (the timeout counts work only), the approval deadline,
and the durable waits `sleep` and `wait_for_event`, on the dev server's own timers with a
scripted fake model and an in-process worker."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.service import RPCError

from sessions.archive import whole_history
from tests.conftest import Harness, answer, tool_use
from tests.support.procs import status_of, wait_for_status, wait_until
from workflows.agent import AgentWorkflow
from workflows.contract import CancelRequest, Decision, EventInput, SessionHistory, SessionStatus

EMAIL = {"to": "a@example.com", "subject": "hi", "body": "x"}


def tool_result(harness: Harness, session_id: str, step: int) -> dict[str, Any]:
    """The (first) tool result the model got in the request of step `step`."""
    [request] = [r for r in harness.requests(session_id) if r["step"] == str(step)]
    block = request["body"]["messages"][-1]["content"][0]
    assert block["type"] == "tool_result", block
    content = block["content"]
    text = content if isinstance(content, str) else "".join(c["text"] for c in content)
    return {"text": text, "is_error": bool(block.get("is_error"))}


async def history_of(handle: WorkflowHandle) -> SessionHistory:
    """The whole history, earlier runs' stored parts joined in."""
    return await whole_history(await handle.query("history", result_type=SessionHistory))


async def timer_summaries(handle: WorkflowHandle) -> list[str]:
    from temporalio.converter import PayloadConverter

    summaries = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_TIMER_STARTED and event.user_metadata.HasField("summary"):
            summaries.append(PayloadConverter.default.from_payload(event.user_metadata.summary, str))
    return summaries


# ---- working time -------------------------------------------------------------------------


async def test_the_timeout_counts_working_time_not_an_approval_wait(harness: Harness):
    handle = await harness.start(
        [tool_use("send_email", EMAIL, id="e1"), answer("Sent.")], limits={"timeout_seconds": 3}
    )
    waiting = await wait_for_status(handle, "waiting_approval")
    await asyncio.sleep(5)  # longer than the timeout: a person takes their time
    still = await status_of(handle)
    assert still.status == "waiting_approval"
    assert still.worked_seconds == waiting.worked_seconds < 3
    await handle.execute_update("approve_call", Decision(tool_use_id="e1"), result_type=str)
    result = await asyncio.wait_for(handle.result(), timeout=30)
    assert result.status == "completed" and result.answer == "Sent."
    assert 0 < result.worked_seconds < 3
    assert "timeout 3s" in await timer_summaries(handle)


async def test_the_timeout_still_stops_work_after_a_wait(harness: Harness):
    """A pause stops the clock; the work before and after it adds up to the limit."""
    handle = await harness.start(
        [{**tool_use("get_time"), "delay": 1.5}, {**answer("never"), "delay": 10}],
        limits={"timeout_seconds": 3},
    )
    await wait_until(lambda: len(harness.requests(handle.id)) >= 1, timeout=20, what="the first model call")
    await handle.execute_update("pause_session", result_type=str)
    await wait_until(
        lambda: _steps(harness, handle.id), timeout=20, what="the first reply recorded while paused"
    )
    await asyncio.sleep(4)  # paused longer than the timeout: not stopped
    assert (await status_of(handle)).status == "paused"
    await handle.execute_update("resume_session", result_type=str)
    resumed = time.monotonic()
    result = await asyncio.wait_for(handle.result(), timeout=30)
    assert (result.status, result.stop_reason) == ("stopped", "timeout")
    # About 1.5 s worked before the pause: the rest of the 3 s after the resume.
    assert time.monotonic() - resumed < 3
    assert 2.9 <= result.worked_seconds < 4


def _steps(harness: Harness, session_id: str) -> bool:
    return len(harness.requests(session_id)) >= 1


NAPPING_TEAM = """
[agents.lead]
description = "Hands work to a napper"
timeout = 10
subagents = ["napper"]

[agents.napper]
description = "Sleeps, then answers"
tools = ["sleep"]
"""


async def start_napping_lead(harness: Harness, tmp_path: Path, parent: str):
    """Start `parent` as the lead of NAPPING_TEAM, as client.py does; its handle."""
    from tests.test_agents import cli

    definitions = tmp_path / "agents.toml"
    definitions.write_text(NAPPING_TEAM)
    code, _, err = await cli(
        harness, "start", "nap", "--agent", "lead", "--session", parent, definitions=definitions
    )
    assert code == 0, err
    return harness.client.get_workflow_handle_for(AgentWorkflow.run, parent)


async def test_a_subagent_in_a_wait_stops_its_parents_clock(harness: Harness, tmp_path: Path):
    """A parent with a 10 s timeout whose sub-agent sleeps 12 s completes: the child's sleep
    is not the parent's work either, and the child's work after it is. (The work around the
    sleep, some 2 s, took 6.5 s on a loaded machine: the limit leaves room for that.)"""

    parent = f"test-{uuid.uuid4().hex[:10]}"
    child = f"{parent}.sub-1"
    harness.script(parent, [tool_use("agent__napper", {"task": "nap"}, id="n1"), answer("It napped.")])
    harness.script(child, [
        tool_use("sleep", {"seconds": 12, "reason": "nap"}, id="s1"),
        {**answer("Rested."), "delay": 1},
    ])  # fmt: skip
    handle = await start_napping_lead(harness, tmp_path, parent)
    child_handle = harness.client.get_workflow_handle_for(AgentWorkflow.run, child)
    await wait_for_status(child_handle, "sleeping")
    # The parent's own status stays running: its sub-agent call runs.
    assert (await status_of(handle)).status == "running"
    result = await asyncio.wait_for(handle.result(), timeout=45)
    assert (result.status, result.stop_reason, result.answer) == ("completed", None, "It napped.")
    # The child's second model call (1 s) counts again; its 12 s sleep does not.
    assert 1 <= result.worked_seconds < 10
    # Its timeout timer stopped as the child began to sleep, and was armed again as it woke.
    summaries = await timer_summaries(handle)
    assert summaries[0] == "timeout 10s" and any(s.startswith("timeout 10s, ") for s in summaries[1:]), (
        summaries
    )
    child_result = await child_handle.result()
    assert child_result.status == "completed" and child_result.answer == "Rested."


# ---- the approval deadline ------------------------------------------------------------------


async def test_an_approval_past_its_deadline_is_denied_and_the_session_goes_on(harness: Harness):
    handle = await harness.start(
        [tool_use("send_email", EMAIL, id="e1"), answer("Could not send it.")],
        limits={"approval_timeout_seconds": 2},
    )
    await wait_for_status(handle, "waiting_approval")
    await handle.execute_update("pause_session", result_type=str)  # a pause does not stop the deadline

    async def denied() -> bool:
        return (await history_of(handle)).tool_calls[0].status == "denied"

    await wait_until(denied, timeout=30, what="the call denied while paused")
    assert not tool_result_arrived(harness, handle.id)  # the pause holds the next model call
    await handle.execute_update("resume_session", result_type=str)
    result = await asyncio.wait_for(handle.result(), timeout=30)
    assert result.status == "completed" and result.answer == "Could not send it."
    got = tool_result(harness, handle.id, 2)
    assert got == {"text": "denied: no decision within 2s", "is_error": True}
    [call] = (await history_of(handle)).tool_calls
    assert (call.status, call.decided_by, call.reason) == ("denied", "timeout", "no decision within 2s")
    assert "approval wait for send_email, at most 2s" in await timer_summaries(handle)


def tool_result_arrived(harness: Harness, session_id: str) -> bool:
    return any(r["step"] == "2" for r in harness.requests(session_id))


async def test_a_decision_before_the_deadline_stands(harness: Harness):
    handle = await harness.start(
        [tool_use("send_email", EMAIL, id="e1"), answer("Sent.")], limits={"approval_timeout_seconds": 60}
    )
    waiting = await wait_for_status(handle, "waiting_approval")
    assert waiting.limits.approval_timeout_seconds == 60
    await handle.execute_update("approve_call", Decision(tool_use_id="e1"), result_type=str)
    result = await asyncio.wait_for(handle.result(), timeout=30)
    assert result.status == "completed"
    [call] = (await history_of(handle)).tool_calls
    assert call.status == "done" and call.decided_by is None


# ---- sleep ----------------------------------------------------------------------------------


async def test_sleep_waits_on_a_timer_and_the_model_hears_how_long(harness: Harness):
    handle = await harness.start(
        [tool_use("sleep", {"seconds": 4, "reason": "let the deploy settle"}, id="s1"), answer("Checked.")],
        tools=["get_time", "sleep"],
    )
    sleeping = await wait_for_status(handle, "sleeping")
    began = time.monotonic()
    assert sleeping.wake_at is not None and sleeping.wake_at.tzinfo is not None
    assert 0 < (sleeping.wake_at - datetime.now(UTC)).total_seconds() <= 4.5
    result = await asyncio.wait_for(handle.result(), timeout=30)
    assert time.monotonic() - began >= 1
    assert result.status == "completed" and result.wake_at is None
    # The model hears how long it slept: 4 s, or a second more when a loaded machine ran
    # the workflow task after the timer late.
    heard = tool_result(harness, handle.id, 2)
    assert heard in ({"text": "slept 4s", "is_error": False}, {"text": "slept 5s", "is_error": False}), heard
    # The model was offered the tools the session names, and only those.
    first = harness.requests(handle.id)[0]["body"]
    assert sorted(t["name"] for t in first["tools"]) == ["get_time", "sleep"]
    [call] = (await history_of(handle)).tool_calls
    assert 4000 <= (call.duration_ms or 0) < 6000
    assert heard["text"] == f"slept {round((call.duration_ms or 0) / 1000)}s"
    # The sleep is not work: the two model calls and the loop took well under its 4 s.
    assert result.worked_seconds < 4
    assert "sleep 4s: let the deploy settle" in await timer_summaries(handle)
    kinds = [e["type"] for e in await stream_events(handle)]
    assert "sleeping" in kinds


async def test_a_long_sleep_is_cancelled_at_once(harness: Harness):
    handle = await harness.start(
        [tool_use("sleep", {"seconds": 3600, "reason": "check tomorrow"}, id="s1"), answer("never")],
        tools=["sleep"],
    )
    await wait_for_status(handle, "sleeping")
    asked = time.monotonic()
    await handle.execute_update("cancel_session", CancelRequest(reason="enough"), result_type=str)
    result = await asyncio.wait_for(handle.result(), timeout=30)
    assert time.monotonic() - asked < 5
    assert result.status == "cancelled"
    [call] = (await history_of(handle)).tool_calls
    assert call.status == "cancelled"


async def test_sleep_longer_than_30_days_is_an_error_for_the_model(harness: Harness):
    result = await harness.run(
        [tool_use("sleep", {"seconds": 31 * 86400, "reason": "later"}), answer("OK.")], tools=["sleep"]
    )
    assert result.status == "completed"
    got = tool_result(harness, result.session_id, 2)
    assert (
        got["is_error"]
        and got["text"].startswith("invalid input for sleep: seconds:")
        and "30 days" in got["text"]
    )


async def test_the_waits_are_offered_only_when_named(harness: Harness):
    result = await harness.run([tool_use("sleep", {"seconds": 1, "reason": "x"}), answer("OK.")])
    first = harness.requests(result.session_id)[0]["body"]
    assert "sleep" not in [t["name"] for t in first["tools"]]
    got = tool_result(harness, result.session_id, 2)
    assert got["is_error"] and got["text"].startswith("unknown tool 'sleep'")


# ---- wait_for_event -------------------------------------------------------------------------


async def send_event(handle: WorkflowHandle, name: str, data: Any = None) -> str:
    return await handle.execute_update("send_event", EventInput(name=name, data=data), result_type=str)


async def test_an_event_sent_during_the_wait_is_its_result(harness: Harness):
    handle = await harness.start(
        [tool_use("wait_for_event", {"name": "build", "timeout_seconds": 600}, id="w1"), answer("Built.")],
        tools=["wait_for_event"],
    )
    waiting = await wait_for_status(handle, "waiting_event")
    assert waiting.waiting_for is not None and waiting.waiting_for.name == "build"
    assert 590 < (waiting.waiting_for.until - datetime.now(UTC)).total_seconds() <= 600
    reply = await send_event(handle, "build", {"status": "ok", "url": "https://ci/1"})
    assert reply == "event build delivered to w1"
    result = await asyncio.wait_for(handle.result(), timeout=30)
    assert result.status == "completed" and result.waiting_for is None
    assert tool_result(harness, handle.id, 2) == {
        "text": '{"status":"ok","url":"https://ci/1"}',
        "is_error": False,
    }
    kinds = [(e["type"], e.get("name")) for e in await stream_events(handle)]
    assert ("waiting_event", "build") in kinds and ("event_received", "build") in kinds
    assert "event build (at most 10m)" in await timer_summaries(handle)


async def test_an_event_sent_before_the_wait_is_kept_for_it(harness: Harness):
    handle = await harness.start(
        [
            {**tool_use("wait_for_event", {"name": "reply", "timeout_seconds": 600}, id="w1"), "delay": 2},
            tool_use("wait_for_event", {"name": "other", "timeout_seconds": 600}, id="w2"),
            answer("Done."),
        ],
        tools=["wait_for_event"],
    )
    await wait_for_status(handle, "running")
    assert (
        await send_event(handle, "reply", "yes, go ahead")
        == "event reply kept for the next wait_for_event reply (1 kept)"
    )
    # By signal, with no data: kept for the second wait.
    await handle.signal("event", EventInput(name="other"))
    result = await asyncio.wait_for(handle.result(), timeout=30)
    assert result.status == "completed"
    assert tool_result(harness, handle.id, 2) == {"text": "yes, go ahead", "is_error": False}
    assert tool_result(harness, handle.id, 3) == {"text": "null", "is_error": False}


async def test_past_its_timeout_the_wait_says_so_and_a_later_event_is_kept(harness: Harness):
    handle = await harness.start(
        [
            tool_use("wait_for_event", {"name": "build", "timeout_seconds": 1}, id="w1"),
            {**tool_use("wait_for_event", {"name": "build", "timeout_seconds": 600}, id="w2"), "delay": 3},
            answer("Done."),
        ],
        tools=["wait_for_event"],
    )

    async def first_wait_over() -> bool:
        calls = (await history_of(handle)).tool_calls
        return bool(calls) and calls[0].status == "done"

    await wait_until(first_wait_over, timeout=30, what="the first wait to time out")
    await send_event(handle, "build", [1, 2])  # after its wait: kept for the next one
    result = await asyncio.wait_for(handle.result(), timeout=30)
    assert result.status == "completed"
    assert tool_result(harness, handle.id, 2) == {"text": "no event build within 1s", "is_error": False}
    assert tool_result(harness, handle.id, 3) == {"text": "[1,2]", "is_error": False}


async def test_events_are_refused_past_100_undelivered_and_after_the_end(harness: Harness):
    handle = await harness.start(
        [tool_use("sleep", {"seconds": 3600, "reason": "hold"}, id="s1"), answer("never")], tools=["sleep"]
    )
    await wait_for_status(handle, "sleeping")
    for i in range(100):
        await handle.signal("event", EventInput(name=f"e{i}"))
    with pytest.raises(WorkflowUpdateFailedError) as full:
        await send_event(handle, "one-more")
    assert "already holds 100 undelivered events" in str(full.value.cause)
    await handle.execute_update("cancel_session", CancelRequest(), result_type=str)
    await asyncio.wait_for(handle.result(), timeout=30)
    with pytest.raises(RPCError, match="already completed"):
        await send_event(handle, "late")


async def test_undelivered_events_hold_at_most_64000_characters_of_data(harness: Harness):
    handle = await harness.start(
        [tool_use("sleep", {"seconds": 3600, "reason": "hold"}, id="s1"), answer("never")], tools=["sleep"]
    )
    await wait_for_status(handle, "sleeping")
    big = "x" * 3998  # 4,000 characters as JSON: the most one event may carry
    for i in range(16):
        await send_event(handle, f"e{i}", big)
    with pytest.raises(WorkflowUpdateFailedError) as full:
        await send_event(handle, "one-more", "y")
    assert "already hold 64000 characters of data" in str(full.value.cause)
    await handle.execute_update("cancel_session", CancelRequest(), result_type=str)
    await asyncio.wait_for(handle.result(), timeout=30)


async def test_status_precedence_paused_over_the_waits(harness: Harness):
    handle = await harness.start(
        [tool_use("wait_for_event", {"name": "go", "timeout_seconds": 600}, id="w1"), answer("Went.")],
        tools=["wait_for_event"],
    )
    await wait_for_status(handle, "waiting_event")
    await handle.execute_update("pause_session", result_type=str)
    assert (await status_of(handle)).status == "paused"
    await send_event(handle, "go")
    await handle.execute_update("resume_session", result_type=str)
    result: SessionStatus = await asyncio.wait_for(handle.result(), timeout=30)
    assert result.status == "completed"


async def stream_events(handle: WorkflowHandle) -> list[dict[str, Any]]:
    """The events the ended session published, as followers read them."""
    from sessions.follow import follow
    from workflows.events import EVENT_TOPIC

    out: list[dict[str, Any]] = []
    async for item in follow(handle._client, handle.id, topics=[EVENT_TOPIC]):
        out.append(item.data)
        if item.data.get("type") == "end":
            break
    return out


# ---- the command line -----------------------------------------------------------------------


async def test_client_event_exit_codes(harness: Harness, dev_server):
    from tests.test_bad_input import assert_one_line_error, client

    handle = await harness.start(
        [
            tool_use("wait_for_event", {"name": "deploy", "timeout_seconds": 600}, id="w1"),
            answer("Deployed."),
        ],
        tools=["wait_for_event"],
    )
    await wait_for_status(handle, "waiting_event")
    address, queue = dev_server.address, harness.task_queue
    bad_json = await client(address, "event", handle.id, "deploy", "--data", "{nope", queue=queue)
    assert_one_line_error(bad_json, "--data", "not JSON")
    sent = await client(address, "event", handle.id, "deploy", "--data", '"v1.2 is live"', queue=queue)
    assert (sent.code, sent.out.strip()) == (0, "event deploy delivered to w1"), sent
    result = await asyncio.wait_for(handle.result(), timeout=30)
    assert result.status == "completed"
    assert tool_result(harness, handle.id, 2) == {"text": "v1.2 is live", "is_error": False}
    ended = await client(address, "event", handle.id, "deploy", queue=queue)
    assert_one_line_error(ended, handle.id, "ended")

    full = await harness.start(
        [tool_use("sleep", {"seconds": 3600, "reason": "hold"}, id="s1"), answer("never")], tools=["sleep"]
    )
    await wait_for_status(full, "sleeping")
    for i in range(100):
        await full.signal("event", EventInput(name="tick", data=i))
    refused = await client(address, "event", full.id, "tick", queue=queue)
    assert_one_line_error(refused, "rejected", "already holds 100 undelivered events")
    await full.execute_update("cancel_session", CancelRequest(), result_type=str)


# ---- continue-as-new ------------------------------------------------------------------------


async def test_waits_and_an_approval_deadline_go_on_across_continue_as_new(harness: Harness):
    """Each wait hands the session to a new run (after 1 step a run); none starts again."""
    handle = await harness.start(
        [
            tool_use("sleep", {"seconds": 3, "reason": "settle"}, id="s1"),
            tool_use("wait_for_event", {"name": "go", "timeout_seconds": 3}, id="w1"),
            tool_use("send_email", EMAIL, id="e1"),
            answer("Done."),
        ],
        tools=["sleep", "wait_for_event", "send_email"],
        limits={"continue_as_new_after_steps": 1, "approval_timeout_seconds": 3},
    )
    result = await asyncio.wait_for(handle.result(), timeout=60)
    assert result.status == "completed" and result.runs >= 4
    calls = {c.tool_use_id: c for c in (await history_of(handle)).tool_calls}
    assert calls["s1"].output == "slept 3s"
    assert calls["w1"].output == "no event go within 3s"
    assert (calls["e1"].status, calls["e1"].decided_by) == ("denied", "timeout")
    for call in (calls["s1"], calls["w1"]):
        assert call.started_at is not None and call.ended_at is not None
        assert 3 <= (call.ended_at - call.started_at).total_seconds() < 4.5
    denied = calls["e1"]
    assert denied.deadline is not None and denied.ended_at is not None
    assert 0 <= (denied.ended_at - denied.deadline).total_seconds() < 1.5


async def test_watch_and_status_show_the_waits(harness: Harness):
    from tests.test_watch import run_cli

    handle = await harness.start(
        [
            tool_use("sleep", {"seconds": 1, "reason": "let the cache warm"}, id="s1"),
            tool_use("wait_for_event", {"name": "deploy", "timeout_seconds": 600}, id="w1"),
            answer("Deployed."),
        ],
        tools=["sleep", "wait_for_event"],
    )
    await wait_for_status(handle, "waiting_event")
    code, out, err = await run_cli(harness, "status", handle.id)
    assert code == 0, err
    assert "waiting_event" in out and "waiting for event deploy until " in out
    assert f"python client.py event {handle.id} deploy --data" in out
    await send_event(handle, "deploy", "done")
    await asyncio.wait_for(handle.result(), timeout=30)
    code, out, err = await run_cli(harness, "watch", handle.id)
    assert code == 0, err
    assert "sleeping until " in out and ": let the cache warm" in out
    assert "● sleeping" in out and "● waiting event" in out
    assert "waiting for event deploy until " in out and "event deploy received" in out
    assert (
        out.index("sleeping until")
        < out.index("waiting for event deploy")
        < out.index("event deploy received")
    )


# The test waits by reading the history, as `client.py status` does: a query that reaches the
# worker while a local activity runs ends that workflow task early, and the activity's marker
# may then land in a task the workflow cannot see (workflows/metering.py, "Not exact").
async def test_the_waits_timers_are_counted_as_billable_actions(harness: Harness):
    """`temporal_actions` equals bench/billing.py's count of the history: the sleep's, the
    event wait's, the approval deadline's and the working-time timers included."""
    from tests.test_actions import counted

    handle = await harness.start(
        [
            tool_use("sleep", {"seconds": 1, "reason": "settle"}, id="s1"),
            tool_use("wait_for_event", {"name": "build", "timeout_seconds": 60}, id="w1"),
            tool_use("send_email", EMAIL, id="e1"),
            answer("Done."),
        ],
        tools=["sleep", "wait_for_event", "send_email"],
        limits={"approval_timeout_seconds": 1},
    )
    await wait_for_status(handle, "waiting_event", queried=False)
    await handle.signal("event", EventInput(name="build", data="green"))
    result = await asyncio.wait_for(handle.result(), timeout=30)
    assert result.status == "completed"
    found = await counted(harness.client, handle.id)
    assert found.as_dict()["timers"] >= 3, found.as_dict()
    assert result.temporal_actions == found.total, found.as_dict()
