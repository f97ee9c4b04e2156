"""Stopping a session's calls where they run: the model request closed, a retry-safe tool
cancelled, at once and without activity heartbeats.

A worker learns that Temporal cancelled an activity only in the answer to a heartbeat, and
by default the activities send none (each is a billable action). So when a session's loop
stops with calls in flight (a cancel, its timeout), the session asks once: it runs the local
activity `stop_calls` (workflows/stopping.py), which describes the session (not a billable
action) and, for each model call or tool the description lists as running, asks the live
server of the worker named in its `last_worker_identity` (activities/live_server.py) to
stop it: `POST /cancel/{session}/{activity}`. That costs the session one action, and only
when someone stops it.

In the worker, each model call and tool registers its task here while it runs
(`stoppable`). A request to stop one cancels its task: a streamed model request is closed,
so the model stops writing and billing; an `async` tool is cancelled at its next `await`;
a synchronous tool's thread cannot be stopped by Python, but its `ctx.cancelled` turns
true, and its result is discarded. An at-most-once call is never interrupted (the answer
is 409): it runs to its end, and the session records its outcome.

A stopped call reports its end to Temporal only once the server has recorded the
session's cancel of it (or the session has ended): an end reported while the session's
workflow task is still open would reach the server before the cancel, and the session's
own end would then be refused once and retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from temporalio import activity
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import PendingActivityState, WorkflowExecutionStatus
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionRequest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.service import RPCError

from activities.wire import CallsStopped, StopCalls

if TYPE_CHECKING:
    import httpx2 as httpx

log = logging.getLogger("activities.stopping")

# The activities a session may stop in their worker; the worker decides whether each may
# be interrupted (an at-most-once tool may not).
STOPPABLE_TYPES = ("call_model", "run_tool", "call_mcp_tool")
# The failure a stopped call reports (its session has already moved on, so nobody reads it).
CALL_STOPPED = "CallStopped"
# How long a stopped call waits for the server to record the session's cancel of it
# before it reports its end anyway; and its first and longest wait between looks.
RECORDED_WITHIN_S = 30.0
FIRST_LOOK_S, LONGEST_LOOK_S = 0.02, 0.5
ASK_TIMEOUT_S = 5.0  # one request to a worker's live server

Stop = Literal["stopped", "at_most_once", "not_running"]


@dataclass
class RunningCall:
    """One activity attempt running in this process that a session may stop."""

    session_id: str
    run_id: str
    activity_id: str
    attempt: int
    interruptible: bool
    task: asyncio.Task[object] | None
    stopped: bool = False


class RunningCalls:
    """The model calls and tools running in this process, by session and activity id."""

    def __init__(self) -> None:
        self._calls: dict[tuple[str, str], RunningCall] = {}

    def add(self, call: RunningCall) -> None:
        self._calls[(call.session_id, call.activity_id)] = call

    def remove(self, call: RunningCall) -> None:
        if self._calls.get((call.session_id, call.activity_id)) is call:
            del self._calls[(call.session_id, call.activity_id)]

    def stop(self, session_id: str, activity_id: str, run_id: str | None = None) -> Stop:
        """Stop a running call of a session; what became of the request."""
        call = self._calls.get((session_id, activity_id))
        if call is None or (run_id and call.run_id != run_id):
            return "not_running"
        if not call.interruptible:
            return "at_most_once"
        if not call.stopped:
            call.stopped = True
            if call.task is not None:
                call.task.cancel("stopped by its session")
        return "stopped"

    def __len__(self) -> int:
        return len(self._calls)


RUNNING = RunningCalls()  # this process's; the worker's live server stops them


@contextlib.asynccontextmanager
async def stoppable(
    interruptible: bool = True, calls: RunningCalls = RUNNING
) -> AsyncGenerator[RunningCall | None]:
    """Register the current activity attempt while the block runs, so its session can stop
    it; a stop ends the block with a `CallStopped` failure. Outside a regular activity
    (a local one, whose own worker cancels it; a direct call in a test) it does nothing."""
    info = activity.info() if activity.in_activity() else None
    if info is None or info.is_local:
        yield None
        return
    task = asyncio.current_task()
    call = RunningCall(
        session_id=info.workflow_id or "",
        run_id=info.workflow_run_id or "",
        activity_id=info.activity_id,
        attempt=info.attempt,
        interruptible=interruptible,
        task=task,
    )
    calls.add(call)
    try:
        yield call
    except asyncio.CancelledError:
        if not call.stopped or activity.is_cancelled():
            raise  # Temporal's own cancel (a heartbeat's answer, the worker shutting down)
        if task is not None:
            task.uncancel()
        await _until_recorded(call)
        raise ApplicationError(
            "stopped: its session cancelled it", type=CALL_STOPPED, non_retryable=True,
            category=ApplicationErrorCategory.BENIGN,
        ) from None  # fmt: skip
    finally:
        calls.remove(call)


async def _until_recorded(call: RunningCall) -> None:
    """Wait until the server has recorded the session's cancel of this attempt, the
    session's run has ended, or `RECORDED_WITHIN_S` has passed."""
    client = activity.client()
    loop = asyncio.get_running_loop()
    deadline, wait = loop.time() + RECORDED_WITHIN_S, FIRST_LOOK_S
    while loop.time() < deadline:
        try:
            description = await _describe(client, call.session_id, call.run_id)
        except RPCError:
            return  # the run is gone
        if (
            description.workflow_execution_info.status
            != WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_RUNNING
        ):
            return
        pending = next((p for p in description.pending_activities if p.activity_id == call.activity_id), None)
        if (
            pending is None
            or pending.attempt != call.attempt
            or pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED
        ):
            return
        await asyncio.sleep(wait)
        wait = min(wait * 2, LONGEST_LOOK_S)
    log.warning(
        "session %s: call %s was stopped but its cancel was not recorded within %g s",
        call.session_id, call.activity_id, RECORDED_WITHIN_S,
    )  # fmt: skip


async def _describe(client: Client, workflow_id: str, run_id: str):
    return await client.workflow_service.describe_workflow_execution(
        DescribeWorkflowExecutionRequest(
            namespace=client.namespace, execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id)
        )
    )


# ---- the local activity a session runs when it stops its calls --------------------------------


@activity.defn(name="stop_calls")
async def stop_calls(request: StopCalls) -> CallsStopped:
    """Ask the worker of each of the run's running model calls and tools to stop it."""
    from activities.live_server import cancel_path, live_url

    description = await _describe(activity.client(), request.session_id, request.run_id)
    found = CallsStopped(attempt=activity.info().attempt)
    running = (
        PendingActivityState.PENDING_ACTIVITY_STATE_STARTED,
        PendingActivityState.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED,
    )
    asks: list[tuple[str, str]] = []
    for pending in description.pending_activities:
        if pending.state not in running or pending.activity_type.name not in STOPPABLE_TYPES:
            continue
        url = live_url(pending.last_worker_identity)
        if url is None:
            found.unreachable.append(pending.activity_id)
        else:
            asks.append((pending.activity_id, url + cancel_path(request.session_id, pending.activity_id)))
    if not asks:
        return found
    import httpx2 as httpx  # only a stop with calls to ask about needs an HTTP client

    async with httpx.AsyncClient(timeout=ASK_TIMEOUT_S) as http:
        answers = await asyncio.gather(*(_ask(http, url, request) for _, url in asks), return_exceptions=True)
    for (activity_id, _), answer in zip(asks, answers, strict=True):
        if answer == 200:
            found.stopped.append(activity_id)
        elif answer == 409:
            found.refused.append(activity_id)
        else:
            if isinstance(answer, BaseException):
                activity.logger.warning("could not ask a worker to stop call %s: %s", activity_id, answer)
            found.unreachable.append(activity_id)
    return found


async def _ask(http: httpx.AsyncClient, url: str, request: StopCalls) -> int:
    from activities.live_server import cancel_headers

    response = await http.post(
        url, params={"run": request.run_id}, headers=cancel_headers(request.session_id)
    )
    return response.status_code
