"""`/v1/memory`: the caller's memories across sessions (activities/memory.py), to see and
forget. A user reaches only their own; an operator may name another with `user`. The
scope is the user's own, or an agent's with `agent`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel

from infra.errors import MemoryNotFound
from service.auth import User, current_user
from sessions import memory as memories

router = APIRouter(prefix="/v1/memory", tags=["memory"])
Caller = Annotated[User, Depends(current_user)]
Agent = Annotated[str | None, Query(max_length=48, pattern=r"^[A-Za-z][A-Za-z0-9_-]*$")]
OtherUser = Annotated[
    str | None, Query(alias="user", max_length=200, description="an operator's only: whose memories")
]
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "no token, or a wrong one"},
    404: {"description": "no such memory"},
    422: {"description": "a parameter breaks the schema"},
}


class MemoryList(BaseModel):
    user: str
    agent: str | None
    memories: list[memories.Memory]


def _whose(user: User, other: str | None) -> str:
    # Another user's memories are invisible: asked for by a user who is not an operator,
    # they answer as that user's own (which is what they may see).
    return other if other is not None and user.operator else user.name


@router.get("", responses=ERRORS)
async def list_memories(
    request: Request, user: Caller, agent: Agent = None, of: OtherUser = None
) -> MemoryList:
    """The caller's memories in a scope (theirs, or an agent's), newest first."""
    whose = _whose(user, of)
    found = await memories.listing(request.app.state.owners.client, whose, agent)
    return MemoryList(user=whose, agent=agent, memories=found)


@router.delete("/{key}", responses=ERRORS)
async def forget_memory(
    key: str, request: Request, user: Caller, agent: Agent = None, of: OtherUser = None
) -> MemoryList:
    """Forget one memory by its key; the scope's memories after it."""
    whose = _whose(user, of)
    client = request.app.state.owners.client
    if not await memories.forget(client, whose, agent, key):
        raise MemoryNotFound(key)
    return MemoryList(user=whose, agent=agent, memories=await memories.listing(client, whose, agent))
