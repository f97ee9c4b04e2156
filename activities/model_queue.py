"""The model calls' own task queue, and the worker that polls it beside the session worker.

A session schedules its model calls on `<its task queue>-model` (workflows/options.py), and
every worker process polls that queue with a second `Worker` that runs only the model
activity; `ModelQueueWorker` starts, drains and stops the two together. The queue is
there so that the Temporal server can limit the model calls of every worker together:
`worker.py --model-calls-per-second N` (or `AGENT_MODEL_CALLS_PER_SECOND`) sets the
queue's rate on the server when the worker starts (`set_queue_rate`, Temporal's
UpdateTaskQueueConfig): the server keeps it for the queue as a whole, whichever workers
poll it, until it is set again. The model worker also names the rate in its polls
(`max_task_queue_activities_per_second`), which the server uses where the configured rate
cannot be set (a namespace that refuses the call). The server's limiter lets one second's
worth of calls through at once after an idle spell, so the rate asked for is
`RATE_HEADROOM` of N: any 5 seconds then hold at most 6 N calls, as one second's burst
plus five at N would, with room for a worker that is slow to pass a call on (a busy
machine delivers a second's calls late, together with the next second's).
The SDK hands an activity to the worker that scheduled it (eager dispatch) only on the
workflow's own queue, which is why the model calls are on another: an eager call would
never pass through the queue's limit.

The model worker has the session worker's identity, so a follower that finds the worker
of a session's model call by its identity (sessions/live_text.py) finds the live text
server of the same process (activities/live_server.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import RateLimit
from temporalio.api.workflowservice.v1 import UpdateTaskQueueConfigRequest
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Worker

RATE_HEADROOM = 0.8


def server_rate(per_second: float) -> float:
    """The rate asked of the server for a limit of `per_second` model calls a second."""
    return per_second * RATE_HEADROOM


async def set_queue_rate(client: Client, queue: str, per_second: float) -> str | None:
    """Set the rate of the model calls' queue `queue` on the server, for every worker that
    polls it; None once set, else why not (the pollers' rate then applies)."""
    update = UpdateTaskQueueConfigRequest.RateLimitUpdate(
        rate_limit=RateLimit(requests_per_second=server_rate(per_second)),
        reason=f"worker.py --model-calls-per-second {per_second:g}",
    )
    try:
        await client.workflow_service.update_task_queue_config(
            UpdateTaskQueueConfigRequest(
                namespace=client.namespace,
                identity=client.identity,
                task_queue=queue,
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
                update_queue_rate_limit=update,
            )
        )
    except RPCError as err:
        return err.message
    return None


class ModelQueueWorker(Worker):
    """A Worker that runs the worker of its model calls' queue beside it: the two start
    together, drain together on shutdown, and a fatal error of either stops both."""

    def __init__(self, *args: Any, model_worker: Worker, **kwargs: Any):
        super().__init__(*args, **kwargs)  # pyright: ignore[reportUnknownMemberType]  (the SDK's activities parameter is an untyped callable)
        self.model_worker = model_worker

    async def run(self) -> None:
        model = asyncio.create_task(self.model_worker.run(), name="model call worker")
        main = asyncio.create_task(super().run(), name="session worker")
        try:
            await asyncio.wait([main, model], return_when=asyncio.FIRST_COMPLETED)
            if model.done() and not main.done():
                await super().shutdown()  # the model worker failed: stop this one too
            await main
        finally:
            if not main.done():
                main.cancel()
            await self.model_worker.shutdown()
            with contextlib.suppress(asyncio.CancelledError):
                await model  # its failure, if it failed, is raised here

    async def shutdown(self) -> None:
        await asyncio.gather(super().shutdown(), self.model_worker.shutdown())
