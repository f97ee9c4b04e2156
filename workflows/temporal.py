"""Every Temporal command a session issues, with its bookkeeping.

The loop (agent.py, model_calls.py, tool_calls.py, subagents.py, waits.py,
working_time.py, view.py, notify.py, archive.py) decides what the session does; it asks
`Temporal` to do it: run an activity or a local activity, start a child workflow, wait
(with a timer when the wait has a deadline), signal another workflow, upsert search
attributes, continue as new. Here, and only here, each command is counted in Temporal
Cloud's billable actions (the rules: workflows/metering.py) and its failure described in
one line: the loop sees a result, `Failed`, or `asyncio.CancelledError` when the command
was cancelled. The session's spans (workflows/spans.py) open here too.

Versions: a change to the commands a path issues goes behind `Temporal.patched` (asked in
the run's first activation, where a replay asks it too) and is retired by a release step
(docs/operations/deployment.md, "Retiring a patch"). The session's code has one such branch
today, asked only when a signal names the reserved decider `timeout` (workflows/actions.py),
so a new session's history starts with its first command, not with markers. The
patches in `RETIRED` are asked only while a worker replays a history: one recorded by the
release before, which holds their markers, replays as it ran (its code took the branches
this code always takes); a new history never gets them.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Awaitable, Callable, Generator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, TypeVar, cast

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    RetryState,
    TimeoutError,
)

with workflow.unsafe.imports_passed_through():
    from activities.model import ModelActivities
    from activities.wire import ModelReply, ModelRequest
    from workflows import options, spans
    from workflows.contract import SessionInput
    from workflows.metering import Meter, current_task, history_length
    from workflows.records import ToolCallRecord, TraceTurn
    from workflows.state import SessionState

R = TypeVar("R")

# Patches whose branches this code always takes, with the date of the release that last
# asked them: histories recorded since then hold their markers, which must be matched on
# replay (docs/operations/deployment.md, "Retiring a patch").
RETIRED = (  # 2026-12-02
    "working-time",
    "model-task-queue",
    "bounded-handover",
    "child-waits",
    "search-attribute-counts-by-steps",
)


class Failed(ApplicationError):
    """A command that failed for good (its retries spent, or a failure not retried). Left
    uncaught, it fails the session's workflow with its description, as the activity's own
    failure would."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(describe_failure(error, "activity"), non_retryable=True)
        self.error = error

    @property
    def error_type(self) -> str | None:
        """The `ApplicationError` type the activity failed with (activities/model_errors.py, ...)."""
        cause = self.error.cause if isinstance(self.error, ActivityError) else self.error
        return cause.type if isinstance(cause, ApplicationError) else None

    @property
    def timed_out(self) -> bool:
        return isinstance(self.error, ActivityError) and isinstance(self.error.cause, TimeoutError)

    def describe(self, what: str) -> str:
        """One line on why `what` failed: a timeout, the error's message, retries spent."""
        return describe_failure(self.error, what)


class Temporal:
    """The commands of one run of a session, and the billable actions they cost."""

    def __init__(self, session_id: str, input: SessionInput, state: SessionState) -> None:
        self.id = session_id
        self.input = input
        self.state = state
        self._meter = Meter(state)
        self._open_timers: dict[object, int] = {}  # a wait with a deadline -> the task it started in
        self._step_in_flight: int | None = None  # the step whose model call runs (fallbacks, resends)
        self._refusals_to_latest = True

    # ---- the run -------------------------------------------------------------------------

    def run_started(self, *, forked: bool) -> None:
        """This run's start (a fork counts its own actions from zero), in its first activation."""
        self._meter.run_started(forked=forked)
        if workflow.unsafe.is_replaying():
            for patch_id in RETIRED:  # True, and counted, where the history has the marker
                self._meter.patched(patch_id)
        spans.session_started(self)

    @contextmanager
    def run_span(self) -> Generator[None, None, None]:
        with spans.session_span(self):
            yield

    def end_run(self) -> None:
        """The run ends (returns or continues as new): count what is still open, and record
        the refused updates held in memory where the result or the new run's input carries them."""
        for started in self._open_timers.values():
            self._meter.timer_ended(started)
        self._open_timers.clear()
        self._meter.record_refusals()

    def ended(self) -> None:
        self.end_run()
        spans.session_ended(self)

    def continue_as_new(self, input: SessionInput) -> None:
        self.end_run()
        workflow.continue_as_new(input)

    def actions(self) -> int:
        """The billable actions so far, as `status` shows them (workflows/metering.py)."""
        return self._meter.live_total()

    def child_actions(self, count: int) -> None:
        """Actions a child workflow took, reported in its result or its outcome signal."""
        self._meter.add(count)

    # ---- what the worker's interceptor reports (workflows/interceptors.py) ----------------

    def signal_received(self) -> None:
        self._meter.add(1)

    def update_accepted(self) -> None:
        self._meter.add(1)

    def update_refused(self) -> None:
        self._meter.refused()

    # ---- patches -----------------------------------------------------------------------

    def patched(self, patch_id: str) -> bool:
        """`workflow.patched`, counting the marker it records. In use: workflows/actions.py's
        `reserved-decider`, asked only when a signal names the reserved decider (so a
        session's history gets its marker only then)."""
        return self._meter.patched(patch_id)

    # ---- activities ----------------------------------------------------------------------

    async def activity(
        self,
        method: Callable[..., Awaitable[R]],
        arg: Any,
        activity_options: options.ActivityOptions,
        *,
        summary: str,
        task_queue: str | None = None,
    ) -> R:
        """An activity's result; `Failed` when it failed, `asyncio.CancelledError` when it
        was cancelled. Its attempts and heartbeats are counted from its result (`attempt`,
        `heartbeats`, where the result carries them)."""
        scheduled = history_length()
        try:
            # One method for every activity: the SDK's overloads type one signature at a time.
            found = cast(
                Any,
                await workflow.execute_activity_method(  # pyright: ignore[reportCallIssue]
                    method,  # pyright: ignore[reportArgumentType]
                    arg,
                    **activity_options,
                    task_queue=task_queue,
                    summary=summary,
                ),
            )
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):
                self._meter.activity_interrupted(scheduled)
                raise asyncio.CancelledError() from err
            self._meter.activity_failed(err, options.attempts(activity_options))
            raise Failed(err) from err
        except asyncio.CancelledError:
            self._meter.activity_interrupted(scheduled)
            raise
        self._meter.activity(getattr(found, "attempt", 1), getattr(found, "heartbeats", 0))
        return cast(R, found)

    async def local_activity(
        self,
        method: Callable[..., Awaitable[R]],
        args: Sequence[Any],
        activity_options: options.LocalActivityOptions,
        *,
        summary: str,
    ) -> R:
        """A local activity's result, as `activity`; its marker is counted with the workflow
        task's others, and its attempts (and how long it ran) from its result."""
        task = current_task()
        try:
            found = cast(
                Any,
                await workflow.execute_local_activity_method(  # pyright: ignore[reportCallIssue]
                    method,  # pyright: ignore[reportArgumentType]
                    *args,
                    **activity_options,
                    summary=summary,
                ),
            )
        except (ActivityError, ApplicationError) as err:  # a local activity's failure may come bare
            if isinstance(err, ActivityError) and isinstance(err.cause, CancelledError):
                raise asyncio.CancelledError() from err
            self._meter.local_activity_failed(task, err, options.attempts(activity_options))
            raise Failed(err) from err
        self._meter.local_activity(task, getattr(found, "attempt", 1), getattr(found, "duration_ms", 0) or 0)
        return cast(R, found)

    async def call_model(
        self, request: ModelRequest, call_options: options.ActivityOptions, *, task_queue: str
    ) -> ModelReply:
        """One model activity. Its actions go to the trace turn its reply records (from the
        step's first call: a fallback or a resend is the same turn), and it carries the
        updates refused since the last call, which its reply echoes into history (see
        "updates refused" in workflows/metering.py)."""
        if request.step != self._step_in_flight:
            self._step_in_flight = request.step
            # Refusals this step carries back happened before it, in the latest turn (a
            # fork's before its first call: the turns it has are the source's).
            self._refusals_to_latest = not self._meter.to_next_turn
            self._meter.to_next_turn = True
        refusals = self._meter.take_refusals()
        try:
            reply = await self.activity(
                ModelActivities.call_model,
                request.model_copy(update={"refusals": refusals}),
                call_options,
                task_queue=task_queue,
                summary=f"model call {request.step} ({request.model})",
            )
        except BaseException:
            self._meter.refusals_returned(refusals)
            raise
        self._meter.refusals_echoed(reply.refusals, to_latest_turn=self._refusals_to_latest)
        return reply

    def record_turn(self, turn: TraceTurn, *, model: str) -> None:
        """A model reply's trace turn, with the actions since its step's first model call;
        from here, actions go to it, up to the next step's call."""
        state = self.state
        turn.temporal_actions = state.unattributed_actions
        state.unattributed_actions = 0
        state.trace.append(turn)
        self._meter.to_next_turn = False
        self._step_in_flight = None
        spans.model_turn(self, model, turn.usage, turn.cost_usd)

    # ---- children and signals ------------------------------------------------------------

    async def start_child(
        self,
        workflow_type: str,
        arg: Any,
        *,
        id: str,
        result_type: type[R],
        child_options: options.ChildOptions,
        summary: str,
    ) -> workflow.ChildWorkflowHandle[Any, R]:
        """Start a child workflow (2 actions once it has started)."""
        handle = await workflow.start_child_workflow(
            workflow_type, arg, id=id, result_type=result_type, **child_options, static_summary=summary
        )
        self._meter.child_started()
        return handle

    async def signal(
        self, target: str | workflow.ChildWorkflowHandle[Any, Any], name: str, arg: Any = None
    ) -> None:
        """Signal another workflow (a child by its handle, any other by its id); the
        receiver counts it."""
        handle = workflow.get_external_workflow_handle(target) if isinstance(target, str) else target
        if arg is None:
            await handle.signal(name)
        else:
            await handle.signal(name, arg)

    def upsert(self, updates: Sequence[Any]) -> None:
        """Upsert search attributes (1 action)."""
        workflow.upsert_search_attributes(list(updates))  # pyright: ignore[reportUnknownMemberType]
        self._meter.upsert()

    # ---- waits -----------------------------------------------------------------------------

    async def wait(
        self, ready: Callable[[], bool], *, timeout: float | None = None, summary: str = ""
    ) -> bool:
        """Until `ready()`: True. With `timeout` (seconds), a timer named `summary` in the
        Temporal UI, and False when it fires first."""
        if timeout is None:
            await workflow.wait_condition(ready)
            return True
        key = object()
        self._open_timers[key] = history_length()
        try:
            await workflow.wait_condition(ready, timeout=timedelta(seconds=timeout), timeout_summary=summary)
            return True
        except builtins.TimeoutError:
            return False
        finally:
            # Counted once: here, or by `end_run` when the run ended before this ran.
            if (started := self._open_timers.pop(key, None)) is not None:
                self._meter.timer_ended(started)

    # ---- spans -----------------------------------------------------------------------------

    @contextmanager
    def tool_call_span(self, call: ToolCallRecord) -> Generator[None, None, None]:
        with spans.tool_call_span(call):
            yield

    @contextmanager
    def approval_span(self, call: ToolCallRecord) -> Generator[None, None, None]:
        with spans.approval_span(self, call):
            yield


def describe_failure(err: BaseException, what: str) -> str:
    """One line on why an activity or child failed: a timeout, the error's message, retries spent."""
    if isinstance(err, Failed):
        err = err.error
    if isinstance(err, ChildWorkflowError) and err.cause is not None:
        err = err.cause
    if isinstance(err, ApplicationError):
        return err.message
    if not isinstance(err, ActivityError):
        return f"{what} failed: {type(err).__name__}: {err}"
    cause = err.cause
    if isinstance(cause, TimeoutError):
        kind = cause.type.name.lower().replace("_", "-") if cause.type is not None else "unknown"
        return f"{what} timed out ({kind})"
    text = cause.message if isinstance(cause, ApplicationError) else f"{what} failed: {cause or err}"
    if err.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED:
        text += " (retries exhausted)"
    return text
