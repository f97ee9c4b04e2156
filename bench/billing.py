"""Temporal Cloud's billable actions in a workflow history: `count(events)`.

Temporal Cloud prices by actions (docs: "Temporal Cloud Actions",
https://docs.temporal.io/cloud/actions). `count` applies those rules to the events of one
run's history; summed over a session's runs (continue-as-new) and its children, each
action is counted once. The rules, as implemented:

- **Workflow started**: 1 per run, by a client's start or a continue-as-new (the new run's
  `WorkflowExecutionStarted`; the old run's `WorkflowExecutionContinuedAsNew` is not
  counted again). A signal-with-start that started the run is 1 in all: its signal (the
  run's second event) is not counted again. A child's own first start is not counted in its
  history: its parent's `StartChildWorkflowExecutionInitiated` counts **2** (the intent and
  the start); the child's continue-as-new runs count 1 each.
- **Activity started or retried**: 1 per `ActivityTaskScheduled`, plus `attempt - 1` from
  its `ActivityTaskStarted` (written when the activity closes, with the attempts it took).
- **Local activities**: all the markers one workflow task records count **1** (Cloud and the
  server's own `action` metric count a batch of `RecordMarker` commands once, whatever
  they record: local activities, side effects, patches), plus each local-activity attempt
  after the first (`nonfirst_local_activity_execution_attempts` on `WorkflowTaskCompleted`).
- **Activity heartbeat recorded**: 1 per heartbeat that reaches the server (the SDK
  throttles the rest). Not in history: pass `heartbeats=` from the server's request
  counters (`service_requests{operation="RecordActivityTaskHeartbeat"}`) or from the
  activities that sent them.
- **Signal sent**: 1 per `WorkflowExecutionSignaled` (from a client, an activity or a
  workflow; the sender's `SignalExternalWorkflowExecutionInitiated` is not counted again).
- **Update**: 1 per accepted update (`WorkflowExecutionUpdateAccepted`) and 1 per rejected
  one, which history does not record: pass `rejected_updates=` from the server's
  `action{action_type="message_UpdateWorkflowExecution:Rejection"}` counter.
- **Timer started**: 1 per `TimerStarted` (the SDK's timers behind `wait_condition(timeout=)`
  and `sleep` included).
- **Search attributes upserted**: 1 per `UpsertWorkflowSearchAttributes` event, whatever
  number of attributes it sets, except one that sets only `TemporalChangeVersion` (the
  SDK's patch bookkeeping). Attributes given at start are free.
- **Workflow options updated**: 1 per `WorkflowExecutionOptionsUpdated`; **reset**: 1 per
  `WorkflowTaskFailed` with the reset cause; **Nexus**: 1 per operation scheduled and per
  cancel requested.

Not counted: queries (billed by Cloud, never in history: every `status` or snapshot query is
one more action), workflow-task heartbeats of long local activities (not recognisable in
history), and a schedule's own 2 actions per run (outside the run's history).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.api.history.v1 import HistoryEvent

CHANGE_VERSION = "TemporalChangeVersion"


@dataclass
class Actions:
    """Billable actions by kind; `total` is the sum."""

    starts: int = 0
    activities: int = 0
    activity_retries: int = 0
    local_activity_batches: int = 0
    local_activity_retries: int = 0
    heartbeats: int = 0
    signals: int = 0
    updates: int = 0
    rejected_updates: int = 0
    timers: int = 0
    upserts: int = 0
    children: int = 0
    other: int = 0  # options updates, resets, Nexus operations

    @property
    def total(self) -> int:
        return sum(asdict(self).values())

    def as_dict(self) -> dict[str, int]:
        return {**asdict(self), "total": self.total}

    def __add__(self, other: Actions) -> Actions:
        mine, theirs = asdict(self), asdict(other)
        return Actions(**{k: mine[k] + theirs[k] for k in mine})


def count(events: Iterable[HistoryEvent], *, heartbeats: int = 0, rejected_updates: int = 0) -> Actions:
    """The billable actions one run's history records, plus the `heartbeats` and
    `rejected_updates` that history does not record (see the module's docstring)."""
    found = Actions(heartbeats=heartbeats, rejected_updates=rejected_updates)
    marker_tasks: set[int] = set()
    signal_with_start = False
    for index, event in enumerate(events):
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            started = event.workflow_execution_started_event_attributes
            if not started.HasField("parent_workflow_execution") or started.continued_execution_run_id:
                found.starts += 1
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            if index == 1 and not signal_with_start:
                # The server writes a run's first workflow task right after its start; a
                # signal in its place came with the start (signal-with-start): 1 action in all.
                signal_with_start = True
            else:
                found.signals += 1
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            found.activities += 1
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            found.activity_retries += max(0, event.activity_task_started_event_attributes.attempt - 1)
        elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
            marker_tasks.add(event.marker_recorded_event_attributes.workflow_task_completed_event_id)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            metering = event.workflow_task_completed_event_attributes.metering_metadata
            found.local_activity_retries += metering.nonfirst_local_activity_execution_attempts
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            found.updates += 1
        elif kind == EventType.EVENT_TYPE_TIMER_STARTED:
            found.timers += 1
        elif kind == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
            if set(fields) - {CHANGE_VERSION}:
                found.upserts += 1
        elif kind == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            found.children += 2
        elif kind in (
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_OPTIONS_UPDATED,
            EventType.EVENT_TYPE_NEXUS_OPERATION_SCHEDULED,
            EventType.EVENT_TYPE_NEXUS_OPERATION_CANCEL_REQUESTED,
        ):
            found.other += 1
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            cause = event.workflow_task_failed_event_attributes.cause
            if cause == WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW:
                found.other += 1
    found.local_activity_batches = len(marker_tasks)
    return found
