"""Spans and metrics of one model or tool activity attempt, as decorators.

`@model_call_telemetry` and `@tool_call_telemetry` go under `@activity.defn`: each
attempt is one span (so a retried attempt is its own span, marked with its error) with
the OpenTelemetry GenAI attributes, and one count and latency in the worker's metrics
(`activity.metric_meter()`: a no-op unless the worker has a metrics pipeline).

Spans exist only when tracing is on, which here means: something installed the Temporal
SDK's replay-safe tracer provider (infra/otel.py). With tracing off this module
does not import OpenTelemetry at all. The session's agent and user reach the activity
as OpenTelemetry baggage set by the workflow (workflows/spans.py), so no wire type
carries them twice. Prompt and completion text go on spans only with
`AGENT_TRACE_CONTENT=1`.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator
from contextlib import contextmanager, nullcontext
from typing import Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.wire import ModelReply, ModelRequest, ToolOutcome, ToolRequest

TRACER_NAME = "agent-loop"
BAGGAGE_PREFIX = "agent."
CONTENT_LIMIT = 16_000  # characters of prompt or completion text on one attribute

R = TypeVar("R")
S = TypeVar("S")  # the activities object a decorated method belongs to


def tracer() -> Any | None:
    """The replay-safe tracer when tracing is on, else None (and nothing imported)."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    provider = trace.get_tracer_provider()
    if type(provider).__name__ != "ReplaySafeTracerProvider":
        return None
    return provider.get_tracer(TRACER_NAME)


def content_wanted() -> bool:
    return os.environ.get("AGENT_TRACE_CONTENT", "") not in ("", "0")


def error_class(err: BaseException) -> str:
    """A short name for a failure: the ApplicationError's type, else the exception's class."""
    if isinstance(err, ApplicationError) and err.type:
        return err.type
    return type(err).__name__


# ---- model calls -----------------------------------------------------------------------


def model_call_telemetry(
    fn: Callable[[S, ModelRequest], Coroutine[Any, Any, ModelReply]],
) -> Callable[[S, ModelRequest], Coroutine[Any, Any, ModelReply]]:
    """One span and one count per model call attempt."""

    @functools.wraps(fn)
    async def traced(self: S, request: ModelRequest) -> ModelReply:
        if not activity.in_activity():  # called directly (a script, a test): no attempt to describe
            return await fn(self, request)
        provider, _, bare = request.model.rpartition(":")
        with _attempt_span(f"chat {bare}", _model_attributes(request, provider or "anthropic", bare)) as span:
            reply = await _measured("model", {"model": request.model}, fn(self, request))
            if span is not None:
                span.set_attributes(_reply_attributes(reply))
            return reply

    return traced


def _model_attributes(request: ModelRequest, provider: str, model: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
        "gen_ai.request.max_tokens": request.max_tokens,
        "gen_ai.conversation.id": request.session_id,
        "agent.step": request.step,
    }
    if content_wanted():
        attributes["gen_ai.system_instructions"] = request.system[:CONTENT_LIMIT]
        new = [m.model_dump(mode="json", exclude_none=True) for m in request.new_messages]
        attributes["gen_ai.input.messages"] = json.dumps(new, ensure_ascii=False)[:CONTENT_LIMIT]
    return attributes


def _reply_attributes(reply: ModelReply) -> dict[str, Any]:
    usage = reply.usage
    attributes: dict[str, Any] = {
        "gen_ai.response.model": reply.model,
        "gen_ai.response.finish_reasons": [reply.stop_reason or "unknown"],
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": usage.cache_read_input_tokens,
        "gen_ai.usage.cache_creation.input_tokens": usage.cache_creation_input_tokens,
    }
    if content_wanted():
        output = reply.message.model_dump(mode="json", exclude_none=True)
        attributes["gen_ai.output.messages"] = json.dumps([output], ensure_ascii=False)[:CONTENT_LIMIT]
    return attributes


# ---- tool calls ------------------------------------------------------------------------


def tool_call_telemetry(
    fn: Callable[[S, ToolRequest], Coroutine[Any, Any, ToolOutcome]],
) -> Callable[[S, ToolRequest], Coroutine[Any, Any, ToolOutcome]]:
    """One span and one count per tool call attempt; an `is_error` outcome counts as `error`."""

    @functools.wraps(fn)
    async def traced(self: S, request: ToolRequest) -> ToolOutcome:
        if not activity.in_activity():  # called directly (a script, a test): no attempt to describe
            return await fn(self, request)
        with _attempt_span(f"run_tool {request.name}", _tool_attributes(request)) as span:
            outcome = await _measured("tool", {"tool": request.name}, fn(self, request), _tool_outcome)
            if span is not None:
                _set_tool_result(span, outcome)
            return outcome

    return traced


def _tool_attributes(request: ToolRequest) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": request.name,
        "gen_ai.tool.call.id": request.tool_use_id,
        "gen_ai.tool.type": "function",
        "gen_ai.conversation.id": request.session_id,
    }
    if content_wanted():
        arguments = json.dumps(request.input, ensure_ascii=False)
        attributes["gen_ai.tool.call.arguments"] = arguments[:CONTENT_LIMIT]
    return attributes


def _tool_outcome(outcome: ToolOutcome) -> str:
    return "error" if outcome.is_error else "ok"


def _set_tool_result(span: Any, outcome: ToolOutcome) -> None:
    span.set_attribute("agent.tool.outcome", _tool_outcome(outcome))
    if outcome.is_error:
        from opentelemetry.trace import StatusCode

        span.set_status(StatusCode.ERROR, outcome.content[:200])
    if content_wanted():
        span.set_attribute("gen_ai.tool.call.result", outcome.content[:CONTENT_LIMIT])


# ---- shared ----------------------------------------------------------------------------


@contextmanager
def _attempt_span(name: str, attributes: dict[str, Any]) -> Generator[Any | None, None, None]:
    """A CLIENT span for this attempt with the session's baggage; None when tracing is off."""
    found = tracer()
    if found is None:
        with nullcontext():
            yield None
        return
    from opentelemetry import baggage
    from opentelemetry.trace import SpanKind

    for key, value in baggage.get_all().items():
        if key.startswith(BAGGAGE_PREFIX):
            attributes.setdefault(key, str(value))
    info = activity.info()
    attributes["agent.attempt"] = info.attempt
    attributes["temporal.activity.id"] = info.activity_id
    with found.start_as_current_span(name, kind=SpanKind.CLIENT, attributes=attributes) as span:
        yield span


async def _measured(
    kind: str, labels: dict[str, str], call: Awaitable[R], outcome_of: Callable[[R], str] | None = None
) -> R:
    """Await the call; count it and its latency by outcome, and count a failure Temporal retries."""
    meter = activity.metric_meter()
    started = time.monotonic()
    outcome = "ok"
    try:
        result = await call
        if outcome_of is not None:
            outcome = outcome_of(result)
        return result
    except BaseException as err:
        outcome = error_class(err)
        if _will_retry(err):
            retries = meter.create_counter("agent_retries", "Failed attempts Temporal retries")
            retries.with_additional_attributes({"activity": kind, "error_class": outcome}).add(1)
        raise
    finally:
        attributes = {**labels, "outcome": outcome}
        meter.create_counter(f"agent_{kind}_calls", f"{kind} call attempts").with_additional_attributes(
            attributes
        ).add(1)
        meter.create_histogram_float(
            f"agent_{kind}_call_duration", f"{kind} call attempt latency", "s"
        ).with_additional_attributes(attributes).record(time.monotonic() - started)


def _will_retry(err: BaseException) -> bool:
    if isinstance(err, ApplicationError) and err.non_retryable:
        return False
    if not isinstance(err, Exception):
        return False  # a cancel is not retried
    info = activity.info()
    policy = info.retry_policy
    if info.is_local or policy is None or not policy.maximum_attempts:
        return True
    return info.attempt < policy.maximum_attempts
