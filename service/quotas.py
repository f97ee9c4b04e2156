"""The users file's quotas, checked at every door of the service (HTTP, MCP, A2A) before a
start: the agents a user may start (403), how many of their sessions may run at once and
how many they may start a minute (429 with `Retry-After`). A refused start starts nothing
and stores nothing (`service.steering.start_session` checks them before it stores a file).

- `max_running` counts the user's sessions that visibility lists as running, sub-agents
  left out (they are their parent's work). Visibility lags a start by a moment, so two
  starts at once (or one right after another) may both pass: a user can go over by the
  starts made in that moment.
- `starts_per_minute` counts the starts of the last 60 seconds in this API process: behind
  N processes a user may start up to N times as many.
"""

from __future__ import annotations

import json
import math
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from temporalio.client import Client

from infra.errors import ConfigError, NotAllowed, OverQuota
from service.auth import User
from workflows.contract import SessionInput

WINDOW = 60.0  # seconds `starts_per_minute` counts over
RUNNING_RETRY_AFTER = 10  # seconds a start over `max_running` is told to wait


def check_agent(user: User, session_input: SessionInput) -> None:
    """`NotAllowed` for an agent (or a start without one) the users file does not give the user."""
    allowed = user.quota.agents
    if allowed is None:
        return
    name = session_input.agent.name if session_input.agent is not None else None
    if name is not None and name in allowed:
        return
    which = f"agent {name!r}" if name is not None else "a session without an agent"
    raise NotAllowed(
        f"user {user.name} may not start {which}; agents they may start: {', '.join(allowed) or 'none'}"
    )


def startable(user: User, agents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The agents (as `sessions.start_input.describe` gives them) this user may start."""
    allowed = user.quota.agents
    return [a for a in agents if allowed is None or a["name"] in allowed]


def running_query(user: str) -> str:
    """The user's running sessions in visibility, sub-agents left out."""
    return (
        "WorkflowType = 'AgentWorkflow' AND ExecutionStatus = 'Running' "
        f"AND AgentUser = {json.dumps(user)} AND ParentWorkflowId IS NULL"
    )


async def check_running(client: Client, user: User, search_attributes: bool) -> None:
    """`OverQuota` when the user already has `max_running` sessions running."""
    most = user.quota.max_running
    if most is None:
        return
    if not search_attributes:
        raise ConfigError("max_running needs the Agent* search attributes in the namespace; see the README")
    running = (await client.count_workflows(running_query(user.name))).count
    if running >= most:
        raise OverQuota(
            f"user {user.name} has {running} sessions running, the most they may (max_running {most}); "
            f"retry in {RUNNING_RETRY_AFTER} s or when one ends",
            RUNNING_RETRY_AFTER,
        )


class StartRate:
    """The starts of the last minute in this process, per user (`starts_per_minute`)."""

    def __init__(self) -> None:
        self.starts: dict[str, deque[float]] = {}

    @contextmanager
    def start(self, user: User) -> Iterator[None]:
        """Take one of the user's starts of this minute for the block (`OverQuota` when none
        is left); a block that fails gives it back. Checked and taken at once, so two
        starts at the same moment cannot both take the last one."""
        most = user.quota.starts_per_minute
        if most is None:
            yield
            return
        now = time.monotonic()
        recent = self.starts.setdefault(user.name, deque())
        while recent and recent[0] <= now - WINDOW:
            recent.popleft()
        if len(recent) >= most:
            wait = max(1, math.ceil(recent[0] + WINDOW - now)) if recent else int(WINDOW)
            raise OverQuota(
                f"user {user.name} has made {len(recent)} starts in the last minute, the most they may "
                f"(starts_per_minute {most}); retry in {wait} s",
                wait,
            )
        recent.append(now)
        try:
            yield
        except BaseException:
            recent.remove(now)
            raise
