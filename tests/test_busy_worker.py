"""A worker that is alive but busy is not taken for a dead one.

Two `python worker.py --heartbeat-timeout 3` processes beside four CPU-bound processes (on
a machine with fewer cores than that): a 10 s at-most-once tool on the event loop and a 6 s
synchronous tool that computes in its thread (holding the interpreter most of the time)
each run once, heartbeating every second, and the session completes. A tool that blocks
the event loop itself (an `async def` calling a blocking function) would stop the
heartbeats with everything else on the worker: docs/operations/crashes.md.

The two workers have the failover watch too (infra/failover.py, on by default): each
watches the other's worker heartbeats beside the load, and neither is taken for dead.

And the heartbeats of a worker killed mid-call (with `--heartbeat-timeout 3`, the failover
watch off) still count: the retry carries on the count
the last recorded heartbeat holds, so the session's `temporal_actions` is its histories'
actions plus every heartbeat the server took.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from devservers import processes
from tests.conftest import answer, tool_use
from tests.support.procs import (
    ProcessHarness,
    effects_of,
    events_of,
    holder,
    result_of,
    wait_for_model_request,
)
from tests.support.reliability import record
from tests.test_actions import Counters, counted
from workflows.contract import SessionHistory

pytestmark = pytest.mark.process

BURNERS = 4


@pytest.fixture
def cpu_load() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Four processes that each keep a core busy, ended by their PID."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
               for _ in range(BURNERS)]  # fmt: skip
    try:
        yield burners
    finally:
        for burner in burners:
            processes.kill(burner)


async def test_a_busy_worker_is_not_taken_for_dead(
    procs: ProcessHarness, cpu_load: list[subprocess.Popen[bytes]]
):
    """Both ways of finding a dead worker, beside the load at once: two workers, each with
    `--heartbeat-timeout 3` and its failover watch (on by default), watch each other."""
    workers = await procs.worker_pool(
        2, "--heartbeat-timeout", "3", "--tools", "tests.support.load_tools:TOOLS"
    )
    handle = await procs.start([
        tool_use("slow_charge", {"amount": 5, "seconds": 10}, id="c1"),
        tool_use("crunch", {"seconds": 6}, id="k1"),
        answer("Charged and computed."),
    ])  # fmt: skip
    result = await result_of(handle, timeout=180)
    load = os.getloadavg()[0]
    assert all(b.poll() is None for b in cpu_load), "the load ran throughout"
    assert result.status == "completed" and result.answer == "Charged and computed."
    assert len(effects_of(handle.id, "slow_charge")) == 1 and len(effects_of(handle.id, "crunch")) == 1
    history = await handle.query("history", result_type=SessionHistory)
    calls = {c.tool_use_id: c for c in history.tool_calls}
    assert calls["c1"].status == "done" and calls["c1"].output == "charged 5"
    assert calls["k1"].status == "done" and (calls["k1"].output or "").startswith("crunched ")
    events = await events_of(handle)
    assert not [e for e in events if e.type in ("ACTIVITY_TASK_TIMED_OUT", "ACTIVITY_TASK_FAILED")]
    tools = [e.raw.activity_task_scheduled_event_attributes for e in events
             if e.type == "ACTIVITY_TASK_SCHEDULED" and e.activity == "run_tool"]  # fmt: skip
    assert [t.heartbeat_timeout.ToTimedelta().total_seconds() for t in tools] == [3.0, 3.0]
    started = [e.raw.activity_task_started_event_attributes.attempt for e in events
               if e.type == "ACTIVITY_TASK_STARTED"]  # fmt: skip
    assert started and set(started) == {1}
    assert all(w.alive() and "sent no heartbeat" not in w.log() for w in workers), procs.workers.logs()
    # What the session counts beyond its history is the heartbeats its tools sent: one a
    # second through 16 s of tools (the first after one interval).
    heartbeats = result.temporal_actions - (await counted(procs.client, handle.id)).total
    assert 11 <= heartbeats <= 17, heartbeats
    record(
        "Worker crashes (kill -9)",
        f"two live workers under load: {BURNERS} CPU-bound processes beside them, each with "
        "`--heartbeat-timeout 3` and the failover watch (on by default), a 10 s at-most-once tool on the "
        "event loop and a 6 s CPU-bound synchronous tool",
        "both ran once on their first attempt, no heartbeat timed out, neither worker took the other for "
        "dead; the session completed",
        {"load average (1 min) at the end": f"{load:.1f}", "cores": os.cpu_count(), "heartbeats": heartbeats},
    )


async def test_a_killed_workers_heartbeats_are_counted_by_the_retry(procs: ProcessHarness, dev_server):
    counters = Counters(dev_server)
    workers = await procs.worker_pool(2, "--heartbeat-timeout", "3", "--no-failover-watch")
    handle = await procs.start(
        [{**answer("from the attempt that died"), "delay": 30}, answer("from the retry")]
    )
    await wait_for_model_request(procs.fake_model, handle.id, step=1)
    await asyncio.sleep(3.5)  # three beats, at 1, 2 and 3 s
    (await holder(handle, workers)).kill()
    result = await result_of(handle, timeout=60)
    assert result.status == "completed" and result.answer == "from the retry"
    heartbeats, _ = await counters.since()
    assert heartbeats >= 3
    assert result.temporal_actions == (await counted(procs.client, handle.id, heartbeats)).total
