"""`/v1/sessions`: start, list, read and steer sessions, as the authenticated user.

The caller's name comes from the token, never from the body: it is the session's
`user_id` and every decision's `decided_by`. Steering goes through `sessions.control.act`
with the workflow's typed update references, like the command line.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query, Request
from pydantic import ValidationError

from infra.errors import BadRequest, InvalidInput, SessionNotFound
from service import schemas, steering
from service.auth import User, current_user
from service.http_errors import error_detail
from service.ownership import Owners
from sessions import batch, control
from workflows.agent import AgentWorkflow
from workflows.contract import (
    CancelRequest,
    Decision,
    EventInput,
    LimitDecline,
    LimitRaise,
    SessionStatus,
    UserMessage,
)

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])
log = logging.getLogger("service")
Caller = Annotated[User, Depends(current_user)]
ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "malformed JSON"},
    401: {"description": "no token, or a wrong one"},
    404: {"description": "no such session, or not yours"},
    413: {"description": "body over the limit"},
    422: {"description": "the body breaks the schema"},
}


def owners(request: Request) -> Owners:
    return request.app.state.owners


Owned = Annotated[Owners, Depends(owners)]
NoBody = Annotated[schemas.Empty | None, Body()]
OptionalCancel = Annotated[schemas.Cancel | None, Body()]


STARTS: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    403: {"description": "an agent the users file does not give the caller"},
    409: {"description": "the id is taken"},
    422: {"description": "the body breaks the schema, or raises a limit above its ceiling"},
    429: {"description": "over one of the caller's quotas; see Retry-After"},
}


@router.post("", status_code=201, responses=STARTS)
async def start_session(
    body: schemas.StartSession, user: Caller, owned: Owned, request: Request
) -> SessionStatus:
    """Start a session for the caller; answers its status. A refused start writes nothing."""
    session_id = await steering.start_session(request.app.state.sessions(), body, user)
    return await control.status(owned.client, session_id)


@router.get("", responses=ERRORS)
async def list_sessions(
    user: Caller,
    owned: Owned,
    status: Annotated[str | None, Query(max_length=40)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    page_token: Annotated[str | None, Query(max_length=4096)] = None,
) -> schemas.SessionList:
    """The caller's sessions (an operator's: all), newest first, as status objects, a page at
    a time: `next_page_token` is given back as `page_token` with the same filter (400 with
    another filter or another user's token)."""
    rows, next_page_token = await owned.listing(user, status, limit, page_token)
    return schemas.SessionList(sessions=rows, next_page_token=next_page_token)


@router.post(
    ":batch", responses={**ERRORS, 400: {"description": "malformed JSON, or a query Temporal cannot read"}}
)
async def batch_action(body: schemas.Batch, user: Caller, owned: Owned) -> schemas.BatchResults:
    """One action on many sessions, up to 32 at a time: `ids` (at most 1000), or for cancel,
    pause and resume the sessions a visibility `query` matches (at most 1000; a user's query
    matches only their own). Each id answers on its own, as the single action would:
    another user's session is not found, an ended one refuses. 200 whatever each id's outcome."""
    if body.session_id is not None:
        outcomes = await _decide_each(owned, user, body.session_id, body)
    else:
        ids = body.ids or await _matching(owned, user, body.query or "")
        update, args = _batch_update(body, user)
        outcomes = await batch.each(ids, lambda session_id: _act(owned, user, session_id, update, *args))
    return schemas.BatchResults(results=[_result(outcome) for outcome in outcomes])


async def _matching(owned: Owners, user: User, query: str) -> list[str]:
    """The ids the query matches: a user's own sessions only (their `AgentUser`)."""
    mine = None if user.operator else user.name
    if mine is not None and not await owned.has_search_attributes():
        raise BadRequest("a query needs the Agent* search attributes on this namespace; see the README")
    return await batch.matching(owned.client, query, user=mine)


def _batch_update(body: schemas.Batch, user: User) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    if body.action == "cancel":
        return AgentWorkflow.cancel_session, (CancelRequest(reason=body.reason, decided_by=user.name),)
    return (AgentWorkflow.pause_session if body.action == "pause" else AgentWorkflow.resume_session), ()


async def _act(owned: Owners, user: User, session_id: str, update: Callable[..., Any], *args: Any) -> Any:
    await owned.check(user, session_id)
    return await control.act(owned.client, session_id, update, *args)


async def _decide_each(
    owned: Owners, user: User, session_id: str, body: schemas.Batch
) -> list[batch.Outcome]:
    """approve or deny each call of `body.ids`, each routed to its session (a sub-agent's, maybe)."""
    ids = body.ids or []
    try:
        await owned.check(user, session_id)
    except SessionNotFound as err:  # each call answers as its single decision would
        return [batch.Outcome(call, error=err) for call in batch.unique(ids)]
    update = AgentWorkflow.approve_call if body.action == "approve" else AgentWorkflow.deny_call
    owners = await control.owners_of_calls(owned.client, session_id)

    async def one(call: str) -> Any:
        decision = Decision(tool_use_id=call, reason=body.reason, decided_by=user.name)
        return await control.act(owned.client, owners.get(call) or session_id, update, decision)

    return await batch.each(ids, one)


def _result(outcome: batch.Outcome) -> schemas.BatchResult:
    if outcome.ok:
        return schemas.BatchResult(id=outcome.id, ok=True)
    kind, message = error_detail(outcome.error)
    if kind == "InternalError":  # what no single action expects either: logged, as theirs are
        log.error("batch: unexpected error for %s", outcome.id, exc_info=outcome.error)
    return schemas.BatchResult(id=outcome.id, ok=False, error=schemas.ErrorDetail(type=kind, message=message))


@router.get("/{session_id}", responses=ERRORS)
async def get_session(session_id: str, user: Caller, owned: Owned) -> SessionStatus:
    """What `client.py status --json` prints."""
    return await owned.status(user, session_id)


@router.get("/{session_id}/history", responses=ERRORS)
async def get_history(session_id: str, user: Caller, owned: Owned) -> dict[str, Any]:
    """What `client.py history --json` prints."""
    await owned.check(user, session_id)
    return control.history_document(await control.history(owned.client, session_id))


CONFLICT = {**ERRORS, 409: {"description": "the session refused (its reason), or has ended"}}
EDIT_REFUSED = {**CONFLICT, 422: {"description": "an edited input breaks the tool's schema"}}


async def _steer(
    owned: Owners, user: User, session_id: str, update: Callable[..., Any], *args: Any
) -> SessionStatus:
    await owned.check(user, session_id)
    await control.act(owned.client, session_id, update, *args)
    return await control.status(owned.client, session_id)


async def _decide(
    owned: Owners, user: User, session_id: str, update: Callable[..., Any], decision: Decision
) -> SessionStatus:
    """A decision on a call of this session or of one of its sub-agents (shown in its status)."""
    await owned.check(user, session_id)
    owner = await control.owner_of_call(owned.client, session_id, decision.tool_use_id)
    await control.act(owned.client, owner, update, decision)
    return await control.status(owned.client, session_id)


@router.post("/{session_id}/approve", responses=EDIT_REFUSED)
async def approve(session_id: str, body: schemas.Approve, user: Caller, owned: Owned) -> SessionStatus:
    """Approve a waiting tool call, optionally with an edited input."""
    decision = Decision(tool_use_id=body.tool_use_id, input=body.input, decided_by=user.name)
    return await _decide(owned, user, session_id, AgentWorkflow.approve_call, decision)


@router.post("/{session_id}/deny", responses=CONFLICT)
async def deny(session_id: str, body: schemas.Deny, user: Caller, owned: Owned) -> SessionStatus:
    """Deny a waiting tool call; the model is told the reason."""
    decision = Decision(tool_use_id=body.tool_use_id, reason=body.reason, decided_by=user.name)
    return await _decide(owned, user, session_id, AgentWorkflow.deny_call, decision)


@router.post("/{session_id}/pause", responses=CONFLICT)
async def pause(session_id: str, user: Caller, owned: Owned, body: NoBody = None) -> SessionStatus:
    """Pause between units of work."""
    return await _steer(owned, user, session_id, AgentWorkflow.pause_session)


@router.post("/{session_id}/resume", responses=CONFLICT)
async def resume(session_id: str, user: Caller, owned: Owned, body: NoBody = None) -> SessionStatus:
    """Resume a paused session."""
    return await _steer(owned, user, session_id, AgentWorkflow.resume_session)


@router.post("/{session_id}/cancel", responses=CONFLICT)
async def cancel(session_id: str, user: Caller, owned: Owned, body: OptionalCancel = None) -> SessionStatus:
    """Cancel the session and its work in flight."""
    request = CancelRequest(reason=body.reason if body else None, decided_by=user.name)
    return await _steer(owned, user, session_id, AgentWorkflow.cancel_session, request)


@router.post("/{session_id}/messages", responses=CONFLICT)
async def send_message(session_id: str, body: schemas.Message, user: Caller, owned: Owned) -> SessionStatus:
    """A message while the session works: a chat's next (`queue`), or a steer for the model's next call."""
    try:
        message = UserMessage(text=body.text, mode=body.mode)
    except ValidationError as err:
        raise InvalidInput(err.errors()[0]["msg"]) from None
    return await _steer(owned, user, session_id, AgentWorkflow.send_message, message)


@router.post("/{session_id}/events", responses=CONFLICT)
async def send_event(session_id: str, body: schemas.Event, user: Caller, owned: Owned) -> SessionStatus:
    """An event for the session's `wait_for_event` of its name: taken now, or kept for the next."""
    try:
        event = EventInput(name=body.name, data=body.data)
    except ValidationError as err:
        raise InvalidInput(err.errors()[0]["msg"]) from None
    return await _steer(owned, user, session_id, AgentWorkflow.send_event, event)


@router.post("/{session_id}/limits", responses=CONFLICT)
async def limits(session_id: str, body: schemas.Limit, user: Caller, owned: Owned) -> SessionStatus:
    """Raise a limit (`raise_limit`: one waiting at it goes on; above its ceiling, an
    operator's only), or decline (`decline_limit`)."""
    if body.decline:
        decline = LimitDecline(reason=body.reason, decided_by=user.name)
        return await _steer(owned, user, session_id, AgentWorkflow.decline_limit, decline)
    assert body.name is not None and body.value is not None
    request = LimitRaise(name=body.name, value=body.value, decided_by=user.name)
    await steering.check_raise(owned, user, session_id, request)
    return await _steer(owned, user, session_id, AgentWorkflow.raise_limit, request)


@router.post("/{session_id}/close", responses=CONFLICT)
async def close(session_id: str, user: Caller, owned: Owned, body: NoBody = None) -> SessionStatus:
    """End a chat session after the messages already sent."""
    return await _steer(owned, user, session_id, AgentWorkflow.close_session)
