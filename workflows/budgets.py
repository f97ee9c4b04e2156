"""Budgets: `max_steps`, `token_budget` and `cost_budget`, and what a session does at one.

With `on_limit` absent or `"stop"` a limit ends the run `stopped`, the limit its reason,
as it always has. With `"ask"` the session waits instead (`waiting_budget`, its
`limit_reached` in the status, an event and a `limit_reached` notification): a person
raises the limit (`raise_limit {name, value}`, a new absolute value above what is used)
and the loop goes on, or declines (`decline_limit`) and the session ends `stopped`, the
limit its reason. The wait is not working time; the session's approval timeout bounds it
(then: `stopped`). Raised limits live in the state (`raised_limits`), so they survive
continue-as-new; a long wait hands the session to a new run, which waits on.

The rules and effects of the two updates are here too, as plain functions of the session
(`AgentWorkflow` declares the handlers, `workflows/actions.py` holds the others').
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from workflows import actions
    from workflows.contract import LIMIT_FIELDS, LimitDecline, LimitName, LimitRaise, Limits
    from workflows.events import LimitRaised, LimitWait
    from workflows.outcomes import Finished, HandOver
    from workflows.records import LimitReached
    from workflows.session import Session, fmt_duration


class Budgets:
    def __init__(self, session: Session, wants_handover: Callable[[], bool]) -> None:
        self.session = session
        self.state = session.state
        self._wants_handover = wants_handover

    async def at_max_steps(self) -> None:
        """The run has made its last step: stop, or wait until a person raises the limit."""
        await self._reached("max_steps")

    async def check(self) -> None:
        """After a response or a batch of tools: a token or cost budget passed stops the run
        before anything more runs, or waits until a person raises it."""
        while (name := passed(self.session)) is not None:
            await self._reached(name)

    async def _reached(self, name: LimitName) -> None:
        if self.session.input.on_limit != "ask":
            raise Finished("stopped", stop_reason=name)
        state, session = self.state, self.session
        if state.limit_reached is None or state.limit_reached.name != name:
            self._start_waiting(name)
        reached = state.limit_reached
        assert reached is not None
        answered = lambda: (  # noqa: E731
            state.limit_reached is None or state.limit_declined is not None or self._wants_handover()
        )
        if reached.deadline is None:
            await session.temporal.wait(answered)
        elif not answered():
            left = (reached.deadline - workflow.now()).total_seconds()
            timeout = session.input.limits.approval_timeout_seconds or left
            summary = f"{name} reached, at most {fmt_duration(timeout)}"
            if left <= 0 or not await session.temporal.wait(answered, timeout=left, summary=summary):
                raise Finished("stopped", stop_reason=name)
        if state.limit_declined is not None:
            raise Finished("stopped", stop_reason=name)
        if state.limit_reached is not None:
            raise HandOver()  # a long wait: the next run waits on

    def _start_waiting(self, name: LimitName) -> None:
        session, now = self.session, workflow.now()
        timeout = session.input.limits.approval_timeout_seconds
        reached = self.state.limit_reached = LimitReached(
            name=name, limit=limit_of(session.limits, name), used=used(session, name), at=now,
            deadline=now + timedelta(seconds=timeout) if timeout is not None else None,
        )  # fmt: skip
        session.view.publish(
            LimitWait(name=name, limit=reached.limit, used=reached.used, deadline=reached.deadline)
        )
        session.view.changed()
        session.notifier.limit_reached(reached)


def passed(session: Session) -> LimitName | None:
    """The token or cost budget the session has passed, if any."""
    limits, state = session.limits, session.state
    if state.usage.total() > limits.token_budget:
        return "token_budget"
    if limits.cost_budget_usd is not None and (state.cost_usd or 0) > limits.cost_budget_usd:
        return "cost_budget"
    return None


def limit_of(limits: Limits, name: LimitName) -> float:
    value = getattr(limits, LIMIT_FIELDS[name])
    return float(value) if value is not None else float("inf")


def used(session: Session, name: LimitName) -> float:
    state = session.state
    if name == "max_steps":
        return float(state.steps)
    if name == "token_budget":
        return float(state.usage.total())
    return state.cost_usd or 0.0


# ---- the updates: raise_limit, decline_limit -----------------------------------------------


def check_raise(session: Session, request: LimitRaise, *, deciders: bool = True) -> None:
    session.refuse_if_finished("raise a limit")
    if deciders:
        actions.check_decider(request)
    name, value = request.name, request.value
    if name != "cost_budget" and value != int(value):
        raise ValueError(f"{name} is a whole number, not {value:g}")
    if name == "cost_budget" and session.state.cost_usd is None:
        raise ValueError(f"session {session.id} has no prices for its models, so it keeps no cost budget")
    spent = used(session, name)
    if value <= spent:
        raise ValueError(f"the new {name} ({value:g}) must be above what is used ({spent:g})")
    try:
        session.limits.model_validate({**session.limits.model_dump(), LIMIT_FIELDS[name]: value})
    except ValidationError as err:
        raise ValueError(f"{name}: {err.errors()[0]['msg']}") from None


def raise_limit(session: Session, request: LimitRaise) -> str:
    state = session.state
    state.raised_limits[request.name] = request.value
    if state.limit_reached is not None and state.limit_reached.name == request.name:
        state.limit_reached = None
    session.view.publish(LimitRaised(name=request.name, value=request.value, decided_by=request.decided_by))
    session.view.changed()
    return f"{request.name} raised to {request.value:g}"


def check_decline(session: Session, request: LimitDecline, *, deciders: bool = True) -> None:
    session.refuse_if_finished("decline a limit")
    if deciders:
        actions.check_decider(request)
    if session.state.limit_reached is None:
        raise ValueError(f"session {session.id} is not waiting at a limit")


def decline_limit(session: Session, request: LimitDecline) -> str:
    reached = session.state.limit_reached
    assert reached is not None
    session.state.limit_declined = request.reason or ""
    return f"declined: the session stops at its {reached.name}"
