"""The durable waits every worker has, as tools: `sleep` and `wait_for_event`.

A session is offered them only when it names them (`--tools ...,sleep,wait_for_event`,
an agent's `tools`). Each runs in the workflow itself: a timer, and for an event a
condition on the events sent to the session; no activity, no heartbeat, no worker slot.
The end of each wait is kept in wall time on the call's record (`deadline`), so a
continue-as-new or a worker crash never restarts it. Neither counts as working time.

Events come in through the `send_event` update and the `event` signal
(`workflows/actions.py`); one that arrives before a wait for its name is kept in the
state (at most `MAX_UNDELIVERED_EVENTS`) and taken by the next wait for that name.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel, ConfigDict, Field, ValidationError

    from activities.wire import ToolSpec
    from workflows.events import EventReceived, Sleeping, WaitingEvent
    from workflows.outcomes import HandOver
    from workflows.records import SLEEP, WAIT_FOR_EVENT, WAIT_TOOLS, ReceivedEvent, ToolCallRecord
    from workflows.session import Session, fmt_duration, short

MAX_WAIT_SECONDS = 30 * 24 * 3600  # 30 days


class SleepInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seconds: float = Field(gt=0, le=MAX_WAIT_SECONDS)
    reason: str = Field(max_length=1000)


class EventWaitInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200)
    timeout_seconds: float = Field(gt=0, le=MAX_WAIT_SECONDS)


SPECS = {
    SLEEP: ToolSpec(
        name=SLEEP,
        description=(
            "Wait for a while before going on, without using anything meanwhile: check something "
            "again later. Give how many seconds (at most 30 days) and why. The result says how "
            "long the session slept."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_WAIT_SECONDS},
                "reason": {"type": "string", "description": "why, shown to the people watching"},
            },
            "required": ["seconds", "reason"],
            "additionalProperties": False,
        },
    ),
    WAIT_FOR_EVENT: ToolSpec(
        name=WAIT_FOR_EVENT,
        description=(
            "Wait until something outside sends the session the event `name` (a build that "
            "reports back, a person who replies), at most `timeout_seconds` (at most 30 days). "
            "The result is the event's data, or says that no event came in time. An event sent "
            "before the wait starts is kept for it."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 200},
                "timeout_seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_WAIT_SECONDS},
            },
            "required": ["name", "timeout_seconds"],
            "additionalProperties": False,
        },
    ),
}


def is_wait(spec: ToolSpec) -> bool:
    return spec.name in WAIT_TOOLS and spec.server is None and spec.subagent is None


def with_waits(worker_specs: list[ToolSpec], named: list[str] | None) -> list[ToolSpec]:
    """The worker's tools, and the waits the session names (they replace a worker tool of the same name)."""
    wanted = [name for name in WAIT_TOOLS if named is not None and name in named]
    return [s for s in worker_specs if s.name not in wanted] + [SPECS[name] for name in wanted]


def check_input(call: ToolCallRecord) -> str | None:
    """What is wrong with a wait's input, as the model reads it; None if nothing."""
    try:
        _parse(call)
    except ValidationError as err:
        return _problem(call.name, err)
    return None


def event_text(data: Any) -> str:
    """An event's data as the tool result: a string as it is, anything else as compact JSON."""
    if isinstance(data, str):
        return data
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


class Waits:
    """Runs the wait calls of one session; `idle_enough` says when a long wait may hand the
    session over to a new run (continue-as-new)."""

    def __init__(self, session: Session, idle_enough: Callable[[], bool]) -> None:
        self.session = session
        self.state = session.state
        self._idle_enough = idle_enough

    async def run(self, call: ToolCallRecord) -> tuple[str, bool]:
        """Wait as the call asks; its result and whether it is an error. Raises `HandOver`
        when the session continues as new during the wait (the next run waits on)."""
        try:
            args = _parse(call)
        except ValidationError as err:
            return _problem(call.name, err), True
        if isinstance(args, SleepInput):
            return await self._sleep(call, args), False
        return await self._wait_for_event(call, args), False

    # ---- sleep ---------------------------------------------------------------------------

    async def _sleep(self, call: ToolCallRecord, args: SleepInput) -> str:
        if not call.in_wait(SLEEP):
            until = self._start(call, args.seconds)
            self.session.view.publish(Sleeping(until=until, reason=args.reason))
            self.session.view.changed()
        summary = f"sleep {fmt_duration(args.seconds)}" + (
            f": {short(args.reason, 100)}" if args.reason else ""
        )
        await self._until(call, summary, lambda: False)
        assert call.started_at is not None
        return f"slept {_took((workflow.now() - call.started_at).total_seconds())}"

    # ---- events --------------------------------------------------------------------------

    async def _wait_for_event(self, call: ToolCallRecord, args: EventWaitInput) -> str:
        if not call.in_wait(WAIT_FOR_EVENT):
            self._start(call, args.timeout_seconds)
            self.started_waiting_for_event(call, args.name)
        summary = f"event {short(args.name, 100)} (at most {fmt_duration(args.timeout_seconds)})"
        await self._until(call, summary, lambda: self._kept(args.name) is not None)
        event = self._kept(args.name)
        if event is None:
            return f"no event {args.name} within {fmt_duration(args.timeout_seconds)}"
        self.state.undelivered_events.remove(event)
        self.session.view.publish(EventReceived(name=args.name))
        return event_text(event.data)

    def started_waiting_for_event(self, call: ToolCallRecord, name: str) -> None:
        """The one place a session starts waiting for an event (a new wait, not one a new
        run or a replay takes up again): what others learn of it goes here."""
        assert call.deadline is not None
        self.session.view.publish(WaitingEvent(name=name, until=call.deadline))
        self.session.view.changed()
        if self._kept(name) is None:  # an event already kept is taken at once: nobody need act
            self.session.notifier.waiting_event(name, call.deadline)

    def _kept(self, name: str) -> ReceivedEvent | None:
        return next((e for e in self.state.undelivered_events if e.name == name), None)

    # ---- both ----------------------------------------------------------------------------

    def _start(self, call: ToolCallRecord, seconds: float) -> datetime:
        now = workflow.now()
        call.status, call.started_at = "running", now
        call.deadline = now + timedelta(seconds=seconds)
        return call.deadline

    async def _until(self, call: ToolCallRecord, summary: str, ready: Callable[[], bool]) -> None:
        """Wait until `ready()` or the call's deadline, whichever comes first."""
        assert call.deadline is not None
        left = (call.deadline - workflow.now()).total_seconds()
        if ready() or left <= 0:
            return
        fired = not await self.session.temporal.wait(
            lambda: ready() or self._idle_enough(), timeout=left, summary=summary
        )
        if fired:
            return
        if not ready():
            raise HandOver()


def _parse(call: ToolCallRecord) -> SleepInput | EventWaitInput:
    model = SleepInput if call.name == SLEEP else EventWaitInput
    return model.model_validate(call.run_input())


def _problem(tool: str, err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "input"
    message = first["msg"]
    if first["type"] == "less_than_equal":
        message += " (30 days)"
    return f"invalid input for {tool}: {where}: {message}"


def _took(seconds: float) -> str:
    return fmt_duration(round(seconds)) if seconds >= 1 else f"{seconds:.1f}s"
