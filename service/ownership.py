"""Who owns a session, and the reads that respect it.

A session belongs to the user who started it (its `user_id`). A user reaches only their
own sessions, an operator every session; any other session reads as unknown (404), so its
existence is not revealed. Owners never change, so they are remembered.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError

from infra.errors import AgentError, BadRequest, SessionNotFound
from service.auth import User
from sessions import control
from workflows.contract import SessionStatus

LIST_QUERY_TIMEOUT = 3.0  # seconds per session; they are asked all at once
ID_SCAN = 1000  # sessions, newest first, that `session_ids` looks through


class Owners:
    def __init__(self, client: Client):
        self.client = client
        self.known: dict[str, str] = {}
        self._search_attributes = False

    def remember(self, session_id: str, user_id: str) -> None:
        self.known[session_id] = user_id

    async def status(self, user: User, session_id: str) -> SessionStatus:
        """The session's status, if this user may see it; `SessionNotFound` otherwise."""
        found = await control.status(self.client, session_id)
        self.remember(session_id, found.user_id)
        if not user.may_see(found.user_id):
            raise SessionNotFound(session_id)
        return found

    async def check(self, user: User, session_id: str) -> None:
        """`SessionNotFound` unless this user may steer the session. An owner not yet known
        is read from the session's start input: a history read, no query (no billable
        action, and no worker needed)."""
        owner = self.known.get(session_id)
        if owner is None:
            started, _ = await control.start_input(self.client, control.handle(self.client, session_id))
            owner = started.user_id
            self.remember(session_id, owner)
        if not user.may_see(owner):
            raise SessionNotFound(session_id)

    async def session_ids(self, user: User, prefix: str = "") -> list[str]:
        """The ids starting with `prefix` of the sessions this user may see, newest first,
        read from visibility (no query). Without the Agent* search attributes a user who is
        not an operator gets the sessions whose owner this process knows."""
        mine = None if user.operator else user.name
        if mine is not None and not await self.has_search_attributes():
            return sorted(i for i, owner in self.known.items() if owner == mine and i.startswith(prefix))
        where = "WorkflowType = 'AgentWorkflow'" + (f" AND AgentUser = {json.dumps(mine)}" if mine else "")
        return [
            e.id async for e in self.client.list_workflows(where, limit=ID_SCAN) if e.id.startswith(prefix)
        ]

    async def has_search_attributes(self) -> bool:
        # Once registered they stay; until then, ask each time.
        self._search_attributes = self._search_attributes or await control.has_search_attributes(self.client)
        return self._search_attributes

    async def listing(self, user: User, status: str | None, limit: int) -> list[dict[str, Any]]:
        """The status objects of the sessions this user may see, newest first."""
        mine = None if user.operator else user.name
        if await self.has_search_attributes():
            rows = await control.list_sessions(self.client, status=status, user=mine, limit=limit)
        elif mine is None and status in (None, "stuck"):
            rows = await control.list_sessions(self.client, status=status, limit=limit)
        else:
            raise BadRequest("listing by user or status needs the Agent* search attributes; see the README")
        found = await asyncio.gather(*(self._status_of(row) for row in rows))
        # Visibility lags the session: what the query says now decides.
        return [
            s for s in found
            if s["user_id"] is not None and user.may_see(s["user_id"]) and (status is None or s["status"] == status)
        ]  # fmt: skip

    async def _status_of(self, row: dict[str, Any]) -> dict[str, Any]:
        try:
            found = await asyncio.wait_for(control.status(self.client, row["session_id"]), LIST_QUERY_TIMEOUT)
        except (AgentError, RPCError, TimeoutError) as err:
            return _from_row(row, str(err) or "no worker answered in time")
        except Exception as err:  # its payloads cannot be read here: one row says so, the list goes on
            return _from_row(row, f"cannot read its status: {type(err).__name__}: {err}".splitlines()[0])
        self.remember(found.session_id, found.user_id)
        return found.model_dump(mode="json")


def _from_row(row: dict[str, Any], why: str) -> dict[str, Any]:
    """What the search attributes say of a session that did not answer (no worker on its
    queue, say): one slow session must not hold up the whole list."""
    return {
        "session_id": row["session_id"], "status": row["status"], "steps": row["steps"] or 0,
        "user_id": row["user"], "started_at": row["started"], "tokens": row["tokens"],
        "usage": None, "cost_usd": None, "pending_approvals": [], "unavailable": why,
    }  # fmt: skip
