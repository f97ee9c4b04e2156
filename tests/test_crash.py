"""Worker crashes: real `python worker.py` processes killed with kill -9 by their PID.

Each test runs sessions on two worker processes of its own task queue (the session-wide
dev server and fake model from conftest), kills the one the session is on in the middle
of something, and shows what the session did next on the other. The workers that are
killed mid-call run with `--heartbeat-timeout 3 --no-failover-watch`: a dead worker's
activity is noticed when its heartbeat stops, 3 s after its last (the default, the
failover watch, is tests/test_failover_watch.py; without either, a call is noticed at its
own timeout: docs/operations/crashes.md); a retried activity starts again
after the first retry interval (1 s); a workflow task offered to the dead worker's sticky
queue moves to the shared queue after `STICKY_TIMEOUT` (1 s, in worker.py).
"""

from __future__ import annotations

import asyncio
import time

import pytest
from temporalio.api.enums.v1 import TimeoutType

from tests.conftest import answer, tool_use
from tests.support.procs import (
    Event,
    ProcessHarness,
    effects_of,
    events_of,
    first_after,
    holder,
    result_of,
    wait_for_effects,
    wait_for_model_request,
    wait_for_status,
    wait_until,
)
from tests.support.reliability import record
from worker import STICKY_TIMEOUT
from workflows.contract import Decision, EventInput, SessionHistory

pytestmark = pytest.mark.process

AREA = "Worker crashes (kill -9)"
HEARTBEAT_S = 3.0
FAILOVER = (
    "--heartbeat-timeout",
    f"{HEARTBEAT_S:g}",
    "--no-failover-watch",
)  # the workers of the kill-mid-call tests
FIRST_RETRY_S = 1.0  # initial_interval of the model and idempotent-tool retry policies
STICKY_TIMEOUT_S = STICKY_TIMEOUT.total_seconds()
# The targets: the next step within 5 s of a kill -9 (the heartbeat timeout, the first
# retry interval, and room for a workflow task), and an update or query sent after the
# kill answered within 2 s (the sticky timeout and one workflow task).
NEXT_STEP_BOUND_S = 5.0
ANSWER_BOUND_S = 2.0
# How long the idempotent tool a kill interrupts runs: long enough for the test to see it
# started, find its worker and kill it, however slow the machine.
TOOL_S = 5.0
# A local tool's (within its default 10 s timeout), and the workflow task timeout (the
# SDK's default, which `client.py start` keeps).
LOCAL_TOOL_S = 6.0
WORKFLOW_TASK_TIMEOUT_S = 10.0


def _secs(value: float) -> str:
    return f"{value:.1f} s"


def handed_over(events: list[Event], killed_at: float, activity: str) -> float:
    """Seconds from the kill until the server handed the retry of `activity` to a worker.

    The retried attempt's ACTIVITY_TASK_STARTED carries that time: the server's side of the
    recovery (heartbeat timeout, retry interval, a poll waiting). What the worker then does
    (the tool starting, the request reaching the model) waits on its share of the machine,
    which a loaded test run makes slow; the tests record it as a figure."""
    started = first_after(events, killed_at, "ACTIVITY_TASK_STARTED", activity)
    assert started.raw.activity_task_started_event_attributes.attempt == 2, started.raw
    return started.epoch - killed_at


async def test_kill_during_at_most_once_tool_never_runs_it_again(procs: ProcessHarness):
    workers = await procs.worker_pool(2, *FAILOVER)
    handle = await procs.start(
        [tool_use("slow_charge", {"amount": 5, "seconds": 4}, id="c1"), answer("Told the user.")]
    )
    await wait_for_effects(handle.id, "slow_charge")
    first = await holder(handle, workers)
    second = next(w for w in workers if w is not first)
    killed_at = first.kill()

    result = await result_of(handle)
    assert result.status == "completed" and result.answer == "Told the user."
    runs = effects_of(handle.id, "slow_charge")
    assert len(runs) == 1, runs
    assert runs[0]["pid"] == first.pid and runs[0]["idempotency_key"] == f"{handle.id}:c1"

    second_call = procs.requests(handle.id, step=2)
    assert len(second_call) == 1
    tool_result = second_call[0]["body"]["messages"][-1]["content"][0]
    assert tool_result["type"] == "tool_result" and tool_result["tool_use_id"] == "c1"
    assert tool_result["is_error"] is True
    text = (
        tool_result["content"]
        if isinstance(tool_result["content"], str)
        else tool_result["content"][0]["text"]
    )
    # The tool did run (the effects log has its line): the model is told the outcome is
    # unknown, not that it did not happen.
    assert "outcome unknown" in text and "may have taken effect" in text and "will not be run again" in text
    assert "heartbeat" in text and "charged" not in text

    history = await handle.query("history", result_type=SessionHistory)
    call = history.tool_calls[0]
    assert call.status == "unknown" and call.is_error and "may have taken effect" in (call.output or "")

    events = await events_of(handle)
    timed_out = first_after(events, killed_at, "ACTIVITY_TASK_TIMED_OUT", "run_tool")
    next_step = first_after(events, killed_at, "ACTIVITY_TASK_SCHEDULED", "call_model")
    detected, recovered = timed_out.epoch - killed_at, next_step.epoch - killed_at
    # Bounded by the heartbeat timeout: no sooner than the last heartbeat allows (there is
    # no retry for an at-most-once call); the next step waits out the sticky timeout too.
    assert HEARTBEAT_S - 1.5 <= detected < NEXT_STEP_BOUND_S, detected
    assert recovered < NEXT_STEP_BOUND_S, recovered
    assert second.alive()
    record(
        AREA,
        "kill -9 during an at-most-once tool call (`slow_charge`), a second worker polling",
        'the tool ran once; the call\'s status is `unknown` and the model got the error result "outcome unknown ... may have taken effect, and it will not be run again"; the session completed',
        {
            "kill to timeout (heartbeat timeout 3 s)": _secs(detected),
            "kill to next model call scheduled": _secs(recovered),
        },
    )


async def test_kill_during_model_call_calls_it_again_once(procs: ProcessHarness):
    workers = await procs.worker_pool(2, *FAILOVER)
    handle = await procs.start(
        [
            tool_use("get_time", id="t1"),
            {**answer("answer from the attempt that died"), "delay": 6},
            answer("answer from the retry"),
        ]
    )
    [lost] = await wait_for_model_request(procs.fake_model, handle.id, step=2)
    first = await holder(handle, workers)
    second = next(w for w in workers if w is not first)
    killed_at = first.kill()

    result = await result_of(handle)
    assert result.status == "completed" and result.answer == "answer from the retry"
    assert result.steps == 2
    calls = procs.requests(handle.id, step=2)
    assert len(calls) == 2, "the interrupted model call was not made again exactly once"
    retry = calls[1]
    assert retry["at"] > killed_at
    assert retry["body"]["messages"] == lost["body"]["messages"]  # the same transcript, resent

    history = await handle.query("history", result_type=SessionHistory)
    assert [m.role for m in history.messages] == ["user", "assistant", "user", "assistant"]
    assert [t.step for t in history.trace] == [1, 2]
    assert history.trace[1].attempt == 2
    assert "attempt that died" not in history.model_dump_json()

    events = await events_of(handle)
    retry_started = retry["at"] - killed_at
    completed = first_after(events, killed_at, "ACTIVITY_TASK_COMPLETED", "call_model")
    retried = handed_over(events, killed_at, "call_model")
    assert HEARTBEAT_S + FIRST_RETRY_S - 1.5 <= retried < NEXT_STEP_BOUND_S, retried
    assert retried <= retry_started
    assert second.alive()
    record(
        AREA,
        "kill -9 during a model call, a second worker polling",
        "the call was made again (attempt 2) with the same transcript; one assistant message for the step",
        {
            "kill to model call handed to the other worker (heartbeat timeout 3 s + retry 1 s)": _secs(
                retried
            ),
            "kill to model call made again": _secs(retry_started),
            "kill to step recorded": _secs(completed.epoch - killed_at),
        },
    )


async def test_kill_during_idempotent_tool_runs_it_again_with_the_same_key(procs: ProcessHarness):
    workers = await procs.worker_pool(2, *FAILOVER)
    handle = await procs.start(
        [tool_use("slow_upsert", {"key": "k1", "seconds": TOOL_S}, id="u1"), answer("Saved.")]
    )
    await wait_for_effects(handle.id, "slow_upsert")
    first = await holder(handle, workers)
    second = next(w for w in workers if w is not first)
    killed_at = first.kill()

    result = await result_of(handle)
    assert result.status == "completed" and result.answer == "Saved."
    runs = effects_of(handle.id, "slow_upsert")
    assert len(runs) == 2, runs
    assert {r["idempotency_key"] for r in runs} == {f"{handle.id}:u1"}
    assert [r["pid"] for r in runs] == [first.pid, second.pid]
    tool_result = procs.requests(handle.id, step=2)[0]["body"]["messages"][-1]["content"][0]
    assert not tool_result.get("is_error")
    text = (
        tool_result["content"]
        if isinstance(tool_result["content"], str)
        else tool_result["content"][0]["text"]
    )
    assert text == "upserted k1"

    rerun = runs[1]["at"] - killed_at
    events = await events_of(handle)
    next_step = first_after(events, killed_at, "ACTIVITY_TASK_SCHEDULED", "call_model")
    # The heartbeat timeout notices the dead worker; the retry waits the first interval.
    retried = handed_over(events, killed_at, "run_tool")
    assert HEARTBEAT_S + FIRST_RETRY_S - 1.5 <= retried < NEXT_STEP_BOUND_S, retried
    assert retried <= rerun
    record(
        AREA,
        "kill -9 during an idempotent tool call (`slow_upsert`), a second worker polling",
        "the tool ran again on the new worker with the same idempotency key; the session completed",
        {
            "kill to tool handed to the other worker (heartbeat timeout 3 s + retry 1 s)": _secs(retried),
            "kill to tool run again": _secs(rerun),
            f"kill to next model call scheduled (tool takes {TOOL_S:g} s)": _secs(
                next_step.epoch - killed_at
            ),
        },
    )


async def test_kill_during_a_local_tool_runs_it_again_after_the_workflow_task_timeout(procs: ProcessHarness):
    # Workers with their defaults (the failover watch on). A local tool runs inside its
    # workflow task: no activity for the watch to fail; the server hands the task to
    # another worker when it times out, 10 s after it started, and that worker runs the tool again.
    workers = await procs.worker_pool(2)
    handle = await procs.start(
        [tool_use("quick_upsert", {"key": "k1", "seconds": LOCAL_TOOL_S}, id="q1"), answer("Saved.")]
    )
    [started] = await wait_for_effects(handle.id, "quick_upsert")
    first = next(w for w in workers if w.pid == started["pid"])
    second = next(w for w in workers if w is not first)
    killed_at = first.kill()

    result = await result_of(handle, timeout=90)
    assert result.status == "completed" and result.answer == "Saved."
    runs = effects_of(handle.id, "quick_upsert")
    assert len(runs) == 2, runs
    assert {r["idempotency_key"] for r in runs} == {f"{handle.id}:q1"}
    assert [r["pid"] for r in runs] == [first.pid, second.pid]
    events = await events_of(handle)
    assert not [e for e in events if e.type == "ACTIVITY_TASK_SCHEDULED" and e.activity == "run_tool"]
    timed_out = first_after(events, killed_at, "WORKFLOW_TASK_TIMED_OUT")
    next_step = first_after(events, killed_at, "ACTIVITY_TASK_SCHEDULED", "call_model")
    detected, rerun = timed_out.epoch - killed_at, runs[1]["at"] - killed_at
    # The task timed out 10 s after it started, which was before the tool's first line.
    assert 0 < detected <= WORKFLOW_TASK_TIMEOUT_S, detected
    print(f"kill -9 during a local tool: task timed out after {detected:.1f} s, tool run again after "
          f"{rerun:.1f} s, next model call {next_step.epoch - killed_at:.1f} s")  # fmt: skip
    record(
        AREA,
        f"kill -9 during a local tool call (`quick_upsert`, idempotent, {LOCAL_TOOL_S:g} s; a local activity "
        "by default), a second worker polling, both with their defaults",
        "the workflow task timed out (10 s after it started) and the other worker ran the tool again with "
        "the same idempotency key; the session completed",
        {
            "kill to workflow task timed out": _secs(detected),
            "kill to tool run again": _secs(rerun),
            "kill to next model call scheduled": _secs(next_step.epoch - killed_at),
        },
    )


async def test_kill_while_waiting_for_approval(procs: ProcessHarness):
    workers = await procs.worker_pool(2)
    email = {"to": "a@example.com", "subject": "hi", "body": "x"}
    handle = await procs.start([tool_use("send_email", email, id="e1"), answer("Sent.")])
    await wait_for_status(handle, "waiting_approval")
    first = await holder(handle, workers)
    second = next(w for w in workers if w is not first)
    killed_at = first.kill()
    assert effects_of(handle.id) == []

    asked = time.monotonic()
    reply = await handle.execute_update("approve_call", Decision(tool_use_id="e1"), result_type=str)
    answered = time.monotonic() - asked
    assert reply == "approved send_email (e1)"
    result = await result_of(handle)
    assert result.status == "completed" and result.answer == "Sent."
    runs = effects_of(handle.id, "send_email")
    assert len(runs) == 1 and runs[0]["pid"] == second.pid
    # The first workflow task after the kill goes to the dead worker's sticky queue and
    # waits there until its schedule-to-start timeout (1 s, set by the worker) moves it
    # to the task queue every worker polls.
    sticky = _sticky_wait(await events_of(handle), killed_at)
    assert sticky <= STICKY_TIMEOUT_S + 0.5, sticky
    assert answered < ANSWER_BOUND_S, answered
    record(
        AREA,
        "kill -9 while the session waits for an approval; approve sent at once, a second worker polling",
        "the approval was recorded and the email sent once, by the other worker; the session completed",
        {
            "approve answered after": _secs(answered),
            "of which on the dead worker's sticky queue": _secs(sticky),
        },
    )


async def test_sticky_timeout_flag_sets_the_wait_on_a_dead_worker(procs: ProcessHarness):
    """`worker.py --sticky-timeout 4`: after a kill -9, the session's next workflow task
    waits 4 s on the dead worker's queue (not the default 1 s) before the other takes it."""
    workers = await procs.worker_pool(2, "--sticky-timeout", "4")
    email = {"to": "a@example.com", "subject": "hi", "body": "x"}
    handle = await procs.start([tool_use("send_email", email, id="e1"), answer("Sent.")])
    await wait_for_status(handle, "waiting_approval")
    first = await holder(handle, workers)
    killed_at = first.kill()
    reply = await handle.execute_update("approve_call", Decision(tool_use_id="e1"), result_type=str)
    assert reply == "approved send_email (e1)"
    assert (await result_of(handle)).status == "completed"
    sticky = _sticky_wait(await events_of(handle), killed_at)
    assert 3.5 <= sticky <= 4.5, sticky


async def test_kill_while_paused(procs: ProcessHarness):
    workers = await procs.worker_pool(2)
    handle = await procs.start(
        [{**tool_use("slow_upsert", {"key": "p1", "seconds": 0}, id="u1"), "delay": 1}, answer("Done.")]
    )
    await wait_for_model_request(procs.fake_model, handle.id, step=1)
    assert await handle.execute_update("pause_session", result_type=str) == "paused"

    async def tool_gated() -> bool:
        history = await handle.query("history", result_type=SessionHistory)
        return history.status.steps == 1 and history.status.status == "paused"

    await wait_until(tool_gated, timeout=20, what="the first reply recorded while paused")
    first = await holder(handle, workers)
    second = next(w for w in workers if w is not first)
    first.kill()

    asked = time.monotonic()
    snapshot = await wait_for_status(handle, "paused")
    queried = time.monotonic() - asked
    assert snapshot.steps == 1
    assert effects_of(handle.id) == [], "a tool ran while the session was paused"
    assert len(procs.requests(handle.id)) == 1
    asked = time.monotonic()
    assert await handle.execute_update("resume_session", result_type=str) == "resumed"
    answered = time.monotonic() - asked
    result = await result_of(handle)
    assert result.status == "completed" and result.answer == "Done."
    runs = effects_of(handle.id, "slow_upsert")
    assert len(runs) == 1 and runs[0]["pid"] == second.pid
    assert queried < ANSWER_BOUND_S and answered < ANSWER_BOUND_S, (queried, answered)
    record(
        AREA,
        "kill -9 while the session is paused; status queried at once, then resume, a second worker polling",
        "still paused on the new worker (nothing ran); after resume the tool ran once and the session completed",
        {"first status query answered after": _secs(queried), "resume answered after": _secs(answered)},
    )


def _sticky_wait(events: list[Event], since: float) -> float:
    """Seconds workflow tasks spent on a dead worker's sticky queue before timing out."""
    scheduled = {e.id: e for e in events if e.type == "WORKFLOW_TASK_SCHEDULED"}
    waited = 0.0
    for event in events:
        if event.type == "WORKFLOW_TASK_TIMED_OUT" and event.epoch >= since:
            attrs = event.raw.workflow_task_timed_out_event_attributes
            if attrs.timeout_type == TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START:
                waited += event.epoch - scheduled[attrs.scheduled_event_id].epoch
    return waited


async def test_two_workers_one_killed_the_other_finishes(procs: ProcessHarness):
    workers = await procs.worker_pool(2, *FAILOVER)
    handle = await procs.start(
        [tool_use("slow_upsert", {"key": "k2", "seconds": TOOL_S}, id="u2"), answer("Done.")]
    )
    [run] = await wait_for_effects(handle.id, "slow_upsert")
    victim = next(w for w in workers if w.pid == run["pid"])
    survivor = next(w for w in workers if w is not victim)
    killed_at = victim.kill()

    result = await result_of(handle)
    assert result.status == "completed" and result.answer == "Done."
    runs = effects_of(handle.id, "slow_upsert")
    assert [r["pid"] for r in runs] == [victim.pid, survivor.pid]
    assert survivor.alive() and len(procs.workers.started) == 2  # no worker was started after the kill
    retried = handed_over(await events_of(handle), killed_at, "run_tool")
    assert retried < NEXT_STEP_BOUND_S and retried <= runs[1]["at"] - killed_at
    record(
        AREA,
        "two workers on one task queue, the one running the tool killed",
        "the other worker ran the tool again and finished the session",
        {
            "kill to tool handed to the other worker (heartbeat timeout 3 s + retry 1 s)": _secs(retried),
            "kill to tool run again": _secs(runs[1]["at"] - killed_at),
        },
    )


async def test_no_polling_delay_between_steps(procs: ProcessHarness):
    """On a normal run the next step starts as soon as the previous one ends."""
    await procs.worker()
    turns = [tool_use("slow_upsert", {"key": f"k{i}", "seconds": 0}, id=f"u{i}") for i in range(3)] + [
        answer("ok")
    ]
    handle = await procs.start(turns)
    result = await result_of(handle)
    assert result.status == "completed" and result.steps == 4
    events = await events_of(handle)
    gaps = []
    for index, event in enumerate(events):
        if event.type == "ACTIVITY_TASK_COMPLETED" and event.activity == "run_tool":
            following = next(e for e in events[index:] if e.type == "ACTIVITY_TASK_SCHEDULED")
            assert following.activity == "call_model"
            gaps.append(following.epoch - event.epoch)
    assert len(gaps) == 3
    assert max(gaps) < 0.5, gaps
    record(
        "Step latency",
        "none: tool result to the next model call, worker process on a local dev server",
        "the next model call is scheduled in the workflow task that records the tool result (no polling)",
        {"gap (max of 3)": f"{max(gaps) * 1000:.0f} ms"},
    )


async def _timers(handle, prefix: str) -> int:
    """The timers of the session whose summary starts with `prefix`."""
    from temporalio.api.enums.v1 import EventType
    from temporalio.converter import PayloadConverter

    count = 0
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_TIMER_STARTED and event.user_metadata.HasField("summary"):
            count += PayloadConverter.default.from_payload(event.user_metadata.summary, str).startswith(
                prefix
            )
    return count


async def test_kill_during_a_sleep_wakes_on_time_on_the_other_worker(procs: ProcessHarness):
    workers = await procs.worker_pool(2)
    handle = await procs.start(
        [tool_use("sleep", {"seconds": 8, "reason": "let the deploy settle"}, id="s1"), answer("Checked.")],
        tools=["sleep"],
    )
    sleeping = await wait_for_status(handle, "sleeping")
    await asyncio.sleep(3)  # well into the sleep: a sleep started again would end 3 s late
    first = await holder(handle, workers)
    second = next(w for w in workers if w is not first)
    first.kill()
    # Read as `client.py status` reads it (from the history, no query): a query sent at once
    # may wait on the dead worker's sticky queue past the sleep's end on a loaded machine.
    after = await wait_for_status(handle, "sleeping", queried=False)
    assert after.wake_at == sleeping.wake_at

    result = await result_of(handle)
    assert result.status == "completed" and result.answer == "Checked."
    history = await handle.query("history", result_type=SessionHistory)
    [call] = history.tool_calls
    # The model hears how long it slept: 8 s, or a second more when a loaded machine ran the
    # task after the timer late (the wake time itself is checked below).
    assert call.status == "done" and call.output in ("slept 8s", "slept 9s"), call.output
    assert sleeping.wake_at is not None and call.ended_at is not None
    late = (call.ended_at - sleeping.wake_at).total_seconds()
    assert 0 <= late < 2.5, late
    assert await _timers(handle, "sleep 8s") == 1
    assert len(procs.requests(handle.id, step=2)) == 1
    assert second.alive()
    record(
        AREA,
        "kill -9 of the worker 3 s into an 8 s `sleep`, a second worker polling",
        "the other worker took the session up, still sleeping with the same wake time; it woke on time (one timer, never restarted) and the session completed",
        {"woke after the wake time by": _secs(late)},
    )


async def test_kill_during_an_event_wait_loses_no_event(procs: ProcessHarness):
    workers = await procs.worker_pool(2)
    handle = await procs.start(
        [
            tool_use("wait_for_event", {"name": "build", "timeout_seconds": 600}, id="w1"),
            tool_use("wait_for_event", {"name": "review", "timeout_seconds": 600}, id="w2"),
            answer("Built and reviewed."),
        ],
        tools=["wait_for_event"],
    )
    waiting = await wait_for_status(handle, "waiting_event")
    kept = await handle.execute_update(
        "send_event", EventInput(name="review", data="approved"), result_type=str
    )
    assert kept == "event review kept for the next wait_for_event review (1 kept)"
    first = await holder(handle, workers)
    first.kill()

    asked = time.monotonic()
    after = await wait_for_status(handle, "waiting_event")
    assert after.waiting_for == waiting.waiting_for  # the same wait, the same deadline
    reply = await handle.execute_update(
        "send_event", EventInput(name="build", data={"id": 7}), result_type=str
    )
    answered = time.monotonic() - asked
    assert reply == "event build delivered to w1"
    result = await result_of(handle)
    assert result.status == "completed" and result.answer == "Built and reviewed."
    history = await handle.query("history", result_type=SessionHistory)
    assert [(c.tool_use_id, c.output) for c in history.tool_calls] == [("w1", '{"id":7}'), ("w2", "approved")]
    assert await _timers(handle, "event build") == 1
    record(
        AREA,
        "kill -9 of the worker while the session waits for an event, another event already kept; the event sent after the kill",
        "the other worker took the session up with the same wait and deadline; the event sent after the kill and the one kept before it both reached their waits; the session completed",
        {"status and event answered after the kill within": _secs(answered)},
    )
