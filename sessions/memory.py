"""A user's memories as the entry points see them: list, forget one, clear a scope.

The memories live in one workflow per scope (workflows/memory.py, ids from
`activities.memory.scope_id`); these are its queries and updates, with Temporal's answers
turned into the project's errors. A scope that has never remembered anything lists
nothing. Who may reach which user's scope is the caller's to decide (the command line is
an operator's; the service passes the token's user).
"""

from __future__ import annotations

from typing import Any

from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from activities.memory import Memory, scope_id
from infra.errors import Rejected

__all__ = ["Memory", "clear", "forget", "listing"]


async def listing(client: Client, user: str, agent: str | None) -> list[Memory]:
    """The scope's memories, newest first."""
    try:
        found = await client.get_workflow_handle(scope_id(user, agent)).query(
            "memories", result_type=list[Memory]
        )
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return []
        raise
    return sorted(found, key=lambda m: m.at, reverse=True)


async def forget(client: Client, user: str, agent: str | None, key: str) -> bool:
    """Forget one memory; False when the scope has none by that key."""
    return bool(await _update(client, user, agent, "forget", key))


async def clear(client: Client, user: str, agent: str | None) -> int:
    """Forget every memory of the scope; how many there were."""
    return int(await _update(client, user, agent, "clear") or 0)


async def _update(client: Client, user: str, agent: str | None, name: str, *args: str) -> Any:
    handle: Any = client.get_workflow_handle(scope_id(user, agent))
    try:
        return await handle.execute_update(name, args=list(args))
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    except WorkflowUpdateFailedError as err:
        raise Rejected(str(err.cause or err)) from None
