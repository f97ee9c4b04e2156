"""Notifications: a session tells outside systems (its `notify` URLs) that a call waits
for approval, that it waits for an event, that it waits at a limit (`limit_reached`, with
on_limit "ask"), and that it has ended.

Each notification is a workflow of its own, `SESSION.notify-N` (N counts the session's
notifications, across continue-as-new), started by the session as a child that is left
running when the session continues as new or closes (parent close policy ABANDON). The
session never waits for a delivery: it waits only for the child's start (before it
continues as new, and before it closes with the `ended` one). The child runs one
`deliver_notification` activity per URL, each with its own retry policy
(workflows/options.py), so a receiver that is down delays nothing but its own
notification. N also makes the `Idempotency-Key`, `SESSION.notify-N`: the same on every
retry of one notification, different between notifications.

Outcomes: a notification workflow tells the session what became of it (the signal
`notification_outcome`: delivered and failed URLs, the activity attempts it took), and the
session counts them in `status --json` as `notifications` (`delivered`, `failed`,
`pending`: the notification workflows not heard from). A session that has closed cannot
take signals: the `ended` notification, and any still delivering when the session closed,
stay in `pending`, and `sessions.control.status` adds the results of those that have
finished since, read from their workflows.

Billable actions (workflows/metering.py): each notification is a child start (2), then its
activity attempts and its signal, counted when the signal arrives; those of a notification
still pending when the session closed are added by `sessions.control.status` too.

`Notifier.waiting_event(name, until)` is for a wait for an event to call when it starts.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, FailureError, RetryState

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel, Field

    from activities.notify import Delivery, Notification, NotifyActivities
    from workflows import ids, options
    from workflows.contract import SessionInput
    from workflows.records import LimitReached, PendingApproval
    from workflows.state import SessionState
    from workflows.temporal import Failed, Temporal

NOTIFY_OUTCOME = "notification_outcome"  # the signal a notification workflow sends its session
WORKFLOW_NAME = "NotifyWorkflow"


class NotifyInput(BaseModel):
    session_id: str
    key: str  # the Idempotency-Key, and the workflow's id
    urls: list[str]
    body: dict[str, Any]
    tell_session: bool = True  # False for `ended`: the session has closed


class NotifyResult(BaseModel):
    key: str
    delivered: int = 0
    failed: int = 0
    actions: int = 0  # the activity attempts the deliveries took
    errors: list[str] = Field(default_factory=list)  # why each failed URL failed


@workflow.defn(name=WORKFLOW_NAME)
class NotifyWorkflow:
    """One notification, to each URL concurrently; its outcome to the session that sent it."""

    @workflow.run
    async def run(self, input: NotifyInput) -> NotifyResult:
        result = NotifyResult(key=input.key)
        outcomes = await asyncio.gather(*(self._deliver(input, url) for url in input.urls))
        for attempts, error in outcomes:
            result.actions += attempts
            if error is None:
                result.delivered += 1
            else:
                result.failed += 1
                result.errors.append(error)
        if input.tell_session:
            # A session that has closed takes no signal: `status` reads this workflow's result instead.
            with contextlib.suppress(FailureError):
                await workflow.get_external_workflow_handle(input.session_id).signal(NOTIFY_OUTCOME, result)
        return result

    async def _deliver(self, input: NotifyInput, url: str) -> tuple[int, str | None]:
        """The attempts one URL took, and why it failed (None: delivered)."""
        kind = str(input.body.get("type", "notification"))
        try:
            delivery: Delivery = await workflow.execute_activity_method(
                NotifyActivities.deliver_notification,
                Notification(url=url, key=input.key, body=input.body),
                **options.deliver_notification(),
                summary=f"POST {kind} to {url}",
            )
        except ActivityError as err:
            return _attempts(err), f"{url}: {_why(err)}"
        return delivery.attempt, None


def _attempts(err: ActivityError) -> int:
    """How many attempts a failed delivery took: each attempt's failure carries its number."""
    cause = err.cause
    if isinstance(cause, ApplicationError) and cause.details and isinstance(cause.details[0], int):
        return cause.details[0]
    if err.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED:
        return options.attempts(options.deliver_notification())
    return 1


def _why(err: BaseException) -> str:
    cause = err.cause if isinstance(err, ActivityError) else err
    return cause.message if isinstance(cause, FailureError) else str(err)


def iso(moment: datetime) -> str:
    """ISO 8601 in UTC, as the rest of the session's JSON writes it."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


class Notifier:
    """The session's side: numbers, starts and counts its notifications."""

    def __init__(self, session_id: str, input: SessionInput, state: SessionState, temporal: Temporal) -> None:
        self.session_id = session_id
        self.input = input
        self.state = state
        self.temporal = temporal
        self.refused = False  # the worker cannot send them: none is sent in this run
        self._starting = 0  # children whose start is not confirmed yet

    def enabled(self) -> bool:
        return bool(self.input.notify) and not self.refused

    # ---- what the session notifies ---------------------------------------------------------

    def approval_requested(self, call: PendingApproval) -> None:
        """A call (of this session, or one of its sub-agents) waits for a person."""
        self._send(
            "approval_requested",
            {"call": {"tool_use_id": call.tool_use_id, "name": call.name, "input": call.input,
                      "session_id": call.session_id or self.session_id}},
        )  # fmt: skip

    def waiting_event(self, name: str, until: datetime) -> None:
        """The session waits for the event `name`, until `until` at the latest."""
        self._send("waiting_event", {"name": name, "until": iso(until)})

    def limit_reached(self, reached: LimitReached) -> None:
        """The session waits at a limit for a person to raise it (on_limit "ask")."""
        self._send(
            "limit_reached", {"limit": {"name": reached.name, "limit": reached.limit, "used": reached.used}}
        )

    async def ended(self) -> None:
        """The session has ended: start the `ended` notification and wait for its start only."""
        ending = self.state.ending
        if ending is None or not self.enabled():
            return
        self._send(
            "ended",
            {"status": ending.status, "stop_reason": ending.stop_reason, "answer": self.state.answer,
             "error": ending.error},
            tell_session=False,
        )  # fmt: skip
        await self.started()

    async def started(self) -> None:
        """Until every notification started so far is running on its own (before continue-as-new)."""
        await self.temporal.wait(lambda: self._starting == 0)

    # ---- the worker's check ----------------------------------------------------------------

    async def check(self) -> str | None:
        """Before the first model call: why this worker cannot notify the URLs, or None."""
        if not self.input.notify:
            return None
        # A regular activity: it runs where the deliveries will, on any worker of the queue.
        try:
            problem = await self.temporal.activity(
                NotifyActivities.check_notify,
                self.input.notify,
                options.check_notify(),
                summary="check the notification URLs",
            )
        except Failed as err:
            problem = f"the notification URLs could not be checked: {_why(err.error)}"
        if problem is not None:
            self.refused = True
            return f"cannot notify {', '.join(self.input.notify)}: {problem}"
        return None

    # ---- outcomes ----------------------------------------------------------------------------

    def take_outcome(self, outcome: NotifyResult) -> None:
        """A notification workflow's outcome (once: a repeat is ignored)."""
        counts = self.state.notifications
        if outcome.key not in counts.pending:
            return
        counts.pending.remove(outcome.key)
        counts.delivered += outcome.delivered
        counts.failed += outcome.failed
        self.temporal.child_actions(outcome.actions)

    # ---- sending -----------------------------------------------------------------------------

    def _send(self, kind: str, fields: dict[str, Any], *, tell_session: bool = True) -> None:
        if not self.enabled():
            return
        self.state.notifications_sent += 1
        key = ids.notification(self.session_id, self.state.notifications_sent)
        body = {"session_id": self.session_id, "type": kind, "at": iso(workflow.now()), **fields}
        self.state.notifications.pending.append(key)
        notification = NotifyInput(
            session_id=self.session_id,
            key=key,
            urls=list(self.input.notify),
            body=body,
            tell_session=tell_session,
        )
        self._starting += 1
        # No reference kept: the workflow's event loop holds every task until it ends.
        asyncio.create_task(self._start(notification))  # noqa: RUF006

    async def _start(self, notification: NotifyInput) -> None:
        try:
            await self.temporal.start_child(
                WORKFLOW_NAME,
                notification,
                id=notification.key,
                result_type=NotifyResult,
                child_options=options.notification(),
                summary=f"notify {notification.body['type']} of {self.session_id}",
            )
        except FailureError as err:  # the id is taken (a reset session sending it again)
            workflow.logger.warning("notification %s not started: %s", notification.key, err)
            counts = self.state.notifications
            if notification.key in counts.pending:
                counts.pending.remove(notification.key)
        finally:
            self._starting -= 1
