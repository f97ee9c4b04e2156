"""Round trips through the Temporal server alone: what its settings cost an agent step.

One workflow per kind, run by an in-process worker on an otherwise idle server, times
N consecutive round trips with `workflow.now()` (the start time of each workflow task):

- `activity`: a no-op activity (handed back eagerly with the workflow task's completion),
  its completion, the next workflow task: what a model call or a tool call costs beyond
  its own work;
- `timer`: a 1 ms timer fired and the next workflow task (timers, the session timeout);
- `retry`: an activity that fails once and is retried after 1 ms (a model call's retry).

Timers and retries take about a second on the dev server whatever their duration, so
they are timed over fewer round trips (`slow_n`).
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import uuid
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.worker import Worker

KINDS = ("activity", "timer", "retry")
TIMEOUT = timedelta(seconds=30)


@activity.defn(name="probe_noop")
async def probe_noop() -> None:
    return None


@activity.defn(name="probe_flaky")
async def probe_flaky() -> None:
    if activity.info().attempt == 1:
        raise ApplicationError("the first attempt fails", category=ApplicationErrorCategory.BENIGN)


@workflow.defn(name="ProbeWorkflow")
class ProbeWorkflow:
    @workflow.run
    async def run(self, kind: str, n: int) -> list[float]:
        times = [workflow.now().timestamp()]
        for _ in range(n):
            if kind == "activity":
                await workflow.execute_activity(probe_noop, start_to_close_timeout=TIMEOUT)
            elif kind == "timer":
                await workflow.sleep(timedelta(milliseconds=1))
            else:
                await workflow.execute_activity(
                    probe_flaky,
                    start_to_close_timeout=TIMEOUT,
                    retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=1), maximum_attempts=3),
                )
            times.append(workflow.now().timestamp())
        return times


async def connect_when_ready(address: str, wait_s: float = 60) -> Client:
    """Connect to a dev server that may still be starting ("Frontend is not healthy yet")."""
    deadline = asyncio.get_running_loop().time() + wait_s
    while True:
        try:
            return await Client.connect(address)
        except RuntimeError as err:
            if "not healthy yet" not in str(err) or asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.2)


async def round_trips(address: str, n: int = 100, slow_n: int = 5, burst: int = 20) -> dict[str, float]:
    """Median round trip of each kind, in milliseconds.

    The server's queues allow a burst of polls above their rate limit: the first `burst`
    activity round trips are left out, so the median is the sustained figure.
    """
    client = await connect_when_ready(address)
    queue = f"probe-{uuid.uuid4().hex[:6]}"
    found: dict[str, float] = {}
    async with Worker(
        client, task_queue=queue, workflows=[ProbeWorkflow], activities=[probe_noop, probe_flaky]
    ):
        await client.execute_workflow(
            ProbeWorkflow.run, args=["activity", 3], id=f"{queue}-warm", task_queue=queue
        )
        for kind in KINDS:
            times = await client.execute_workflow(
                ProbeWorkflow.run,
                args=[kind, n if kind == "activity" else slow_n],
                id=f"{queue}-{kind}",
                task_queue=queue,
            )
            trips = [b - a for a, b in itertools.pairwise(times)]
            found[kind] = statistics.median(trips[burst:] if kind == "activity" else trips) * 1000
    return found
