"""The model calls' own task queue, and the worker that polls it beside the session worker.

A session schedules its model calls on `<its task queue>-model` (workflows/options.py), and
every worker process polls that queue with a second `Worker` that runs only the model
activity; `ModelQueueWorker` starts, drains and stops the two together. The queue is
there so that the Temporal server can limit the model calls of every worker together:
`worker.py --model-calls-per-second N` (or `AGENT_MODEL_CALLS_PER_SECOND`) sets the
queue's `max_task_queue_activities_per_second`, which the server keeps for the queue as a
whole, whichever worker polls it. The server takes the rate from the pollers (the latest
poll that names one wins), so every worker of a deployment should give the same value.
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

from temporalio.worker import Worker


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
