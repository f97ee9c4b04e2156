"""The spans and metrics that only workflow code can make: the session run, each tool
call (the parent of its attempts, its approval wait and its sub-agent), the approval
wait, sessions started and ended, tokens and cost.

Spans use the tracer of the Temporal SDK's replay-safe provider (installed by
infra/otel.py; without it every helper here is a no-op): on replay a span is
started again with its first start time and the same deterministic id, and it is not
ended again, so a replayed session adds no duplicate span. Metrics use
`workflow.metric_meter()`, which the SDK silences during replay. None of this issues a
command: the workflow's history is the same with tracing on or off.
"""

from __future__ import annotations

from asyncio import CancelledError
from collections.abc import Generator
from contextlib import contextmanager
from typing import Any, Protocol

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.attempt_telemetry import tracer
    from activities.wire import Usage
    from workflows.contract import SessionInput
    from workflows.outcomes import Finished, HandOver
    from workflows.records import ToolCallRecord
    from workflows.state import SessionState

_ENDS_NORMALLY = (CancelledError, HandOver, Finished)


class Session(Protocol):
    """What the spans read of a session (workflows/temporal.py's `Temporal` has it)."""

    id: str
    input: SessionInput
    state: SessionState


def _agent(session: Session) -> str:
    agent = session.input.agent
    return agent.name if agent is not None else "default"


@contextmanager
def _attached(ctx: Any) -> Generator[None, None, None]:
    """Make an OpenTelemetry context current for the block.

    A run dropped from the worker's cache can be closed later by the garbage collector,
    from another context (GeneratorExit at its await): the run's context goes with it, so
    there is nothing to detach, and detaching would log "Failed to detach context".
    """
    from opentelemetry import context

    token = context.attach(ctx)
    try:
        yield
    finally:
        if context.get_current() is ctx:
            context.detach(token)


@contextmanager
def _span(name: str, attributes: dict[str, Any]) -> Generator[Any | None, None, None]:
    """A span that is current for the block; None (and nothing imported) when tracing is off."""
    found = tracer()
    if found is None:
        yield None
        return
    from opentelemetry import trace

    # The contrib leaves a span unended when an exception was recorded on it (so that a
    # failing workflow task does not emit it once per retry): only a bug is recorded.
    # A cancel, a hand-over or the end of the loop pass through a span that ends; a run
    # closed after an eviction leaves it open (the session goes on, on another worker).
    span = found.start_span(
        name, attributes=attributes, record_exception=False, set_status_on_exception=False
    )
    closed = False
    with _attached(trace.set_span_in_context(span)):
        try:
            yield span
        except GeneratorExit:
            closed = True
            raise
        except _ENDS_NORMALLY:
            raise
        except BaseException as err:
            span.record_exception(err)
            raise
        finally:
            if not closed:
                span.end()


@contextmanager
def session_span(session: Session) -> Generator[None, None, None]:
    """The run's span, `invoke_agent {agent}`; its agent and user go to activities as baggage."""
    if tracer() is None:
        yield
        return
    from opentelemetry import baggage, context

    agent, info = _agent(session), workflow.info()
    values = {"agent.session.id": session.id, "agent.name": agent, "agent.user.id": session.input.user_id}
    ctx = context.get_current()
    for key, value in values.items():
        ctx = baggage.set_baggage(key, value, ctx)
    attributes = {
        **values,
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent,
        "gen_ai.conversation.id": session.id,
        "gen_ai.request.model": session.input.model,
        "agent.run": session.state.runs,
        "agent.parent.session.id": session.input.parent.session_id if session.input.parent else "",
        "temporal.run.id": info.run_id,
    }
    with _attached(ctx), _span(f"invoke_agent {agent}", attributes) as span:
        try:
            yield
        finally:
            if span is not None:  # tracing is on, so there is one
                span.set_attributes(_ending_attributes(session))


def _ending_attributes(session: Session) -> dict[str, Any]:
    state, ending = session.state, session.state.ending
    return {
        "agent.status": ending.status if ending is not None else "continued_as_new",
        "agent.stop_reason": (ending.stop_reason or "") if ending is not None else "",
        "agent.steps": state.steps,
        "gen_ai.usage.input_tokens": state.usage.input_tokens,
        "gen_ai.usage.output_tokens": state.usage.output_tokens,
    }


@contextmanager
def tool_call_span(call: ToolCallRecord) -> Generator[None, None, None]:
    """`execute_tool {name}`: the call from start to result, over its approval and attempts."""
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.name,
        "gen_ai.tool.call.id": call.tool_use_id,
        "gen_ai.tool.type": "function",
        "agent.step": call.step,
    }
    with _span(f"execute_tool {call.name}", attributes) as span:
        try:
            yield
        finally:
            if span is not None:
                _set_call_status(span, call)


def _set_call_status(span: Any, call: ToolCallRecord) -> None:
    span.set_attribute("agent.tool.status", call.status)
    if call.child_session_id:
        span.set_attribute("agent.child.session.id", call.child_session_id)
    if call.status not in ("done", "waiting_approval"):
        from opentelemetry.trace import StatusCode

        span.set_status(StatusCode.ERROR, (call.output or call.status)[:200])


@contextmanager
def approval_span(session: Session, call: ToolCallRecord) -> Generator[None, None, None]:
    """`approval {name}`: the wait for a person, with who decided and how; and its time."""
    started = workflow.now()
    attributes = {
        "gen_ai.tool.name": call.name, "gen_ai.tool.call.id": call.tool_use_id, "agent.step": call.step,
    }  # fmt: skip
    with _span(f"approval {call.name}", attributes) as span:
        try:
            yield
        finally:
            decision = _decision(call)
            if span is not None:
                span.set_attribute("agent.approval.decision", decision)
                span.set_attribute("agent.approval.decided_by", call.decided_by or "")
            if decision != "waiting":
                _meter(session).create_histogram_float(
                    "agent_approval_wait", "Time a tool call waited for a person", "s"
                ).with_additional_attributes({"tool": call.name, "decision": decision}).record(
                    (workflow.now() - started).total_seconds()
                )


def _decision(call: ToolCallRecord) -> str:
    if call.status == "waiting_approval":
        return "waiting"  # handed to the next run, which waits on
    if call.status == "denied":
        return "denied"
    return "approved" if call.approved else call.status


# ---- metrics ---------------------------------------------------------------------------


def _meter(session: Session) -> Any:
    return workflow.metric_meter().with_additional_attributes({"agent": _agent(session)})


def session_started(session: Session) -> None:
    """Count a new session (not a continue-as-new run of one)."""
    if workflow.info().continued_run_id is None:
        _meter(session).create_counter("agent_sessions_started", "Sessions started").add(1)


def session_ended(session: Session) -> None:
    ending = session.state.ending
    if ending is None:
        return
    attributes = {"status": ending.status, "stop_reason": ending.stop_reason or ""}
    _meter(session).create_counter("agent_sessions_ended", "Sessions ended").with_additional_attributes(
        attributes
    ).add(1)


def model_turn(session: Session, model: str, usage: Usage, cost_usd: float | None) -> None:
    """Tokens by kind and cost of one recorded model reply, by model and agent."""
    meter = _meter(session).with_additional_attributes({"model": model})
    tokens = meter.create_counter("agent_tokens", "Model tokens", "{token}")
    for kind, count in (
        ("input", usage.input_tokens),
        ("output", usage.output_tokens),
        ("cache_read", usage.cache_read_input_tokens),
        ("cache_creation", usage.cache_creation_input_tokens),
    ):
        if count:
            tokens.with_additional_attributes({"kind": kind}).add(count)
    if cost_usd is not None:
        meter.create_histogram_float("agent_cost", "Cost of model calls", "USD").record(cost_usd)
