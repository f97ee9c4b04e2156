"""A session's durable events, read from its history: no billable action per follower.

Reading a session's stream through `WorkflowStreamClient.subscribe` polls it with updates,
and every update is a billable action recorded in the session's history. `follow` yields
the same items at the same offsets without one: it long-polls the session's history
(GetWorkflowExecutionHistory with `wait_new_event`, which is not an action), replays it
here with `Replayer` running AgentWorkflow, and reads the replayed workflow's stream log.
Continue-as-new is followed (the new run carries the stream's last items at their offsets,
workflows/archive.py: a follower that starts before the first of them gets the items from
there on, and its reader says so, cli/watch.py and service/sse.py).

What keeps the replay equal to the worker's stream is sessions/replays.py's (the durable
cut, no safe eviction, this process's code only); each follower has its own replayer and
its own capture of the replayed workflow.

One difference the replay cannot avoid: an item's `at` is the time of the workflow task that
made it, and a query that came with a workflow task while a local activity ran (an input
check, a local tool) makes the worker complete that task at once and hand the activity's
result to the next one; when the activity ended first, its marker is in the completed task,
and the replay hands the result to that one. The items after it in that task then carry
the completed task's time, earlier by the time between the two tasks (tens of milliseconds),
in the replay than in the worker's stream (workflows/metering.py, "Not exact").

When the code differs, or a replay fails, the follower says why once (`say`) and reads on
through the update poll from the next offset: billable, but correct. A replay costs CPU
here in proportion to the run's length (docs/operations/sizing.md); at most one runs every
`MIN_REPLAY_INTERVAL` seconds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from datetime import timedelta
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.client import Client
from temporalio.contrib.workflow_streams import WorkflowStreamClient, WorkflowStreamItem

from infra.fingerprint import code_fingerprint
from sessions.replays import CannotReplay, Replays, code_check, durable_cut
from workflows.events import TOPICS

log = logging.getLogger("sessions.follow")
MIN_REPLAY_INTERVAL = 0.5  # seconds between two replays of one follower
PAGE_SIZE = 1000  # history events a poll returns at most; a full page means more are ready
POLL_COOLDOWN = timedelta(milliseconds=200)  # the update poll's, when falling back

_E = EventType
_RUN_CLOSED = frozenset({
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, _E.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT, _E.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED, _E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
})  # fmt: skip


async def _from_history(
    client: Client, session_id: str, start: list[int], topics: Sequence[str], replays: Replays
) -> AsyncIterator[WorkflowStreamItem[Any]]:
    """The items from offset `start[0]` (kept up to date), run after run, until the session closes."""
    fingerprint = code_fingerprint()
    converter = client.data_converter.payload_converter
    run_id = ""  # the latest run, then each run it continues as
    last_replay = 0.0
    while True:
        events: list[HistoryEvent] = []
        token = b""
        replayed = 0  # events of the last replay's cut
        next_run: str | None = None  # set when the run closes: its successor, or ""
        while True:
            response = await client.workflow_service.get_workflow_execution_history(
                GetWorkflowExecutionHistoryRequest(
                    namespace=client.namespace,
                    execution=WorkflowExecution(workflow_id=session_id, run_id=run_id),
                    maximum_page_size=PAGE_SIZE,
                    next_page_token=token,
                    wait_new_event=True,
                )
            )
            new = list(response.history.events)
            token = response.next_page_token
            for event in new:
                # A long poll may send an event again (a workflow task's scheduling, once
                # tentative): the later copy replaces it and whatever followed it.
                del events[event.event_id - 1 :]
                events.append(event)
            for event in new:
                if event.event_type == _E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                    next_run = event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
                elif event.event_type in _RUN_CLOSED:
                    next_run = ""
            if not token:
                next_run = next_run or ""  # the whole history of a closed run
            if next_run is None and (len(new) >= PAGE_SIZE or not new):
                continue  # more is ready at once, or the long poll timed out
            cut = durable_cut(events)
            if cut > replayed:
                if why := code_check(events[:cut], fingerprint):
                    raise CannotReplay(why)
                if next_run is None:
                    await asyncio.sleep(max(0.0, last_replay + MIN_REPLAY_INTERVAL - time.monotonic()))
                last_replay = time.monotonic()
                replayed = cut
                for offset, topic, payload in await replays.items(session_id, events[:cut]):
                    if offset >= start[0]:
                        start[0] = offset + 1
                        if topic in topics:
                            yield WorkflowStreamItem(
                                topic=topic, data=converter.from_payload(payload), offset=offset
                            )
            if next_run is not None:
                break
        if not next_run:
            return
        run_id = next_run


async def follow(
    client: Client,
    session_id: str,
    from_offset: int = 0,
    topics: Sequence[str] = TOPICS,
    *,
    say: Callable[[str], None] | None = None,
) -> AsyncGenerator[WorkflowStreamItem[Any]]:
    """What `WorkflowStreamClient.subscribe(topics, from_offset=...)` yields, read from the
    session's history while this process runs its worker's workflow code, through the
    update poll once it does not (`say` is told why, once; by default the log)."""
    start = [from_offset]
    try:
        async for item in _from_history(client, session_id, start, topics, Replays(client)):
            yield item
        return
    except CannotReplay as why:
        (say or log.warning)(f"session {session_id}: following through updates: {why}")
    stream = WorkflowStreamClient.create(client, session_id)
    async for item in stream.subscribe(list(topics), from_offset=start[0], poll_cooldown=POLL_COOLDOWN):
        yield item
