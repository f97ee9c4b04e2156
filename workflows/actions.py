"""The control actions, each defined once: its payload, its rule (who may do it when) and
its effect. `handlers(action)` derives from that one definition the Temporal update with
its validator (callers learn whether the session recorded the action, or why not) and
the signal (fire and forget; an invalid one changes nothing).

An action's rule raises `ValueError` with a sentence a person understands, or an
`ApplicationError` of type `INVALID_TOOL_INPUT` when an edited tool input breaks the
tool's schema. Rules read the state only; effects change it and say so through the view.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    import jsonschema

    from workflows.events import DecisionRecorded
    from workflows.session import Session
    from workflows.contract import INVALID_TOOL_INPUT, CancelRequest, Decision, ToolCallRecord, UserMessage


@dataclass(frozen=True)
class Action:
    update: str  # the update's name; the Python method on the workflow has the same name
    signal: str  # the signal's name, for callers that need no answer
    payload: type | None  # None: the action takes no payload
    result: type
    check: Callable[[Session, Any], None]
    apply: Callable[[Session, Any], Any]


def handlers(action: Action) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The update (with its validator) and the signal of one action, as workflow methods
    that act on `self.session`."""
    if action.payload is None:

        def update(self):
            return action.apply(self.session, None)

        def validate(self):
            action.check(self.session, None)

        def signal(self):
            _signalled(self.session, action, None)

    else:

        def update(self, payload):
            return action.apply(self.session, payload)

        def validate(self, payload):
            action.check(self.session, payload)

        def signal(self, payload=None):
            _signalled(self.session, action, payload)

    # The SDK reads the payload and result types from the annotations.
    given = {} if action.payload is None else {"payload": action.payload}
    update.__annotations__ = {**given, "return": action.result}
    validate.__annotations__ = {**given, "return": None}
    signal.__annotations__ = {**given, "return": None}
    for fn, name in ((update, action.update), (validate, f"_validate_{action.update}"), (signal, action.signal)):
        fn.__name__ = fn.__qualname__ = name
    defined = workflow.update(name=action.update)(update)
    defined.validator(validate)
    return defined, workflow.signal(name=action.signal)(signal)


def _signalled(session: Session, action: Action, payload: Any) -> None:
    try:
        if action.payload is not None and payload is None:
            payload = action.payload()
        action.check(session, payload)
        action.apply(session, payload)
    except (ValueError, ApplicationError) as err:  # pydantic's ValidationError is a ValueError
        workflow.logger.warning("ignored signal %s: %s", action.signal, err)


# ---- approvals ---------------------------------------------------------------------------


def check_decision(session: Session, decision: Decision, verb: str) -> ToolCallRecord:
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


def check_edited_input(session: Session, call: ToolCallRecord, edited: dict[str, Any]) -> None:
    """An edited input must pass the tool's JSON Schema, as recorded when the run started."""
    spec = session.state.spec(call.name)
    schema = spec.input_schema if spec is not None else {"type": "object"}
    problem = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(edited))
    if problem is not None:
        where = ".".join(str(p) for p in problem.absolute_path) or "input"
        raise ApplicationError(
            f"invalid input for {call.name}: {where}: {problem.message}", type=INVALID_TOOL_INPUT, non_retryable=True
        )


def _check_approve(session: Session, decision: Decision) -> None:
    call = check_decision(session, decision, "approve")
    if decision.input is not None:
        check_edited_input(session, call, decision.input)


def _check_deny(session: Session, decision: Decision) -> None:
    check_decision(session, decision, "deny")
    if decision.input is not None:
        raise ValueError("an edited input goes with approve, not deny")


def _decide(session: Session, decision: Decision, approved: bool) -> str:
    call = session.state.calls[decision.tool_use_id]
    call.decided_by = decision.decided_by
    if approved:
        call.status, call.approved, call.approved_input = "pending", True, decision.input
    else:
        call.status, call.reason = "denied", decision.reason
    session.view.publish(
        DecisionRecorded(
            tool_use_id=call.tool_use_id, name=call.name, approved=approved, reason=decision.reason,
            input=decision.input if approved else None, decided_by=decision.decided_by,
        )
    )  # fmt: skip
    session.view.changed()
    edited = " with an edited input" if approved and decision.input is not None else ""
    return f"{'approved' if approved else 'denied'} {call.name} ({call.tool_use_id}){edited}"


APPROVE = Action(
    "approve_call", "approve", Decision, str, _check_approve, lambda s, d: _decide(s, d, approved=True)
)
DENY = Action("deny_call", "deny", Decision, str, _check_deny, lambda s, d: _decide(s, d, approved=False))


# ---- pause, resume, cancel -----------------------------------------------------------------


def _check_pause(session: Session, _: None) -> None:
    session.refuse_if_finished("pause")
    if session.state.paused:
        raise ValueError(f"session {session.id} is already paused")


def _check_resume(session: Session, _: None) -> None:
    session.refuse_if_finished("resume")
    if not session.state.paused:
        raise ValueError(f"session {session.id} is not paused")


def _set_paused(session: Session, paused: bool) -> str:
    session.state.paused = paused
    session.view.changed()
    return "paused" if paused else "resumed"


def _cancel(session: Session, request: CancelRequest) -> str:
    if session.state.cancel_requested is None:
        session.state.cancel_requested = request.reason or ""
    return "cancelling"


PAUSE = Action("pause_session", "pause", None, str, _check_pause, lambda s, _: _set_paused(s, True))
RESUME = Action("resume_session", "resume", None, str, _check_resume, lambda s, _: _set_paused(s, False))
CANCEL = Action(
    "cancel_session", "cancel", CancelRequest, str, lambda s, _: s.refuse_if_finished("cancel"), _cancel
)


# ---- chat ----------------------------------------------------------------------------------


def _check_message(session: Session, message: UserMessage) -> None:
    session.refuse_if_finished("take a message")
    if not session.input.chat:
        raise ValueError(f"session {session.id} is not a chat session (start one with --chat)")
    if session.state.closing:
        raise ValueError(f"session {session.id} is closing; it takes no more messages")


def _queue_message(session: Session, message: UserMessage) -> int:
    """Queue a user message; its position among the user turns (the goal is 1)."""
    state = session.state
    state.queue.append(message.text)
    session.view.changed()
    return state.user_turns + len(state.queue)


def _check_close(session: Session, _: None) -> None:
    session.refuse_if_finished("close")
    if not session.input.chat:
        raise ValueError(f"session {session.id} is not a chat session; use cancel to end it")
    if session.state.closing:
        raise ValueError(f"session {session.id} is already closing")


def _close(session: Session, _: None) -> str:
    state = session.state
    state.closing = True
    session.view.changed()
    if not state.idle or state.queue:
        return "closing: the session ends after the messages already sent"
    return "closed"


SEND = Action("send_message", "send", UserMessage, int, _check_message, _queue_message)
CLOSE = Action("close_session", "close", None, str, _check_close, _close)
