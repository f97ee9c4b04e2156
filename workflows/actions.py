"""The control actions' rules and effects, as plain functions of the `Session`.

`AgentWorkflow` declares each action twice: as an update whose validator is the action's
rule (callers learn whether the session recorded it, or why not), and as a signal for
callers that need no answer (`signalled`: an invalid one changes nothing and is logged).

A rule (`check_*`) reads the state only and raises `ValueError` with a sentence a person
understands, or an `ApplicationError` of type `INVALID_TOOL_INPUT` when an edited tool
input breaks the tool's schema. An effect changes the state, says so through the view,
and returns the update's result.

`timeout` is the session's own decider (a call no one decided in time): a decision or a
cancel that names it, as `decided_by` or `on_behalf_of`, is refused at every door, raw
updates and signals included (`check_decider`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, cast

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import (
        ValidationError,
        best_match,  # pyright: ignore[reportUnknownVariableType]: its stub leaves the return untyped
    )
    from jsonschema.protocols import Validator

    from workflows import messages
    from workflows.contract import (
        INVALID_TOOL_INPUT,
        TIMED_OUT,
        CancelRequest,
        Decision,
        EventInput,
        LimitDecline,
        LimitRaise,
        ToolCallRecord,
        UserMessage,
    )
    from workflows.events import DecisionRecorded
    from workflows.records import WAIT_FOR_EVENT, ReceivedEvent
    from workflows.session import Session
    from workflows.state import MAX_UNDELIVERED_DATA, MAX_UNDELIVERED_EVENTS


# Signals naming the reserved decider are refused from this patch on; a history from before
# it recorded them, and replays them as it did.
RESERVED_DECIDER_PATCH = "reserved-decider"


def signalled(
    session: Session, signal: str, check: Callable[..., None], apply: Callable[..., Any], *payload: Any
) -> None:
    """An action sent as a signal: its effect if its rule allows it. No one hears a refusal,
    so a refused one (or one without its payload) changes nothing and is logged."""
    try:
        if None in payload:
            raise ValueError("the signal carries no payload")
        if any(_names_reserved(p) for p in payload) and not session.temporal.patched(RESERVED_DECIDER_PATCH):
            check = functools.partial(check, deciders=False)
        check(session, *payload)
        apply(session, *payload)
    except (ValueError, ApplicationError) as err:  # pydantic's ValidationError is a ValueError
        workflow.logger.warning("ignored signal %s: %s", signal, err)


# ---- who decides --------------------------------------------------------------------------


def check_decider(request: Decision | CancelRequest | LimitRaise | LimitDecline) -> None:
    """No caller records the session's own decider, `timeout`."""
    if _names_reserved(request):
        raise ValueError(
            f"{TIMED_OUT!r} is reserved: it is what a session records for a call no one decided in time"
        )


def _names_reserved(payload: Any) -> bool:
    return isinstance(payload, Decision | CancelRequest | LimitRaise | LimitDecline) and TIMED_OUT in (
        payload.decided_by,
        payload.on_behalf_of,
    )


# ---- approvals ---------------------------------------------------------------------------


def check_approve(session: Session, decision: Decision, *, deciders: bool = True) -> None:
    if deciders:
        check_decider(decision)
    call = _check_decision(session, decision, "approve")
    if decision.input is not None:
        _check_edited_input(session, call, decision.input)


def check_deny(session: Session, decision: Decision, *, deciders: bool = True) -> None:
    if deciders:
        check_decider(decision)
    _check_decision(session, decision, "deny")
    if decision.input is not None:
        raise ValueError("an edited input goes with approve, not deny")


def approve(session: Session, decision: Decision) -> str:
    return _decide(session, decision, approved=True)


def deny(session: Session, decision: Decision) -> str:
    return _decide(session, decision, approved=False)


def _check_decision(session: Session, decision: Decision, verb: str) -> ToolCallRecord:
    session.refuse_if_finished(verb)
    state = session.state
    call = state.calls.get(decision.tool_use_id)
    if call is None:
        waiting = [c.tool_use_id for c in state.waiting()]
        hint = f"; waiting: {', '.join(waiting)}" if waiting else "; no call is waiting for approval"
        raise ValueError(f"no tool call {decision.tool_use_id!r} in session {session.id}{hint}")
    if call.status != "waiting_approval":
        if call.requires_approval and call.status != "pending":
            raise ValueError(f"tool call {call.tool_use_id} ({call.name}) was already decided: {call.status}")
        raise ValueError(f"tool call {call.tool_use_id} ({call.name}) is not waiting for approval")
    return call


def _check_edited_input(session: Session, call: ToolCallRecord, edited: dict[str, Any]) -> None:
    """An edited input must pass the tool's JSON Schema, as recorded when the run started."""
    spec = session.state.spec(call.name)
    schema = spec.input_schema if spec is not None else {"type": "object"}
    validator = cast("Validator", Draft202012Validator(schema))  # its stub is partly untyped
    problem = cast("ValidationError | None", best_match(validator.iter_errors(edited)))
    if problem is not None:
        where = ".".join(str(p) for p in problem.absolute_path) or "input"
        raise ApplicationError(
            f"invalid input for {call.name}: {where}: {problem.message}",
            type=INVALID_TOOL_INPUT,
            non_retryable=True,
        )


def _decide(session: Session, decision: Decision, approved: bool) -> str:
    call = session.state.calls[decision.tool_use_id]
    record_decision(
        session, call, approved=approved, reason=decision.reason, decided_by=decision.decided_by,
        on_behalf_of=decision.on_behalf_of, edited_input=decision.input,
    )  # fmt: skip
    edited = " with an edited input" if approved and decision.input is not None else ""
    return f"{'approved' if approved else 'denied'} {call.name} ({call.tool_use_id}){edited}"


def record_decision(
    session: Session,
    call: ToolCallRecord,
    *,
    approved: bool,
    reason: str | None,
    decided_by: str | None,
    on_behalf_of: str | None = None,
    edited_input: dict[str, Any] | None = None,
) -> None:
    """The one place a call's approval is decided: by a person (`_decide`), by its deadline
    (`decided_by=TIMED_OUT`) or by an interrupt (no decider). It sets the call's fields and
    tells the view, which records the decision in the session's events."""
    call.decided_by, call.on_behalf_of = decided_by, on_behalf_of
    if approved:
        call.status, call.approved, call.approved_input = "pending", True, edited_input
        call.deadline = None  # the approval deadline, met
    else:
        call.status, call.reason = "denied", reason
    session.view.publish(
        DecisionRecorded(
            tool_use_id=call.tool_use_id, name=call.name, approved=approved, reason=reason,
            input=edited_input if approved else None, decided_by=decided_by, on_behalf_of=on_behalf_of,
        )
    )  # fmt: skip
    session.view.changed()


# ---- pause, resume, cancel -----------------------------------------------------------------


def check_pause(session: Session) -> None:
    session.refuse_if_finished("pause")
    if session.state.paused:
        raise ValueError(f"session {session.id} is already paused")


def check_resume(session: Session) -> None:
    session.refuse_if_finished("resume")
    if not session.state.paused:
        raise ValueError(f"session {session.id} is not paused")


def pause(session: Session) -> str:
    return _set_paused(session, True)


def resume(session: Session) -> str:
    return _set_paused(session, False)


def _set_paused(session: Session, paused: bool) -> str:
    session.state.paused = paused
    session.view.changed()
    return "paused" if paused else "resumed"


def check_cancel(session: Session, request: CancelRequest, *, deciders: bool = True) -> None:
    if deciders:
        check_decider(request)
    session.refuse_if_finished("cancel")


def cancel(session: Session, request: CancelRequest) -> str:
    if session.state.cancel_requested is None:
        session.state.cancel_requested = request.reason or ""
    return "cancelling"


# ---- events --------------------------------------------------------------------------------


def check_event(session: Session, event: EventInput) -> None:
    session.refuse_if_finished("take an event")
    if len(session.state.undelivered_events) >= MAX_UNDELIVERED_EVENTS:
        raise ValueError(
            f"session {session.id} already holds {MAX_UNDELIVERED_EVENTS} undelivered events; "
            "it takes no more until a wait_for_event takes some"
        )
    held = sum(_data_size(e.data) for e in session.state.undelivered_events)
    if held + _data_size(event.data) > MAX_UNDELIVERED_DATA:
        raise ValueError(
            f"session {session.id}'s undelivered events already hold {held} characters of data; "
            f"at most {MAX_UNDELIVERED_DATA} together, until a wait_for_event takes some"
        )


def _data_size(data: Any) -> int:
    return len(json.dumps(data, ensure_ascii=False, separators=(",", ":")))


def take_event(session: Session, event: EventInput) -> str:
    """Keep the event for the wait for its name (one waiting now takes it at once)."""
    state = session.state
    state.undelivered_events.append(ReceivedEvent(name=event.name, data=event.data, at=workflow.now()))
    session.view.changed()
    waiting = [c for c in state.in_waits(WAIT_FOR_EVENT) if c.run_input().get("name") == event.name]
    if waiting:
        return f"event {event.name} delivered to {waiting[0].tool_use_id}"
    kept = sum(1 for e in state.undelivered_events if e.name == event.name)
    return f"event {event.name} kept for the next wait_for_event {event.name} ({kept} kept)"


# ---- chat ----------------------------------------------------------------------------------


def check_send(session: Session, message: UserMessage) -> None:
    messages.check_send(session, message)


def send(session: Session, message: UserMessage) -> int:
    """Keep a user message for the model (workflows/messages.py); its id (the goal is 1)."""
    return messages.send(session, message)


def check_close(session: Session) -> None:
    session.refuse_if_finished("close")
    if not session.input.chat:
        raise ValueError(f"session {session.id} is not a chat session; use cancel to end it")
    if session.state.closing:
        raise ValueError(f"session {session.id} is already closing")


def close(session: Session) -> str:
    state = session.state
    state.closing = True
    session.view.changed()
    if not state.idle or state.pending:
        return "closing: the session ends after the messages already sent"
    return "closed"
