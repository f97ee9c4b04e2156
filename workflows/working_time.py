"""Working time: what a session's `timeout` bounds.

A run works while a model call, a tool or a sub-agent runs, and in the loop between
them; waiting for a person, paused, idle in a chat, sleeping and waiting for an event do
not count (`SessionState.working`). The state keeps the seconds worked and since when
the current stretch of work runs (`worked_seconds`, `working_since`), so a continue-as-new
or a replay after a crash carries on from where the session was. The run's timeout is a
timer armed only while it works, for the working time it has left; it is cancelled when
the work stops and armed again when it resumes.
"""

from __future__ import annotations

from collections.abc import Callable

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.session import Session, fmt_duration


class WorkClock:
    """The working time of one session; `busy` says whether a model call is in flight
    (it runs whatever the state says, a pause included)."""

    def __init__(self, session: Session, busy: Callable[[], bool]) -> None:
        self.session = session
        self.state = session.state
        self._busy = busy

    def working(self) -> bool:
        return self._busy() or self.state.working()

    def run_worked(self) -> float:
        """Seconds the current run has worked."""
        return self.state.worked(workflow.now()) - self.state.run_worked_from

    def start_run(self) -> None:
        """A chat's next run: its timeout counts from here."""
        self.state.run_worked_from = self.state.worked(workflow.now())

    def note(self) -> None:
        """Open or close the current stretch of work, as `working()` says."""
        if self.working():
            if self.state.working_since is None:
                self.state.working_since = workflow.now()
        else:
            self.stop()

    def stop(self) -> None:
        """Close the current stretch of work (the run ended, or hands over)."""
        state = self.state
        if state.working_since is not None:
            state.worked_seconds = state.worked(workflow.now())
            state.working_since = None

    async def run_out(self, limit: float) -> None:
        """Return once the current run has worked `limit` seconds."""
        rearmed = False
        while True:
            await self.session.temporal.wait(self.working)
            self.note()
            left = limit - self.run_worked()
            if left <= 0.001:
                return
            summary = f"timeout {fmt_duration(limit)}"
            if rearmed:
                summary += f", {fmt_duration(round(left, 1))} of work left"
            await self.session.temporal.wait(lambda: not self.working(), timeout=left, summary=summary)
            self.note()
            rearmed = True
