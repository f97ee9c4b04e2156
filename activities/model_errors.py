"""The error types a failed model call ends in, and the rules every provider shares.

`classify` is the one place that decides whether Temporal retries a failed model call.
A provider describes its SDK's failures (`SdkErrors`: its exception classes, how to read
its error answers, any failure of its own); this module holds what does not depend on
the provider: the type names the workflow reacts to, the HTTP status table (408, 409,
429 and 5xx, 529 included, are retried; every other 4xx is terminal with the provider's
message), the Retry-After headers, honoured through `next_retry_delay`, and the order in
which a failure is looked at.

The types also say which failures a session with fallback models answers with its next
model (`FALLS_BACK`, read by workflows/model_calls.py): rate limited (429,
`ModelRateLimited`), unavailable (5xx, 529, a timeout, a lost connection:
`ModelRetryable`) and refused credentials (401, 403: `ModelAuth`, never retried). An
invalid request (400, 413, 422, a prompt that does not fit) is the same for every model,
and does not fall back.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio.exceptions import ApplicationError

RETRYABLE_STATUS = {408, 409, 429}
MAX_RETRY_AFTER = timedelta(minutes=5)

# Error types the workflow reacts to by name.
MODEL_RETRYABLE = "ModelRetryable"
MODEL_RATE_LIMITED = "ModelRateLimited"  # 429: retried, and a fallback model's turn after its retries
MODEL_AUTH = "ModelAuth"  # 401, 403: the key is refused; never retried, a fallback model's turn at once
MODEL_TERMINAL = "ModelTerminal"
PROMPT_TOO_LONG = "PromptTooLong"
TRANSCRIPT_MISSING = "TranscriptMissing"
# The failures after which a session with fallback models makes the same step with the next.
FALLS_BACK = frozenset({MODEL_RETRYABLE, MODEL_RATE_LIMITED, MODEL_AUTH})
AUTH_STATUS = {401, 403}


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


def retryable(
    text: str, headers: Mapping[str, str] | None = None, type: str = MODEL_RETRYABLE
) -> ApplicationError:
    """A failure Temporal retries, after the delay the provider asked for if it did."""
    return ApplicationError(text, type=type, next_retry_delay=retry_after(headers))


def terminal(text: str, type: str = MODEL_TERMINAL) -> ApplicationError:
    """A failure no retry can fix: it ends the session (or, for PROMPT_TOO_LONG, the fit)."""
    return ApplicationError(text, type=type, non_retryable=True)


def for_status(
    status: int, message: str, headers: Mapping[str, str] | None, *, prompt_too_long: bool = False
) -> ApplicationError:
    """An HTTP error answer; `prompt_too_long` is the provider's own reading of its body."""
    text = f"model {status}: {message}"
    if status == 429:
        return retryable(text, headers, MODEL_RATE_LIMITED)
    if status in RETRYABLE_STATUS or status >= 500:
        return retryable(text, headers)
    if status == 400 and prompt_too_long:
        return terminal(text, PROMPT_TOO_LONG)
    if status in AUTH_STATUS:
        return terminal(text, MODEL_AUTH)
    return terminal(text)


@dataclass(frozen=True)
class SdkErrors:
    """How one provider's SDK fails. Anthropic's and OpenAI's SDKs are built alike: the
    same exception classes under their own names, over the same HTTP library."""

    status: type[Any]  # an error answer: has `status_code` and `response.headers`
    timeout: tuple[type[BaseException], ...]
    transport: type[BaseException]  # the HTTP library's, raised as is while a stream is read
    connection: type[BaseException]
    unreadable: type[BaseException]  # an answer that does not parse as the SDK expects
    # An error answer's message, and whether it says that the prompt does not fit.
    read: Callable[[Any], tuple[str, bool]]
    # A failure only this SDK has, decided; None: not one of them.
    own: Callable[[BaseException], ApplicationError | None] = lambda err: None


def classify(err: BaseException, sdk: SdkErrors) -> ApplicationError:
    """Retryable: 408, 409, 429, 5xx, connection, timeouts, cut or unreadable answers."""
    if isinstance(err, ApplicationError):
        return err  # already decided (the missing key)
    if isinstance(err, sdk.status):
        answer: Any = err  # the SDK's class: `status_code`, `response.headers`
        message, too_long = sdk.read(answer)
        return for_status(answer.status_code, message, answer.response.headers, prompt_too_long=too_long)
    if isinstance(err, sdk.timeout):
        return retryable("model call timed out")
    if isinstance(err, sdk.transport):
        return retryable(f"model connection error: {type(err).__name__} {err}".rstrip())
    if isinstance(err, IncompleteResponse):
        return retryable(f"model response incomplete: {err}")
    if isinstance(err, sdk.connection):
        return retryable(f"model connection error: {err.__cause__ or err}")
    if isinstance(err, (sdk.unreadable, ValueError, KeyError)):
        return retryable(f"model sent a response that cannot be read: {err}")
    return sdk.own(err) or retryable(f"model call failed: {type(err).__name__}: {err}")
