"""A session's durable events, read from its history: no billable action per follower.

Reading a session's stream through `WorkflowStreamClient.subscribe` polls it with updates,
and every update is a billable action recorded in the session's history. `follow` yields
the same items at the same offsets without one: it long-polls the session's history
(GetWorkflowExecutionHistory with `wait_new_event`, which is not an action), replays it
here with `Replayer` running AgentWorkflow, and reads the replayed workflow's stream log.
Continue-as-new is followed (the new run carries the stream's last items at their offsets,
workflows/archive.py: a follower that starts before the first of them gets the items from
there on, and its reader says so, cli/watch.py and service/sse.py).

What keeps the replay equal to the worker's stream:
- the history is replayed through the last completed workflow task and the events its
  completion wrote (`durable_cut`): an event the workflow has not yet seen would be
  replayed as a task the worker never ran (with another `workflow.now()`), and a task in
  flight may still fail;
- the replayer's safe eviction is off: it would cancel the replayed run, and the workflow
  answers a cancel by publishing `end: cancelled`;
- each follower has its own replayer and its own capture of the replayed workflow;
- the worker's identity carries the fingerprint of its workflow code (infra/fingerprint.py),
  and a follower replays only histories whose latest task its own code completed.

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
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.workflow_streams import WorkflowStreamClient, WorkflowStreamItem
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    Replayer,
    UnsandboxedWorkflowRunner,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from infra.fingerprint import code_fingerprint, fingerprint_of
from workflows.events import TOPICS

log = logging.getLogger("sessions.follow")
MIN_REPLAY_INTERVAL = 0.5  # seconds between two replays of one follower
PAGE_SIZE = 1000  # history events a poll returns at most; a full page means more are ready
POLL_COOLDOWN = timedelta(milliseconds=200)  # the update poll's, when falling back

_E = EventType
# What a workflow task's completion writes after its WORKFLOW_TASK_COMPLETED: its commands'
# events and the updates it accepted or completed.
_COMPLETION_EVENTS = frozenset({
    _E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, _E.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED,
    _E.EVENT_TYPE_TIMER_STARTED, _E.EVENT_TYPE_TIMER_CANCELED, _E.EVENT_TYPE_MARKER_RECORDED,
    _E.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES, _E.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED,
    _E.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED,
    _E.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
    _E.EVENT_TYPE_REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED, _E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED,
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, _E.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED, _E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
    _E.EVENT_TYPE_NEXUS_OPERATION_SCHEDULED, _E.EVENT_TYPE_NEXUS_OPERATION_CANCEL_REQUESTED,
})  # fmt: skip
_RUN_CLOSED = frozenset({
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, _E.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT, _E.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED, _E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
})  # fmt: skip


class CannotReplay(Exception):
    """This process cannot replay the session to the worker's stream: the reason."""


def durable_cut(events: Sequence[HistoryEvent]) -> int:
    """How many leading events to replay: through the last completed workflow task and the
    events its completion wrote; 0 when no workflow task has completed yet."""
    last = next((i for i in range(len(events) - 1, -1, -1) if events[i].event_type == _E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED), None)  # fmt: skip
    if last is None:
        return 0
    cut = last + 1
    while cut < len(events) and events[cut].event_type in _COMPLETION_EVENTS:
        cut += 1
    return cut


def code_check(events: Sequence[HistoryEvent], fingerprint: str) -> str | None:
    """None when the latest completed workflow task was this code's; otherwise why not."""
    for event in reversed(events):
        if event.event_type == _E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            identity = event.workflow_task_completed_event_attributes.identity
            theirs = fingerprint_of(identity)
            if theirs == fingerprint:
                return None
            if theirs is None:
                return f"its worker ({identity}) names no workflow code fingerprint"
            return f"its worker runs other workflow code (wf={theirs}, here wf={fingerprint})"
    return None


class _Capture(Interceptor):
    """Keeps each replayed run's workflow object, by workflow id: one per replayer."""

    def __init__(self) -> None:
        self.runs: dict[str, tuple[Any, asyncio.AbstractEventLoop]] = {}

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        runs = self.runs

        class _Keep(WorkflowInboundInterceptor):
            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                # The workflow object, and the instance's loop (to close its coroutines).
                runs[workflow.info().workflow_id] = (workflow.instance(), asyncio.get_running_loop())
                return await super().execute_workflow(input)

        return _Keep


class _Replays:
    """One replayer and its replay worker, fed one history at a time."""

    def __init__(self, client: Client):
        from workflows.agent import AgentWorkflow

        self.capture = _Capture()
        self.replayer = Replayer(
            workflows=[AgentWorkflow],
            namespace=client.namespace,
            data_converter=client.data_converter,  # the payload codec and the external store
            interceptors=[self.capture],
            workflow_runner=UnsandboxedWorkflowRunner(),
            disable_safe_workflow_eviction=True,
        )
        self.cpu_seconds = 0.0
        self.count = 0
        self._histories: asyncio.Queue[WorkflowHistory | None] = asyncio.Queue()
        self._results: asyncio.Queue[Any] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def _feed(self) -> AsyncIterator[WorkflowHistory]:
        while (history := await self._histories.get()) is not None:
            yield history

    async def _run(self) -> None:
        try:
            async with self.replayer.workflow_replay_iterator(self._feed()) as results:
                async for result in results:
                    await self._results.put(result)
        except BaseException as err:
            await self._results.put(err)
            raise

    async def items(self, workflow_id: str, events: list[HistoryEvent]) -> list[tuple[int, str, Any]]:
        """(offset, topic, payload) of the stream log the replayed run built."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"replay {workflow_id}")
        self.capture.runs.pop(workflow_id, None)
        cpu = time.process_time()
        await self._histories.put(WorkflowHistory(workflow_id, events))
        result = await self._results.get()
        self.cpu_seconds += time.process_time() - cpu
        self.count += 1
        if isinstance(result, BaseException):
            raise CannotReplay(f"the replay stopped: {result}") from result
        run = self.capture.runs.pop(workflow_id, None)
        try:
            if result.replay_failure is not None:
                raise CannotReplay(f"the replay failed: {result.replay_failure}")
            if run is None:  # its first task failed (e.g. an input this process cannot read)
                raise CannotReplay("the replayed run never started")
            stream = run[0].stream
            base = stream._base_offset  # pinned by tests/test_follow.py
            return [(base + i, item.topic, item.data) for i, item in enumerate(stream._log)]
        finally:
            if run is not None:
                _discard(run[1])

    async def aclose(self) -> None:
        if self._task is not None:
            if not self._task.done():
                await self._histories.put(None)
            with contextlib.suppress(BaseException):  # reported to the replay that waited for it
                await self._task


def _discard(loop: asyncio.AbstractEventLoop) -> None:
    """Close the coroutines of a replayed run, which nothing tears down (no safe eviction).

    Left to the garbage collector, each would run its `finally` blocks outside the
    workflow's loop, and print the error that makes ("Not in workflow event loop")."""
    for task in asyncio.all_tasks(loop):
        task._log_destroy_pending = False  # pyright: ignore[reportAttributeAccessIssue]
        with contextlib.suppress(BaseException):
            task.get_coro().close()  # pyright: ignore[reportOptionalMemberAccess]


async def _from_history(
    client: Client, session_id: str, start: list[int], topics: Sequence[str], replays: _Replays
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
    replays = _Replays(client)
    try:
        try:
            async for item in _from_history(client, session_id, start, topics, replays):
                yield item
            return
        except CannotReplay as why:
            (say or log.warning)(f"session {session_id}: following through updates: {why}")
    finally:
        await replays.aclose()
    stream = WorkflowStreamClient.create(client, session_id)
    async for item in stream.subscribe(list(topics), from_offset=start[0], poll_cooldown=POLL_COOLDOWN):
        yield item
