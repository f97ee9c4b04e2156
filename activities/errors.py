"""How a failed model call is classified: retried by Temporal, or terminal for the session.

This is the one place that decides. Retryable: 408, 409, 429, 5xx (529 included),
connection errors, timeouts and incomplete or unreadable responses; Retry-After is honoured through `next_retry_delay`.
Terminal: every other 4xx, carrying the provider's message.
"""

from __future__ import annotations

import email.utils
import time
from datetime import timedelta

from collections.abc import Mapping

import anthropic
import httpx2 as httpx
from temporalio.exceptions import ApplicationError

RETRYABLE_STATUS = {408, 409, 429}
MAX_RETRY_AFTER = timedelta(minutes=5)

# Error types the workflow reacts to by name.
MODEL_RETRYABLE = "ModelRetryable"
MODEL_TERMINAL = "ModelTerminal"
PROMPT_TOO_LONG = "PromptTooLong"
TRANSCRIPT_MISSING = "TranscriptMissing"


class IncompleteResponse(Exception):
    """The response ended before it was complete (a stream cut before message_stop)."""


def retry_after(headers: Mapping[str, str] | None) -> timedelta | None:
    """The delay the provider asked for, from retry-after-ms or retry-after."""
    if headers is None:
        return None
    delay: float | None = None
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            delay = float(ms) / 1000
        except ValueError:
            delay = None
    if delay is None and (value := headers.get("retry-after")) is not None:
        try:
            delay = float(value)
        except ValueError:
            parsed = email.utils.parsedate_to_datetime(value) if value else None
            if parsed is not None:
                delay = parsed.timestamp() - time.time()
    if delay is None or delay < 0:
        return None
    return min(timedelta(seconds=delay), MAX_RETRY_AFTER)


def provider_message(err: anthropic.APIStatusError) -> str:
    body = err.body
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if body.get("message"):
            return str(body["message"])
    return err.message or err.response.reason_phrase


def classify(err: BaseException) -> ApplicationError:
    """Turn a failure of the Messages API call into the error Temporal should see."""
    if isinstance(err, anthropic.APIStatusError):
        status = err.status_code
        text = f"model {status}: {provider_message(err)}"
        if status in RETRYABLE_STATUS or status >= 500:
            return ApplicationError(
                text, type=MODEL_RETRYABLE, next_retry_delay=retry_after(err.response.headers)
            )
        if status == 400 and "prompt is too long" in text.lower():
            return ApplicationError(text, type=PROMPT_TOO_LONG, non_retryable=True)
        return ApplicationError(text, type=MODEL_TERMINAL, non_retryable=True)
    if isinstance(err, (anthropic.APITimeoutError, httpx.TimeoutException)):
        return ApplicationError("model call timed out", type=MODEL_RETRYABLE)
    if isinstance(err, httpx.TransportError):
        # Raised as is (not wrapped by the SDK) while a stream is being read.
        return ApplicationError(
            f"model connection error: {type(err).__name__} {err}".rstrip(), type=MODEL_RETRYABLE
        )
    if isinstance(err, IncompleteResponse):
        return ApplicationError(f"model response incomplete: {err}", type=MODEL_RETRYABLE)
    if isinstance(err, anthropic.APIConnectionError):
        cause = err.__cause__ or err
        return ApplicationError(f"model connection error: {cause}", type=MODEL_RETRYABLE)
    if isinstance(err, (anthropic.APIResponseValidationError, ValueError, KeyError)):
        return ApplicationError(f"model sent a response that cannot be read: {err}", type=MODEL_RETRYABLE)
    return ApplicationError(f"model call failed: {type(err).__name__}: {err}", type=MODEL_RETRYABLE)
