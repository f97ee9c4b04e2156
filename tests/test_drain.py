"""SIGTERM drains a worker: it stops polling, lets its running tool finish, and exits,
and the session's next step runs on another worker at once, not after a heartbeat
timeout. Real `python worker.py` processes, signalled and reaped by PID."""

from __future__ import annotations

import pytest

from tests.conftest import answer, tool_use
from tests.support.procs import (
    ProcessHarness,
    effects_of,
    events_of,
    first_after,
    result_of,
    wait_for_effects,
    wait_for_model_request,
)
from tests.support.reliability import record

pytestmark = pytest.mark.process

TOOL_SECONDS = 4.0
HANDOVER_BOUND_S = 2.0  # the drained tool's result to the next step on the other worker


async def test_sigterm_lets_the_tool_finish_and_the_other_worker_goes_on(procs: ProcessHarness):
    workers = await procs.worker_pool(2)
    handle = await procs.start(
        [tool_use("slow_upsert", {"key": "d1", "seconds": TOOL_SECONDS}, id="d1"), answer("Saved.")]
    )
    [run] = await wait_for_effects(handle.id, "slow_upsert")
    draining = next(w for w in workers if w.pid == run["pid"])
    other = next(w for w in workers if w is not draining)
    signalled_at = draining.terminate()
    exited_at = await draining.exited(timeout=TOOL_SECONDS + 20)
    [next_call] = await wait_for_model_request(procs.fake_model, handle.id, step=2)

    result = await result_of(handle)
    assert result.status == "completed" and result.answer == "Saved."
    assert draining.process.returncode == 0, draining.log()
    # The tool ran once, on the draining worker, to its end: no retry, no error result.
    assert [r["pid"] for r in effects_of(handle.id, "slow_upsert")] == [draining.pid]
    tool_result = next_call["body"]["messages"][-1]["content"][0]
    assert not tool_result.get("is_error"), tool_result
    events = await events_of(handle)
    tool_done = first_after(events, signalled_at, "ACTIVITY_TASK_COMPLETED", "run_tool")
    model_started = first_after(events, signalled_at, "ACTIVITY_TASK_STARTED", "call_model")
    assert model_started.raw.activity_task_started_event_attributes.identity.startswith(f"{other.pid}@")
    assert not any(e.type.endswith("TIMED_OUT") for e in events), [e.type for e in events]
    assert exited_at >= tool_done.epoch - 0.5  # it did not leave before its tool was done
    # The next step does not wait for the draining worker to exit: it starts once the
    # tool's result is in, on the worker that still polls.
    handover = next_call["at"] - tool_done.epoch
    assert 0 <= handover < HANDOVER_BOUND_S, handover
    assert next_call["at"] - exited_at < HANDOVER_BOUND_S
    record(
        "Deploys and drains",
        f"SIGTERM to the worker running a {TOOL_SECONDS:g} s idempotent tool (`slow_upsert`), a second worker polling",
        "the tool finished on the draining worker (one run, no error), which then exited 0; the next model call ran on the other worker; no timeout in the history",
        {
            "SIGTERM to tool done": f"{tool_done.epoch - signalled_at:.1f} s",
            "SIGTERM to worker exited": f"{exited_at - signalled_at:.1f} s",
            "tool done to next model call on the other worker": f"{handover:.2f} s",
            "worker exited to next model call": f"{next_call['at'] - exited_at:+.2f} s",
        },
    )


async def test_capacity_flags_bound_what_a_worker_runs_at_once(procs: ProcessHarness):
    """`--max-concurrent-activities 1`: two sessions' 2 s tools run one after the other."""
    await procs.worker("--max-concurrent-activities", "1", "--max-cached-workflows", "10")
    handles = [
        await procs.start(
            [tool_use("slow_upsert", {"key": f"c{i}", "seconds": 2}, id=f"c{i}"), answer("Saved.")]
        )
        for i in (1, 2)
    ]
    for handle in handles:
        assert (await result_of(handle)).status == "completed"
    first, second = sorted(effects_of(h.id, "slow_upsert")[0]["at"] for h in handles)
    assert second - first >= 2.0, "with one activity slot the second tool waits for the first"
