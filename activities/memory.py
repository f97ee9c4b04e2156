"""Memory across sessions: the built-in tools `remember`, `recall` and `forget`, and the
wire types of the memory workflow that keeps them (workflows/memory.py).

A scope's memories (a user's, per agent unless the agent says `memory = "user"`) live in
one workflow, `MemoryWorkflow`, whose id `memory/AGENT/USER` (`-` for the user's own
scope) no session start can take (sessions/control.py refuses ids under `memory/`). Its
state is its history, so it is durable, encrypted like every payload when payload keys
are set, and survives worker and server restarts. A session reaches it from these tools,
which run as activities on the session's worker with the worker's client: `remember`
and `forget` are updates (`remember` starts the workflow if it is not running), `recall`
a query. The session records what each call returned, as it records any tool's result,
so a replay or a fork sees the same memories.

The scope comes from the session's start input (`ToolRequest.memory_scope`), never from
the model. The tools are offered only when a session names them, like `sleep`; their
names are taken (a worker tool of the same name is left out).
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, Field
from temporalio import activity
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from activities.tools import Tool, ToolContext, tool
from workflows import ids

WORKFLOW_NAME = "MemoryWorkflow"
ID_PREFIX = ids.MEMORY_PREFIX
MAX_MEMORIES = 500
MAX_BYTES = 256 * 1024
MAX_TEXT = 4000
KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
RECALL_LIMIT = 10


def scope_id(user: str, agent: str | None) -> str:
    """The memory workflow of a user's scope: per agent, or the user's own (`-`)."""
    return ids.memory(user, agent)


class Memory(BaseModel):
    key: str
    text: str
    at: datetime
    session_id: str | None = None


class MemoryInput(BaseModel):
    """The memory workflow's start, and what a run hands to the next."""

    memories: list[Memory] = Field(default_factory=list)


class MemoryWrite(BaseModel):
    key: str = Field(pattern=KEY_PATTERN)
    text: str = Field(min_length=1, max_length=MAX_TEXT)
    session_id: str | None = None


class MemoryQuery(BaseModel):
    query: str = Field(default="", max_length=2000)
    limit: int = Field(default=RECALL_LIMIT, ge=1, le=MAX_MEMORIES)


def size_of(memories: list[Memory]) -> int:
    """What a scope holds, as the bound counts it: the UTF-8 bytes of keys and texts."""
    return sum(len(m.key.encode()) + len(m.text.encode()) for m in memories)


# ---- the tools -----------------------------------------------------------------------------


def _client() -> Client:
    return activity.client()


def _scope(ctx: ToolContext) -> str:
    if ctx.memory_scope is None:
        raise ValueError("this session has no memory scope")
    return ctx.memory_scope


@tool(policy="idempotent", local=False)
async def remember(
    text: Annotated[str, Field(min_length=1, max_length=MAX_TEXT, description="what to remember, in full")],
    ctx: ToolContext,
    key: Annotated[
        str | None,
        Field(pattern=KEY_PATTERN, description="a name for it: the same key replaces the memory it names"),
    ] = None,
) -> str:
    """Remember something about the user for later sessions (a preference, a fact, a
    decision). Give a key to update that memory later; the answer names the key."""
    key = key or "m-" + hashlib.sha256(ctx.idempotency_key.encode()).hexdigest()[:10]
    write = MemoryWrite(key=key, text=text, session_id=ctx.session_id)
    start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
        WORKFLOW_NAME, MemoryInput(), id=_scope(ctx), task_queue=activity.info().task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )  # fmt: skip
    try:
        client: Any = _client()  # the workflow by name: activity code never imports workflow code
        return await client.execute_update_with_start_workflow(
            "remember", write, start_workflow_operation=start, result_type=str
        )
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        raise ValueError(cause.message if isinstance(cause, ApplicationError) else str(err)) from None


@tool(policy="read_only", local=False)
async def recall(
    ctx: ToolContext,
    query: Annotated[str, Field(max_length=2000, description="words to look for (empty: the newest)")] = "",
    limit: Annotated[int, Field(ge=1, le=50)] = RECALL_LIMIT,
) -> str:
    """Look up what you remember about the user from earlier sessions, most relevant first."""
    found = await recall_memories(_client(), _scope(ctx), MemoryQuery(query=query, limit=limit))
    if not found:
        return "no memories" + (f" match {query!r}" if query else "")
    return "\n".join(f"[{m.key}] {m.text}" for m in found)


@tool(policy="idempotent", local=False)
async def forget(
    key: Annotated[str, Field(pattern=KEY_PATTERN, description="the memory's key, as recall shows it")],
    ctx: ToolContext,
) -> str:
    """Forget one memory about the user, by its key."""
    try:
        handle: Any = _client().get_workflow_handle(_scope(ctx))
        gone = await handle.execute_update("forget", key, result_type=bool)
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        gone = False
    return f"forgot {key}" if gone else f"no memory {key} (already forgotten, or never remembered)"


async def recall_memories(client: Client, scope: str, query: MemoryQuery) -> list[Memory]:
    """The scope's memories that match, best first; none when the scope has never remembered."""
    try:
        return await client.get_workflow_handle(scope).query("recall", query, result_type=list[Memory])
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return []
        raise


MEMORY_TOOLS: list[Tool] = [remember, recall, forget]
NAMES = tuple(t.name for t in MEMORY_TOOLS)
