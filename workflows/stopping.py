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

The steps, in `AgentWorkflow._stop`: ask `lets_calls_finish` (only with activities in
flight, `Temporal.activities_in_flight`), set `ToolRunner.stopping` so that an at-most-once
call's `Temporal.activity_to_its_end` is not interrupted and `ToolRunner.run_all` waits for
it, cancel the loop (Temporal's cancel of the other activities), then `stop_calls`. A
steering interrupt that stops the running calls without ending the session takes the same
steps for the tasks it cancels.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.stopping import stop_calls as stop_calls_activity
    from activities.wire import StopCalls
    from workflows import options
    from workflows.session import Session
    from workflows.temporal import Failed

# Asked when a session's loop stops with calls in flight, never before: a session that is
# never stopped mid-call records no marker for it.
STOP_CALLS = "stop-calls"


def lets_calls_finish(session: Session) -> bool:
    """Whether this session, stopping with calls in flight, asks their workers to stop them
    and lets an at-most-once call end first (asked then, once: the patch's marker)."""
    return session.temporal.patched(STOP_CALLS)


async def stop_calls(session: Session) -> None:
    """Ask the workers to stop the run's calls in flight (one local activity). Best effort:
    a call whose worker cannot be asked runs to its end, as it would without this."""
    request = StopCalls(session_id=session.id, run_id=workflow.info().run_id)
    try:
        await session.temporal.local_activity(
            stop_calls_activity, [request], options.stop_calls(), summary="stop the calls in flight"
        )
    except Failed as err:
        workflow.logger.warning(
            "session %s: could not ask the workers to stop its calls: %s", session.id, err
        )
