"""Sessions on a timetable: Temporal Schedules that start agent sessions.

A schedule's id is its name. Each run starts a session whose id is the schedule's name
and the scheduled time (Temporal appends the time to the action's workflow id). Runs
that would overlap a running one are skipped; `trigger` starts one now regardless.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionExecutionStartWorkflow,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
)
from temporalio.common import TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

from infra.errors import BadRequest, SessionNotFound
from sessions.control import initial_search_attributes
from workflows.agent import AgentWorkflow
from workflows.contract import SessionInput

_EVERY = re.compile(r"(\d+)([smhd])")
_UNIT = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class ScheduleNotFound(SessionNotFound):
    def __init__(self, name: str):
        Exception.__init__(self, f"no schedule {name!r}; list them with: python client.py schedule list")


def parse_every(text: str) -> timedelta:
    """`90s`, `15m`, `1h`, `1d`, or combined like `1h30m`."""
    parts = _EVERY.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise BadRequest(f"--every {text!r}: use a number and a unit, like 90s, 15m, 1h or 1d")
    every = sum((timedelta(**{_UNIT[u]: int(n)}) for n, u in parts), timedelta())
    if every < timedelta(seconds=1):
        raise BadRequest("--every must be at least 1s")
    return every


async def create(
    client: Client, name: str, session_input: SessionInput, *, task_queue: str,
    cron: str | None, every: timedelta | None, summary: str,
) -> None:  # fmt: skip
    if not NAME.match(name):
        raise BadRequest(f"schedule name {name!r}: letters, digits, '.', '-' and '_' only")
    if cron:
        spec = ScheduleSpec(cron_expressions=[cron])
    elif every is not None:
        spec = ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)])
    else:
        raise BadRequest("a schedule needs --cron or --every")
    action = ScheduleActionStartWorkflow(
        AgentWorkflow.run, session_input, id=name, task_queue=task_queue, static_summary=summary,
        typed_search_attributes=initial_search_attributes(session_input) or TypedSearchAttributes.empty,
    )  # fmt: skip
    schedule = Schedule(action=action, spec=spec, policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP))
    try:
        await client.create_schedule(name, schedule)
    except ScheduleAlreadyRunningError:
        raise BadRequest(f"schedule {name!r} already exists") from None
    except RPCError as err:
        if err.status == RPCStatusCode.INVALID_ARGUMENT:
            raise BadRequest(f"invalid schedule: {err.message}") from None
        raise


async def listing(client: Client) -> list[dict[str, Any]]:
    rows = []
    async for entry in await client.list_schedules():
        info = entry.info
        spec = entry.schedule.spec if entry.schedule else None
        rows.append(
            {
                "name": entry.id,
                "spec": _describe_spec(spec),
                "paused": bool(entry.schedule and entry.schedule.state.paused),
                "next_run": info.next_action_times[0].isoformat() if info and info.next_action_times else None,
                "recent_sessions": [a.action.workflow_id for a in (info.recent_actions if info else [])
                                    if isinstance(a.action, ScheduleActionExecutionStartWorkflow)],
            }
        )  # fmt: skip
    return rows


def _describe_spec(spec: ScheduleSpec | None) -> str:
    if spec is None:
        return "-"
    if spec.cron_expressions:
        return "cron " + " | ".join(spec.cron_expressions)
    if spec.intervals:
        return "every " + ", ".join(str(i.every) for i in spec.intervals)
    return "calendar"


async def act(client: Client, name: str, action: str) -> str:
    """pause, unpause, delete or trigger the schedule `name`."""
    handle = client.get_schedule_handle(name)
    try:
        if action == "pause":
            await handle.pause(note="paused from the command line")
        elif action == "unpause":
            await handle.unpause(note="unpaused from the command line")
        elif action == "delete":
            await handle.delete()
        elif action == "trigger":
            await handle.trigger(overlap=ScheduleOverlapPolicy.ALLOW_ALL)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise ScheduleNotFound(name) from None
        raise
    return {"pause": "paused", "unpause": "unpaused", "delete": "deleted", "trigger": "triggered"}[
        action
    ] + f" {name}"
