"""The error types a failed model call ends in, and the rules every provider shares.

Each provider decides which of its own failures are which (`Provider.classify`); this
module holds what does not depend on the provider: the type names the workflow reacts
to, the HTTP status table (408, 409, 429 and 5xx, 529 included, are retried; every other
4xx is terminal with the provider's message) and the Retry-After headers, honoured
through `next_retry_delay`.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from datetime import timedelta

from temporalio.exceptions import ApplicationError

RETRYABLE_STATUS = {408, 409, 429}
MAX_RETRY_AFTER = timedelta(minutes=5)

# Error types the workflow reacts to by name.
MODEL_RETRYABLE = "ModelRetryable"
MODEL_TERMINAL = "ModelTerminal"
PROMPT_TOO_LONG = "PromptTooLong"
TRANSCRIPT_MISSING = "TranscriptMissing"


class IncompleteResponse(Exception):
    """The response ended before it was complete (a stream cut before its last event)."""


def retry_after(headers: Mapping[str, str] | None) -> timedelta | None:
    """The delay the provider asked for, from retry-after-ms or retry-after."""
    if headers is None:
        return None
    delay = _seconds(headers.get("retry-after-ms"), scale=1000)
    if delay is None:
        delay = _seconds(headers.get("retry-after"))
    if delay is None:
        delay = _http_date(headers.get("retry-after"))
    if delay is None or delay < 0:
        return None
    return min(timedelta(seconds=delay), MAX_RETRY_AFTER)


def _seconds(value: str | None, scale: float = 1) -> float | None:
    try:
        return float(value) / scale if value is not None else None
    except ValueError:
        return None


def _http_date(value: str | None) -> float | None:
    try:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
    except (TypeError, ValueError):
        return None
    return parsed.timestamp() - time.time() if parsed is not None else None


def retryable(text: str, headers: Mapping[str, str] | None = None) -> ApplicationError:
    """A failure Temporal retries, after the delay the provider asked for if it did."""
    return ApplicationError(text, type=MODEL_RETRYABLE, next_retry_delay=retry_after(headers))


def terminal(text: str, type: str = MODEL_TERMINAL) -> ApplicationError:
    """A failure no retry can fix: it ends the session (or, for PROMPT_TOO_LONG, the fit)."""
    return ApplicationError(text, type=type, non_retryable=True)


def for_status(
    status: int, message: str, headers: Mapping[str, str] | None, *, prompt_too_long: bool = False
) -> ApplicationError:
    """An HTTP error answer; `prompt_too_long` is the provider's own reading of its body."""
    text = f"model {status}: {message}"
    if status in RETRYABLE_STATUS or status >= 500:
        return retryable(text, headers)
    if status == 400 and prompt_too_long:
        return terminal(text, PROMPT_TOO_LONG)
    return terminal(text)
