"""Small pieces the session workflow's modules share: how a run ends or is handed over,
failure descriptions, and formatting for summaries."""

from __future__ import annotations

import json
from typing import Any

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    RetryState,
    TimeoutError,
)

with workflow.unsafe.imports_passed_through():
    from workflows.types import (
        RunStatus,
    )

EVENT_TOPIC = "event"
SETTLED = ("done", "error", "denied", "cancelled", "not_run")


class _Finished(Exception):
    """Raised inside the loop to end the run with a status."""

    def __init__(self, status: RunStatus, stop_reason: str | None = None, error: str | None = None):
        super().__init__(status)
        self.status, self.stop_reason, self.error = status, stop_reason, error


class _ContinueAsNew(Exception):
    """Raised at a safe point to hand the session to a new run."""


def _chat_goes_on(ended: _Finished) -> bool:
    """A chat waits for the next message after an answer, a cut answer or a refusal."""
    return ended.status == "completed" or ended.stop_reason in ("max_tokens", "refusal")


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _fmt_duration(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h"
    if seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    return f"{seconds:g}s"


def _was_cancelled(err: ActivityError) -> bool:
    return isinstance(err.cause, CancelledError)


def _error_type(err: ActivityError) -> str | None:
    cause = err.cause
    return cause.type if isinstance(cause, ApplicationError) else None


def _describe_failure(err: ActivityError, what: str) -> str:
    cause = err.cause
    if isinstance(cause, TimeoutError):
        return f"{what} timed out ({cause.type.name.lower().replace('_', '-')})"
    text = cause.message if isinstance(cause, ApplicationError) else f"{what} failed: {cause or err}"
    if err.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED:
        text += " (retries exhausted)"
    return text
