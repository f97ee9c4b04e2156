"""`Session`: what the loop, the tool calls and the control actions act on, passed to
each of them explicitly: the input it runs with, its state, and its view (how others see
it). How a run ends or is handed over, and failure descriptions, live here too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, RetryState, TimeoutError

with workflow.unsafe.imports_passed_through():
    from workflows.contract import Limits, RunStatus, SessionInput
    from workflows.events import SessionEnded
    from workflows.metering import Meter
    from workflows.notify import Notifier
    from workflows.state import SessionState
    from workflows.view import SessionView


@dataclass
class Session:
    id: str
    input: SessionInput
    state: SessionState
    view: SessionView
    meter: Meter  # the billable actions it causes
    notifier: Notifier = field(init=False)  # tells its `notify` URLs (workflows/notify.py)

    def __post_init__(self) -> None:
        self.notifier = Notifier(self.id, self.input, self.state, self.meter)

    @property
    def limits(self) -> Limits:
        """The session's limits, with the ones a person raised (workflows/budgets.py)."""
        return self.input.limits.raised(self.state.raised_limits)

    def finish(self, status: RunStatus, stop_reason: str | None = None, error: str | None = None) -> None:
        """End the session with a status; the first end counts."""
        if not self.state.end(status, stop_reason, error):
            return
        self.view.publish(
            SessionEnded(status=status, stop_reason=stop_reason, error=error, answer=self.state.answer)
        )
        self.view.changed()

    def refuse_if_finished(self, action: str) -> None:
        if self.state.ending is not None:
            raise ValueError(f"session {self.id} is {self.state.ending.status}; cannot {action}")


class Finished(Exception):
    """Raised inside the loop to end the run with a status."""

    status: RunStatus
    stop_reason: str | None
    error: str | None

    def __init__(self, status: RunStatus, stop_reason: str | None = None, error: str | None = None):
        super().__init__(status)
        self.status, self.stop_reason, self.error = status, stop_reason, error

    def chat_goes_on(self) -> bool:
        """A chat waits for the next message after an answer, a cut answer or a refusal."""
        return self.status == "completed" or self.stop_reason in ("max_tokens", "refusal")


class HandOver(Exception):
    """Raised at a safe point to hand the session to a new run (continue-as-new)."""


def short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def fmt_duration(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h"
    if seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    return f"{seconds:g}s"


def was_cancelled(err: ActivityError) -> bool:
    return isinstance(err.cause, CancelledError)


def error_type(err: ActivityError) -> str | None:
    cause = err.cause
    return cause.type if isinstance(cause, ApplicationError) else None


def describe_failure(err: BaseException, what: str) -> str:
    """One line on why an activity failed: a timeout, the error's message, retries spent."""
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
