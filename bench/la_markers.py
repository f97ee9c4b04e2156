"""Where a local activity's marker lands when a query splits its workflow task.

`python -m bench.la_markers [--sessions N]` starts a dev server and runs N small
workflows, each asking a patch and running a local activity (an `asyncio.sleep` of 0, 2,
5, 10 or 20 ms) in each of 6 workflow tasks, while a client queries it every few
milliseconds. A query that comes with a workflow task makes the worker complete that task
at once and ask for a new one, and the local activity's result then reaches the workflow
in the new task. For each such activity it prints whether its marker was recorded with
the completed task or with the new one, by the activity's length: what
workflows/metering.py's `SLOW_LOCAL_MS` rests on.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import uuid
from collections import Counter
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from devservers import temporal_server

LENGTHS_MS = (0, 2, 5, 10, 20)
TASKS = 6


@activity.defn
async def pause(ms: int) -> None:
    await asyncio.sleep(ms / 1000)


@workflow.defn(sandboxed=False)
class Splits:
    """Each task: a timer's end, a patch, a local activity; the history lengths at which
    each activity was scheduled and its result seen."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []

    @workflow.run
    async def run(self, ms: int) -> list[tuple[int, int]]:
        for n in range(TASKS):
            await workflow.sleep(0.15)
            workflow.patched(f"task-{n}")
            scheduled = workflow.info().get_current_history_length()
            await workflow.execute_local_activity(pause, ms, start_to_close_timeout=timedelta(seconds=10))
            self.seen.append((scheduled, workflow.info().get_current_history_length()))
        return self.seen

    @workflow.query
    def progress(self) -> int:
        return len(self.seen)


async def _ask(handle: WorkflowHandle) -> None:
    while True:
        with contextlib.suppress(Exception):
            await handle.query(Splits.progress)
        await asyncio.sleep(random.uniform(0, 0.01))


async def _markers(handle: WorkflowHandle) -> set[int]:
    """The workflow tasks (by history length as each started) whose completion recorded a
    local activity's marker."""
    tasks: set[int] = set()
    started = 0
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            started = event.event_id
        elif (
            event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
            and event.marker_recorded_event_attributes.marker_name == "core_local_activity"
        ):
            tasks.add(started)
    return tasks


async def measure(address: str, sessions: int) -> Counter[tuple[int, str]]:
    client = await Client.connect(address)
    queue = f"la-markers-{uuid.uuid4().hex[:6]}"
    found: Counter[tuple[int, str]] = Counter()
    async with Worker(
        client, task_queue=queue, workflows=[Splits], activities=[pause],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):  # fmt: skip
        for n in range(sessions):
            ms = LENGTHS_MS[n % len(LENGTHS_MS)]
            handle = await client.start_workflow(
                Splits.run, ms, id=f"la-markers-{uuid.uuid4().hex[:8]}", task_queue=queue
            )
            asker = asyncio.create_task(_ask(handle))
            try:
                seen = await handle.result()
            finally:
                asker.cancel()
            markers = await _markers(handle)
            for scheduled, result_at in seen:
                found[(ms, "activities")] += 1
                if scheduled != result_at:
                    found[(ms, "completed task" if scheduled in markers else "new task")] += 1
    return found


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.la_markers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=50, help="workflows to run (default 50)")
    args = parser.parse_args()
    server = temporal_server.start()
    try:
        found = asyncio.run(measure(server.address, args.sessions))
    finally:
        server.stop()
    print("length  local activities  result in a later task: marker with the completed task / the new task")
    for ms in LENGTHS_MS:
        later = found[(ms, "completed task")] + found[(ms, "new task")]
        print(f"{ms:>4} ms  {found[(ms, 'activities')]:>16}  {later:>3}: "
              f"{found[(ms, 'completed task')]} / {found[(ms, 'new task')]}")  # fmt: skip


if __name__ == "__main__":
    main()
