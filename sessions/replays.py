"""Replaying a session's history in this process, with its worker's workflow code: what
followers (sessions/follow.py) and readers (sessions/reading.py) share.

A replay runs the history through the last completed workflow task and the events its
completion wrote (`durable_cut`): an event the workflow has not yet seen would be
replayed as a task the worker never ran (with another `workflow.now()`), and a task in
flight may still fail. The replayer's safe eviction is off: it would cancel the replayed
run, and the workflow answers a cancel by publishing `end: cancelled`. The replayed run
(`Replayed`) is kept for its caller, which discards it when done. The worker's identity
carries the fingerprint of its workflow code (infra/fingerprint.py), and a history is
replayed only when its latest task was completed by this process's own code
(`code_check`). The SDK's worker is imported when the first replayer is made, not before:
a command that never replays does not pay for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, NamedTuple

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory

from infra.fingerprint import fingerprint_of

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


def _capture() -> Any:
    """An interceptor that keeps each replayed run's workflow object, by workflow id, in its
    `runs`: one per replayer."""
    from temporalio import workflow
    from temporalio.worker import (
        ExecuteWorkflowInput,
        Interceptor,
        WorkflowInboundInterceptor,
        WorkflowInterceptorClassInput,
    )

    class Capture(Interceptor):
        def __init__(self) -> None:
            self.runs: dict[str, tuple[Any, asyncio.AbstractEventLoop]] = {}

        def workflow_interceptor_class(
            self, input: WorkflowInterceptorClassInput
        ) -> type[WorkflowInboundInterceptor]:
            runs = self.runs

            class Keep(WorkflowInboundInterceptor):
                async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                    # The workflow object, and the instance's loop (to close its coroutines).
                    runs[workflow.info().workflow_id] = (workflow.instance(), asyncio.get_running_loop())
                    return await super().execute_workflow(input)

            return Keep

    return Capture()


class Replayed(NamedTuple):
    """A replayed run: the workflow object, and its instance (the loop its code runs in)."""

    workflow: Any
    instance: Any

    def discard(self) -> None:
        _discard(self.instance)


class Replays:
    """One replayer: the worker's workflow code and its `Metering` interceptor, so a replayed
    session counts what the worker's does. One history at a time, each in a replay worker
    of its own (its start costs about a millisecond), so nothing outlives a replay."""

    def __init__(self, client: Client):
        from temporalio.worker import Replayer, UnsandboxedWorkflowRunner

        from workflows.agent import AgentWorkflow
        from workflows.interceptors import Metering

        self.capture = _capture()
        self.replayer = Replayer(
            workflows=[AgentWorkflow],
            namespace=client.namespace,
            data_converter=client.data_converter,  # the payload codec and the external store
            interceptors=[Metering(), self.capture],
            workflow_runner=UnsandboxedWorkflowRunner(),
            disable_safe_workflow_eviction=True,
        )
        self.cpu_seconds = 0.0
        self.count = 0
        self._one_at_a_time = asyncio.Lock()

    async def replay(self, workflow_id: str, events: list[HistoryEvent]) -> Replayed:
        """The run that `events` replay to; the caller discards it when done with it."""

        async def one() -> AsyncIterator[WorkflowHistory]:
            yield WorkflowHistory(workflow_id, events)

        async with self._one_at_a_time:
            self.capture.runs.pop(workflow_id, None)
            cpu = time.process_time()
            try:
                async with self.replayer.workflow_replay_iterator(one()) as results:
                    [result] = [r async for r in results]
            except Exception as err:
                raise CannotReplay(f"the replay stopped: {err}") from err
            finally:
                self.cpu_seconds += time.process_time() - cpu
                self.count += 1
            run = self.capture.runs.pop(workflow_id, None)
        if result.replay_failure is not None:
            if run is not None:
                _discard(run[1])
            raise CannotReplay(f"the replay failed: {result.replay_failure}")
        if run is None:  # its first task failed (e.g. an input this process cannot read)
            raise CannotReplay("the replayed run never started")
        return Replayed(*run)

    async def items(self, workflow_id: str, events: list[HistoryEvent]) -> list[tuple[int, str, Any]]:
        """(offset, topic, payload) of the stream log the replayed run built."""
        run = await self.replay(workflow_id, events)
        try:
            stream = run.workflow.stream
            base = stream._base_offset  # pinned by tests/test_follow.py
            return [(base + i, item.topic, item.data) for i, item in enumerate(stream._log)]
        finally:
            run.discard()


def _discard(loop: asyncio.AbstractEventLoop) -> None:
    """Close the coroutines of a replayed run, which nothing tears down (no safe eviction).

    Left to the garbage collector, each would run its `finally` blocks outside the
    workflow's loop, and print the error that makes ("Not in workflow event loop")."""
    for task in asyncio.all_tasks(loop):
        task._log_destroy_pending = False  # pyright: ignore[reportAttributeAccessIssue]
        with contextlib.suppress(BaseException):
            task.get_coro().close()  # pyright: ignore[reportOptionalMemberAccess]
