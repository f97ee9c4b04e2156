"""A session's `status`, `history` and `state`, read from its history: no billable action.

A query is a billable action (Temporal Cloud bills each one), so a page or a script that
polls a running session once a second would pay one a second. This module answers the
same queries here instead: it reads the current run's history (not billed), replays it
with this process's copy of the workflow code and the worker's `Metering` interceptor, as
followers do (sessions/follow.py), and asks the replayed workflow the query the worker
would have answered, through the same SDK path (a query activation of the replayed
instance). The replay stops where a query of the worker would see the session: after the
last completed workflow task and what its completion wrote (`durable_cut`).

Each process keeps one `Reader` per client: the latest replay of each session it read,
keyed by its run and its history's length, so a read of a session whose history has not
grown costs no replay, and one whose history has grown costs one (bounded, like the run,
by continue-as-new; docs/operations/sizing.md has the CPU it takes).

What a replay cannot see (docs/reference/status-and-history.md):
- updates a validator refused since the last model call: the worker holds them in memory
  until the next model call, a continue-as-new or the session's end records them
  (workflows/metering.py), so `temporal_actions` counts them from then on, not at once;
- a workflow task in flight: a query waits for it, a replay shows the session as its last
  completed task left it.
When this process cannot replay a session (its worker runs other workflow code, or the
replay fails) the reader says why (`CannotReplay`) and the caller asks the worker.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.common.v1 import Payload, WorkflowExecution
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.bridge.proto.workflow_activation import (
    QueryWorkflow,
    WorkflowActivation,
    WorkflowActivationJob,
)
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from infra.errors import Busy, NoWorker, SessionNotFound
from infra.fingerprint import code_fingerprint
from sessions.replays import CannotReplay, Replayed, Replays, code_check, durable_cut

log = logging.getLogger("sessions.reading")
T = TypeVar("T")

PAGE_SIZE = 1000  # history events a read asks for at once
# Replayed runs kept whole (for `history` and `state`), and sessions whose answers are kept.
KEEP_REPLAYED = 32
KEEP_ANSWERS = 4096
FIRST_TASK_WAIT = timedelta(seconds=20)  # as long as a query would wait for a worker
LONG_POLL = timedelta(seconds=5)  # one history long poll while waiting for the first task


@dataclass
class _Entry:
    """The latest replay of a session's run, and what it answered."""

    run_id: str
    length: int  # events read from its history
    cut: int  # events replayed
    replayed: Replayed | None
    answers: dict[str, Payload] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass
class Reader:
    """One process's replays of the sessions it reads, for one client."""

    client: Client
    replays: Replays
    entries: OrderedDict[str, _Entry] = field(default_factory=OrderedDict)
    cpu_seconds: float = 0.0  # spent replaying and answering

    async def answer(
        self, session_id: str, run_id: str, history_length: int, name: str, *, wait: bool = True
    ) -> Payload:
        """The payload the worker would answer query `name` with, for run `run_id` (which
        had `history_length` events or more when it was described). `wait`: for the run's
        first workflow task, when none has completed (a query would wait for a worker)."""
        entry = self.entries.get(session_id)
        if entry is None or entry.run_id != run_id:
            entry = _Entry(run_id=run_id, length=0, cut=0, replayed=None)
            self._keep(session_id, entry)
        async with entry.lock:
            if self.entries.get(session_id) is entry:
                self.entries.move_to_end(session_id)
            if entry.length < history_length:
                await self._replay(session_id, entry, wait=wait)
            found = entry.answers.get(name)
            if found is None:
                if entry.replayed is None:
                    await self._replay(session_id, entry, wait=wait, again=True)
                found = entry.answers[name] = await self._ask(entry, name)
            return found

    async def _replay(self, session_id: str, entry: _Entry, *, wait: bool, again: bool = False) -> None:
        """Read the run's history; replay it if its durable part has grown, or `again`."""
        events = await run_events(self.client, session_id, entry.run_id)
        if durable_cut(events) == 0 and wait:
            events = await run_events(self.client, session_id, entry.run_id, first_task=True)
        cut = durable_cut(events)
        entry.length = max(entry.length, len(events))
        if cut == entry.cut and not again:
            return
        if cut == 0:
            raise CannotReplay("no workflow task of its run has completed")
        if why := code_check(events[:cut], code_fingerprint()):
            raise CannotReplay(why)
        cpu = time.process_time()
        replayed = await self.replays.replay(session_id, events[:cut])
        self.cpu_seconds += time.process_time() - cpu
        if entry.replayed is not None:
            entry.replayed.discard()
        if cut != entry.cut:
            entry.answers.clear()
        entry.cut, entry.replayed = cut, replayed
        self._drop_old_replays()

    async def _ask(self, entry: _Entry, name: str) -> Payload:
        if entry.replayed is None:
            raise CannotReplay("the replayed run was dropped")
        cpu = time.process_time()
        try:
            # In a thread, as the worker activates workflows: the instance sets itself as
            # the running loop of the thread it runs in while it runs.
            return await asyncio.get_running_loop().run_in_executor(
                None, _query, entry.replayed.instance, name
            )
        finally:
            self.cpu_seconds += time.process_time() - cpu

    def _keep(self, session_id: str, entry: _Entry) -> None:
        old = self.entries.pop(session_id, None)
        self.entries[session_id] = entry
        while len(self.entries) > KEEP_ANSWERS:
            _, dropped = self.entries.popitem(last=False)
            _drop(dropped)
        if old is not None:
            _drop(old)

    def _drop_old_replays(self) -> None:
        kept = [e for e in self.entries.values() if e.replayed is not None]
        for entry in kept[: max(0, len(kept) - KEEP_REPLAYED)]:
            _drop(entry)


def _drop(entry: _Entry) -> None:
    """Let go of an entry's replayed run; one a read is using (in another thread) is left to
    the garbage collector instead."""
    if entry.replayed is not None and not entry.lock.locked():
        entry.replayed.discard()
        entry.replayed = None


def _query(instance: Any, name: str) -> Payload:
    """Query `name` of a replayed workflow instance, as the worker runs one: an activation
    with the query's job, at the workflow's own time; its answer, or why it failed."""
    activation = WorkflowActivation(
        run_id=instance._info.run_id,
        timestamp=Timestamp(seconds=instance._time_ns // 10**9, nanos=instance._time_ns % 10**9),
        history_length=instance._current_history_length,
        jobs=[WorkflowActivationJob(query_workflow=QueryWorkflow(query_id=f"read-{name}", query_type=name))],
    )
    completion = instance.activate(activation)
    if completion.HasField("failed"):
        raise CannotReplay(
            f"the replayed session could not answer {name}: {completion.failed.failure.message}"
        )
    for command in completion.successful.commands:
        if command.HasField("respond_to_query"):
            response = command.respond_to_query
            if response.HasField("failed"):
                raise CannotReplay(f"the replayed session could not answer {name}: {response.failed.message}")
            return response.succeeded.response
    raise CannotReplay(f"the replayed session gave no answer to {name}")


async def run_events(
    client: Client, session_id: str, run_id: str, *, first_task: bool = False
) -> list[HistoryEvent]:
    """The events of one run as they are now; with `first_task`, once its first workflow task
    has completed (a query waits for a worker as well), or `NoWorker` when none did in time."""
    events: list[HistoryEvent] = []
    token = b""
    deadline = time.monotonic() + FIRST_TASK_WAIT.total_seconds()
    while True:
        waiting = first_task and bool(token) and durable_cut(events) == 0
        left = deadline - time.monotonic()
        if waiting and left <= 0:
            raise NoWorker(f"no worker answered for session {session_id}; start one with: python worker.py")
        try:
            response = await client.workflow_service.get_workflow_execution_history(
                GetWorkflowExecutionHistoryRequest(
                    namespace=client.namespace,
                    execution=WorkflowExecution(workflow_id=session_id, run_id=run_id),
                    maximum_page_size=PAGE_SIZE,
                    next_page_token=token,
                    wait_new_event=first_task,
                ),
                timeout=timedelta(seconds=min(left, LONG_POLL.total_seconds())) if waiting else None,
            )
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise SessionNotFound(session_id) from None
            if err.status == RPCStatusCode.DEADLINE_EXCEEDED and waiting:
                continue
            raise
        for event in response.history.events:
            del events[event.event_id - 1 :]  # a long poll may send an event again
            events.append(event)
        token = response.next_page_token
        if not token:
            return events
        if first_task and durable_cut(events) > 0 and len(response.history.events) < PAGE_SIZE:
            return events


_readers: weakref.WeakKeyDictionary[Client, Reader] = weakref.WeakKeyDictionary()


def reader(client: Client) -> Reader:
    """This process's reader for `client`."""
    found = _readers.get(client)
    if found is None:
        found = _readers[client] = Reader(client, Replays(client))
    return found


async def read(
    client: Client,
    session_id: str,
    method: Callable[..., Any],
    result_type: type,
    *,
    run_id: str,
    history_length: int,
    wait: bool = True,
) -> Any:
    """What query `method` (`AgentWorkflow.status`, ...) of the session's run `run_id` answers,
    from its replay here; `CannotReplay` when this process cannot replay it."""
    payload = await reader(client).answer(session_id, run_id, history_length, method.__name__, wait=wait)
    return client.data_converter.payload_converter.from_payload(payload, result_type)


# ---- patience ------------------------------------------------------------------------------

# Seconds a read is tried before "busy, retry": longer than a first workflow task is waited
# for, so a session no worker runs says so (NoWorker) rather than busy.
READ_DEADLINE = FIRST_TASK_WAIT.total_seconds() + 5
RETRY_AFTER = 2  # what it then tells the caller to wait, in seconds
# What a loaded server or a slow worker answers; anything else is not worth a retry.
_TRANSIENT = frozenset({
    RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.UNAVAILABLE, RPCStatusCode.RESOURCE_EXHAUSTED,
    RPCStatusCode.CANCELLED, RPCStatusCode.ABORTED,
})  # fmt: skip


def _transient(err: RPCError) -> bool:
    """Worth trying again: Temporal was slow or busy, or an update met a workflow task that
    failed under load (Temporal then aborts the update; the same update id tried again runs
    once, in the next task)."""
    aborted = err.status == RPCStatusCode.FAILED_PRECONDITION and "workflow task failure" in err.message
    return err.status in _TRANSIENT or aborted


async def patiently(read: Callable[[], Awaitable[T]], what: str, *, within: float = READ_DEADLINE) -> T:
    """`read()`, tried again while Temporal is too slow to answer (a timeout, unavailable,
    overloaded), until `within` seconds have passed; then `Busy`, never the timeout itself."""
    deadline = time.monotonic() + within
    pause = 0.2
    while True:
        try:
            return await asyncio.wait_for(read(), max(0.1, deadline - time.monotonic()))
        except RPCError as err:
            if not _transient(err):
                raise
            why = err.message or err.status.name
        except TimeoutError:
            why = "no answer in time"
        if time.monotonic() + pause >= deadline:
            raise Busy(
                f"busy: {what} did not answer within {within:g} s ({why}); retry in {RETRY_AFTER} s",
                RETRY_AFTER,
            )
        await asyncio.sleep(pause)
        pause = min(pause * 2, 2.0)
