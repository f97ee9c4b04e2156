"""Temporal Cloud's billable actions, counted by the session as it causes them.

Temporal Cloud prices by actions (https://docs.temporal.io/cloud/actions; bench/billing.py
counts them in a history). The session counts the same actions as it goes, so `status`
prices it without Temporal Cloud (`temporal_actions`, carried by continue-as-new in the
state). Each trace turn has its own: the actions from the start of its model call to the
start of the next one (its model call, the tools it asked for, the signals, updates and
timers meanwhile; the first turn also the session's start and its tool listing).

Counted, by Cloud's rules:

- **a run's start**: 1 per run (a client's start, a schedule's, a continue-as-new). A
  sub-agent's first run is counted by its parent: 2 (the intent and the start), and the
  parent adds the child's own count when the child ends.
- **activities**: 1 per activity scheduled, plus its attempts after the first (the
  attempt of the one that finished, from its result; a failure that exhausted the retry
  policy counts all its attempts).
- **heartbeats**: the beats the activity sent over all its attempts, from its result
  (`ModelReply.heartbeats`, `ToolOutcome.heartbeats`), or from the last beat a heartbeat
  timeout recorded (activities/heartbeat.py).
- **local activities**: 1 per workflow task that recorded markers (local activities and
  `workflow.patched`), plus each local-activity attempt after the first. A local
  activity's marker is counted in the workflow task that scheduled it (the worker holds
  that task open until it ends), unless its result came in a later task and it outlived
  half a task timeout (recorded with the task's heartbeat) or ran `SLOW_LOCAL_MS` or more
  (a local tool, which says how long it ran): then in the task its result came in. Both
  are read from history and results, so a replay counts the same. Exact except in one
  case (see below): a query answered while a local activity runs.
- **timers**: 1 per timer that reached the server (one started and cancelled in the same
  workflow task never does).
- **signals** received and **updates** accepted: 1 each, counted by `Metering`
  (workflows/interceptors.py), which `worker.build_worker` installs (it sees the event
  stream's signal and update as well as the session's own).
- **updates refused** by their validator: 1 each. A refusal leaves nothing in history (the
  validator does not run again on replay), so `Metering` counts it in memory
  (`Meter.refused`) and the session makes it durable by echo: the next model call carries
  the count in its input (`ModelRequest.refusals`) and the activity returns it in its result
  (`ModelReply.refusals`), which the workflow adds when it takes the result. A replay reads
  the result from history and counts the same; the input it schedules carries 0, and
  Temporal does not compare an activity's input on replay. The `status` query shows the
  count at once (the in-memory ones beside the recorded ones), the entry points' `status`
  (a replay) once it is recorded; a continue-as-new carries the ones in
  memory in the new run's input, and the session's result (its final status) includes them.
- **search-attribute upserts**: 1 each (workflows/view.py).
- **child sessions**: 2 each, at their start.
- **notifications** (workflows/notify.py): 2 for each notification workflow's start, then
  its delivery attempts when it tells the session its outcome (the signal is counted as
  any other); a notification still delivering when the session closed has its attempts
  added by `sessions.control.status`, from its result.

Not counted, because the workflow cannot know them: updates refused while the worker
held them in memory and lost them before a model call, a continue-as-new or the session's
end recorded them (the worker crashed, or evicted the session from its cache: a worker
with `--max-cached-workflows 0` loses every refusal not recorded in the workflow task it
came in), updates the worker refused before any validator ran (an unknown update name, input
that does not decode) and those the server refused (a closed session), queries (the
entry points' reads make none: sessions/reading.py), the attempts of an activity that failed
other than by exhausting its retries or was cancelled (its result carries no attempt
number), the heartbeats of the MCP tool listing and of failed attempts whose last beat
was not recorded, and the workflow-task heartbeats of a local activity that runs longer
than a workflow task.

Not exact: the local-activity batches around a query answered while a local activity
runs. The worker answers a query that came with a workflow task by completing that task at
once, local activity or not, and asks for a new one; the result reaches the workflow in
that new task whenever the activity ended. The marker is in the completed task if the
activity ended before the answer went out (within a millisecond or two),
else in the new one, which the workflow cannot see. Quick ones (the tool listing, an input
check, a quick local tool) are counted in the completed task, and local tools that ran
`SLOW_LOCAL_MS` or more in the new one; when the race goes the other way and the other task
holds another marker (a patch, another local activity), the count is one batch off (seen on
a loaded machine: 28 against 29). Measured by `python -m bench.la_markers` (a patch and a
local activity in each of 6 tasks, a query every few milliseconds), over the local
activities whose result came in a later task: of those that ran 0 ms, 16 of 17 had their
marker with the completed task; of those that ran 2 ms, 18 of 19 with the new one; 5, 10
and 20 ms, 55 of 55 with the new one. A worker without a workflow cache
(`max_cached_workflows=0`) may also record a quick local activity's marker in the next
workflow task: one batch too few.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple

from temporalio import workflow
from temporalio.exceptions import ActivityError, RetryState, TimeoutError

with workflow.unsafe.imports_passed_through():
    from activities.heartbeat import carried_count
    from workflows.state import SessionState


DEFAULT_TASK_TIMEOUT = timedelta(seconds=10)
# A local activity that ran this long has most likely ended after the worker answered a
# query that came with the task that scheduled it (measured: see "Not exact" above).
SLOW_LOCAL_MS = 2


class Task(NamedTuple):
    """A workflow task as the workflow sees it: the events in history as it started, and when."""

    length: int
    at: datetime


def current_task() -> Task:
    return Task(history_length(), workflow.now())


class Meter:
    """The billable actions of one run, added to the session's state."""

    def __init__(self, state: SessionState) -> None:
        self.state = state
        # Actions go to the next trace turn while a model call is in flight, and in a fork
        # until its first (the turns before it are the source's); else to the latest turn.
        self.to_next_turn = False
        self._marker_tasks: set[int] = set()  # this run's workflow tasks with markers, by history length
        self._patches: set[str] = set()
        # Updates refused since the last echo: in memory only (a replay never sees them).
        self.unrecorded_refusals = 0

    def add(self, actions: int) -> None:
        if actions <= 0:
            return
        state = self.state
        state.temporal_actions += actions
        if state.trace and not self.to_next_turn:
            state.trace[-1].temporal_actions += actions
        else:
            state.unattributed_actions += actions

    def live_total(self) -> int:
        """The actions so far as `status` shows them: the recorded ones and the refusals in memory."""
        return self.state.temporal_actions + self.unrecorded_refusals

    # ---- refused updates (see "updates refused" above) ----------------------------------

    def refused(self) -> None:
        """An update its validator refused: in memory until an echo records it."""
        self.unrecorded_refusals += 1

    def take_refusals(self) -> int:
        """The refusals in memory, for an activity's input to carry (0 on replay)."""
        taken, self.unrecorded_refusals = self.unrecorded_refusals, 0
        return taken

    def refusals_returned(self, taken: int) -> None:
        """An activity that carried `taken` refusals ended without a result: back to memory."""
        self.unrecorded_refusals += taken

    def refusals_echoed(self, refusals: int, *, to_latest_turn: bool) -> None:
        """Refusals an activity's result carried back (read from history on replay): to the
        turn that was latest when they happened, unless no turn of this session was."""
        if refusals <= 0:
            return
        state = self.state
        state.temporal_actions += refusals
        if state.trace and to_latest_turn:
            state.trace[-1].temporal_actions += refusals
        else:
            state.unattributed_actions += refusals

    def record_refusals(self) -> None:
        """Record the refusals in memory where a command's input or the result carries the
        state (continue-as-new, the session's end): in the current turn."""
        self.add(self.take_refusals())

    def run_started(self, *, forked: bool) -> None:
        """This run's start; a fork counts its own actions from zero."""
        if forked:
            self.state.temporal_actions = self.state.unattributed_actions = 0
            self.to_next_turn = True
        info = workflow.info()
        if info.parent is None or info.continued_run_id is not None:
            self.add(1)  # a sub-agent's first start is counted by its parent

    # ---- activities ------------------------------------------------------------------

    def activity(self, attempt: int = 1, heartbeats: int = 0) -> None:
        """An activity that finished on its `attempt`th attempt, having sent `heartbeats`."""
        self.add(max(1, attempt) + heartbeats)

    def activity_failed(self, err: ActivityError, attempts: int) -> None:
        """An activity that failed; `attempts` is its retry policy's maximum."""
        tried = attempts if err.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED else 1
        cause = err.cause
        beats = carried_count(cause.last_heartbeat_details) if isinstance(cause, TimeoutError) else 0
        self.add(tried + beats)

    def activity_interrupted(self, scheduled_at: int) -> None:
        """An activity cancelled before its result: counted if its schedule reached the server."""
        if history_length() != scheduled_at:
            self.add(1)

    def local_activity(self, scheduled: Task, attempt: int = 1, took_ms: int = 0) -> None:
        """A local activity scheduled in the task `scheduled` ended on its `attempt`th attempt,
        having run `took_ms` (where its result says)."""
        self._local_marker(scheduled, took_ms)
        self.add(attempt - 1)

    def local_activity_failed(self, scheduled: Task, err: BaseException, attempts: int) -> None:
        self._local_marker(scheduled)
        if isinstance(err, ActivityError) and err.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED:
            self.add(attempts - 1)

    def _local_marker(self, scheduled: Task, took_ms: int = 0) -> None:
        now = current_task()
        outlived = now.at - scheduled.at > (workflow.info().task_timeout or DEFAULT_TASK_TIMEOUT) / 2
        # One that ran a while and whose result came in a later task (a query made the worker
        # complete the task first) ended after that task: its marker is in the later one.
        later = now.length != scheduled.length and took_ms >= SLOW_LOCAL_MS
        self._marker_in(now.length if outlived or later else scheduled.length)

    def marker(self) -> None:
        """A marker recorded in the current workflow task: all of a task's markers count 1."""
        self._marker_in(history_length())

    def _marker_in(self, task: int) -> None:
        if task not in self._marker_tasks:
            self._marker_tasks.add(task)
            self.add(1)

    def patched(self, patch_id: str) -> bool:
        """`workflow.patched`, counting the marker it records the first time it answers yes."""
        if not workflow.patched(patch_id):
            return False
        if patch_id not in self._patches:
            self._patches.add(patch_id)
            self.marker()
        return True

    # ---- timers, children, upserts -------------------------------------------------------

    def timer_ended(self, started_at: int) -> None:
        """A timer started when history had `started_at` events has fired or been cancelled."""
        if history_length() != started_at:
            self.add(1)

    def child_started(self) -> None:
        self.add(2)

    def upsert(self) -> None:
        self.add(1)


def history_length() -> int:
    """The events in history as the current workflow task started: it names the task."""
    return workflow.info().get_current_history_length()
