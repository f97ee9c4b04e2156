"""One action on many sessions at once: the sessions a visibility query matches, and the
action run on each id, a bounded number at a time.

Each id's outcome is kept apart (`Outcome`), so one that fails never hides what happened
to the others. A query is the caller's Temporal visibility filter ANDed with this
project's workflow type (and, for a user, their own `AgentUser`); each match is checked
again against its listed type and owner, so no query reaches another program's workflows
or another user's sessions, whatever its parentheses say.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from infra.errors import BadRequest
from workflows import search

AT_ONCE = 32  # actions in flight at once
MAX_IDS = 1000  # ids one call may name, and matches one query acts on
SESSION_WORKFLOW = "AgentWorkflow"  # sessions.control.SESSION_WORKFLOW, without its imports


@dataclass(frozen=True)
class Outcome:
    """What one id's action answered, or why it failed."""

    id: str
    text: str = ""
    error: Exception | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def unique(ids: Iterable[str]) -> list[str]:
    """The ids in their order, each once: an id named twice is acted on once."""
    return list(dict.fromkeys(ids))


async def each(
    ids: Iterable[str], action: Callable[[str], Awaitable[object]], *, at_once: int = AT_ONCE
) -> list[Outcome]:
    """`action` on every id, at most `at_once` in flight; the outcomes in the ids' order."""
    gate = asyncio.Semaphore(at_once)

    async def one(item: str) -> Outcome:
        async with gate:
            try:
                return Outcome(item, str(await action(item)))
            except Exception as err:  # this id's failure, reported beside the others' results
                return Outcome(item, error=err)

    return list(await asyncio.gather(*(one(item) for item in unique(ids))))


def visibility_query(query: str, user: str | None = None) -> str:
    """The caller's filter, within this project's sessions (and `user`'s own, if given)."""
    clauses = [f"WorkflowType = '{SESSION_WORKFLOW}'", "ExecutionStatus != 'ContinuedAsNew'", f"({query})"]
    if user is not None:
        clauses.append(f"{search.AGENT_USER.name} = {json.dumps(user)}")
    return " AND ".join(clauses)


async def matching(client: Client, query: str, *, user: str | None = None, limit: int = MAX_IDS) -> list[str]:
    """The ids of the sessions (at most `limit`, newest first) the visibility `query` matches,
    only `user`'s when given; `BadRequest` with Temporal's reason for a query it cannot read."""
    if not query.strip():
        raise BadRequest("the query is empty")
    found: list[str] = []
    try:
        async for execution in client.list_workflows(visibility_query(query, user), limit=limit):
            owner = execution.typed_search_attributes.get(search.AGENT_USER)
            if execution.workflow_type == SESSION_WORKFLOW and (user is None or owner == user):
                found.append(execution.id)
    except RPCError as err:
        if err.status == RPCStatusCode.INVALID_ARGUMENT:
            raise BadRequest(f"the query is not one Temporal can read: {err.message}") from None
        raise
    return unique(found)
