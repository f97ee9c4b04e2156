"""A shared model call rate: two real worker processes, each given a limit of 5 model calls
a second (one by `--model-calls-per-second`, one by `AGENT_MODEL_CALLS_PER_SECOND`), and
20 sessions at once. The Temporal server keeps the rate on the model calls' own task
queue, for both workers together, where two workers without it send every call within a
second or two; every session completes.

The server's limiter lets a second's worth of calls through at once after an idle spell,
then keeps the rate; the workers set it a little under the limit (activities/model_queue.py),
so the model server sees at most 30 calls in any 5 s, the first second's burst included;
docs/reference/model-calls.md has the figures.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, answer, tool_use
from tests.support.procs import ProcessHarness, end_if_running, result_of, wait_polling
from tests.support.reliability import record

pytestmark = pytest.mark.process

AREA = "Shared model call rate"
RATE = 5
WINDOW_S = 5.0
MOST_IN_WINDOW = 30
OPENING_S = 2.0
SESSIONS = 20


def busiest_window(times: list[float], window: float = WINDOW_S) -> int:
    """The most calls in any `window` seconds."""
    times = sorted(times)
    most, first = 0, 0
    for last, at in enumerate(times):
        while at - times[first] >= window:
            first += 1
        most = max(most, last - first + 1)
    return most


async def _measure(procs: ProcessHarness, steps: int) -> dict[str, object]:
    """SESSIONS sessions of `steps` model calls each (tool calls, then an answer) on two
    workers that share a limit of RATE calls a second."""
    first = procs.workers.start("--model-calls-per-second", str(RATE))
    procs.workers.env["AGENT_MODEL_CALLS_PER_SECOND"] = str(RATE)
    second = procs.workers.start()

    await asyncio.gather(wait_polling(procs.client, first), wait_polling(procs.client, second))
    turns = [tool_use("get_time", {"timezone_name": "UTC"}, id=f"t{n}") for n in range(steps - 1)]
    handles = await asyncio.gather(*(procs.start([*turns, answer(f"done {n}")]) for n in range(SESSIONS)))
    try:
        results = await asyncio.gather(*(result_of(h, timeout=60 + steps * SESSIONS / RATE) for h in handles))
    finally:
        await asyncio.gather(*(end_if_running(h) for h in handles))
    assert [r.status for r in results] == ["completed"] * SESSIONS, [r.error for r in results]
    assert [r.answer for r in results] == [f"done {n}" for n in range(SESSIONS)]
    ids = {h.id for h in handles}
    times = [r["at"] for r in procs.fake_model.script.requests if r["session"] in ids]
    assert len(times) == SESSIONS * steps
    start = min(times)
    opening = sum(1 for at in times if at - start < OPENING_S)
    busiest = busiest_window(times)
    assert busiest <= MOST_IN_WINDOW, f"{busiest} model calls in {WINDOW_S:g} s"
    span = max(times) - start
    assert span >= (len(times) - 2 * RATE) / RATE  # the limit was in force throughout
    return {
        "model calls": len(times), f"first {OPENING_S:g} s": opening, "busiest 5 s": busiest,
        "seconds": round(span, 1),
    }  # fmt: skip


async def test_two_workers_share_one_rate_of_model_calls(procs: ProcessHarness):
    measured = await _measure(procs, steps=2)
    record(AREA, f"two worker processes with a limit of {RATE} model calls a second, {SESSIONS} sessions of "
                 "2 model calls at once",
           f"every session completed; the model server saw at most {MOST_IN_WINDOW} calls in any 5 s",
           measured)  # fmt: skip


@pytest.mark.slow
async def test_two_workers_share_one_rate_of_model_calls_over_a_longer_run(procs: ProcessHarness):
    measured = await _measure(procs, steps=6)
    record(AREA, f"two worker processes with a limit of {RATE} model calls a second, {SESSIONS} sessions of "
                 "6 model calls at once",
           f"every session completed; the model server saw at most {MOST_IN_WINDOW} calls in any 5 s",
           measured)  # fmt: skip


def test_a_bad_rate_stops_the_worker_with_one_line():
    env = {**os.environ, "AGENT_MODEL_CALLS_PER_SECOND": "fast", "TEMPORAL_ADDRESS": "127.0.0.1:1"}
    done = subprocess.run(
        [sys.executable, "worker.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "error: AGENT_MODEL_CALLS_PER_SECOND: 'fast' is not a number"
    )
    env.pop("AGENT_MODEL_CALLS_PER_SECOND")
    done = subprocess.run(
        [sys.executable, "worker.py", "--model-calls-per-second", "0"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "--model-calls-per-second: '0' must be a positive number" in done.stderr
