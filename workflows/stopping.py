"""Stopping the calls a session's loop leaves in flight when it stops (a cancel, its
timeout), at once, in the workers that run them.

Temporal cancels an activity by recording the request; the worker running it hears of it
only in the answer to a heartbeat, and by default activities send none (each is billed).
So the session asks once, when it stops with a model call or a regular tool call in
flight: the local activity `stop_calls` (activities/stopping.py) describes the session and
asks each running call's worker to stop it, which closes a model request (the model stops
writing and billing) and cancels a read-only or idempotent tool. One local-activity action,
only when the session stops mid-call; a step that nobody stops costs what it did.

An at-most-once call is never interrupted: with the patch, the session waits for it to end
and records its outcome (`unknown` if its worker dies), then stops. Sessions recorded
before the patch cancelled it in Temporal and did not ask the workers: a replay of one
does the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.stopping import stop_calls as stop_calls_activity
    from activities.wire import StopCalls
    from workflows import options
    from workflows.metering import current_task
    from workflows.session import Session

# Asked when a session's loop stops with calls in flight, never before: a session that is
# never stopped mid-call records no marker for it.
STOP_CALLS = "stop-calls"


def lets_calls_finish(session: Session) -> bool:
    """Whether this session, stopping with calls in flight, asks their workers to stop them
    and lets an at-most-once call end first (asked then, once: the patch's marker)."""
    return session.meter.patched(STOP_CALLS)


async def stop_calls(session: Session) -> None:
    """Ask the workers to stop the run's calls in flight (one local activity). Best effort:
    a call whose worker cannot be asked runs to its end, as it would without this."""
    task = current_task()
    request = StopCalls(session_id=session.id, run_id=workflow.info().run_id)
    try:
        found = await workflow.execute_local_activity(
            stop_calls_activity, request, **options.stop_calls(), summary="stop the calls in flight"
        )
    except (ActivityError, ApplicationError) as err:  # a local activity's failure may come bare
        session.meter.local_activity_failed(task, err, options.attempts(options.stop_calls()))
        workflow.logger.warning(
            "session %s: could not ask the workers to stop its calls: %s", session.id, err
        )
        return
    session.meter.local_activity(task, found.attempt)


class RunsToItsEnd(asyncio.Future[Any]):
    """What the task of an at-most-once call awaits instead of its activity. A cancel of the
    task, for a session that lets such calls end (`ToolRunner.stopping`), ends the wait at
    once and leaves the activity running. Recorded before the patch, it cancels the activity
    at the same point as when the task awaited it, and the task gets what the activity
    resolves to, one step of the event loop later."""

    def __init__(self, activity: asyncio.Future[Any], lets_it_end: Callable[[], bool]) -> None:
        super().__init__(loop=activity.get_loop())
        self.activity = activity
        self._lets_it_end = lets_it_end
        activity.add_done_callback(self._relay)

    def cancel(self, msg: Any | None = None) -> bool:
        if self.done():
            return False
        if self._lets_it_end():
            return super().cancel(msg)
        return self.activity.cancel(msg)

    def _relay(self, activity: asyncio.Future[Any]) -> None:
        if self.done():
            return
        if activity.cancelled():
            super().cancel()
        elif (err := activity.exception()) is not None:
            self.set_exception(err)
        else:
            self.set_result(activity.result())
