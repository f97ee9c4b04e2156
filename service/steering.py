"""What the MCP tools (`service.mcp_tools`) and the A2A agent (`service.a2a`) do with a
session on a user's behalf, and how they follow it.

The calls are the HTTP routes' (`service/routes.py`): a start's fields are checked as
`POST /v1/sessions`'s body (`start_body`) and turned into the start input by
`session_input` (which the route uses too) through `sessions.start_input.resolve`, ownership from `service.ownership.Owners`, every action
is one of the workflow's updates through `sessions.control.act`, and a decision on a
sub-agent's call goes to the session that owns it. The user's name is the new session's
`user_id` and every decision's `decided_by`.

`Watch` follows a session's events over the service's shared feed (`service.feeds`): one
subscription per session, however many callers wait on it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from temporalio.client import Client

from infra.attachments import AttachmentError, decode_base64
from infra.connection import task_queue
from infra.definitions import DefinitionError
from infra.errors import BadRequest, InvalidInput
from service import quotas
from service.auth import User
from service.feeds import Feed, Feeds
from service.ownership import Owners
from service.schemas import SESSION_ID, START_CHOICES, StartSession
from sessions import control, start_input
from workflows.agent import AgentWorkflow
from workflows.contract import (
    FINAL_STATUSES,
    CancelRequest,
    Decision,
    LimitDecline,
    LimitRaise,
    SessionInput,
    SessionStatus,
    UserMessage,
)
from workflows.events import EVENTS, SessionEvent

log = logging.getLogger("service.steering")
REJOIN_AFTER = 2.0  # seconds before following a feed again that stopped before the session's end


@dataclass
class Sessions:
    """What the tools act through: the Temporal client, the owners, the shared feeds, and
    this process's count of each user's starts (`service.quotas`)."""

    client: Client
    owners: Owners
    feeds: Feeds
    rate: quotas.StartRate = field(default_factory=quotas.StartRate)
    # The stdio server (mcp_server.py) acts as the command line: a start without an agent
    # has the worker's tools there, and none at the service's doors.
    worker_tools: bool = False


def one_line(err: ValidationError) -> str:
    """A validation error as one line: `field: message; field: message`."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}" for e in err.errors())


def start_body(**fields: Any) -> StartSession:
    """The fields of a start (`POST /v1/sessions`'s body's names, None meaning not given)
    checked as the body is; a value that breaks it is one line."""
    try:
        return StartSession.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as err:
        raise InvalidInput(one_line(err)) from None


async def session_input(
    body: StartSession, user: User, owners: Owners, *, store: bool = True, worker_tools: bool = False
) -> SessionInput:
    """The start input, resolved as the command line's is (`sessions.start_input.resolve`):
    the agent's settings, then the body's. A start without an agent, where the definitions
    name no `default_agent`, has no tools (unless `worker_tools`: the command line's rule). Below an operator, the cost-bearing limits are
    ceilings the body may lower, not raise (the agent's own, else the deployment's
    `[ceilings]`; a cost budget no more than the user's `max_cost_budget`, which it gets
    when it sets none). A refusal is `InvalidInput`, one line. Without `store` the files
    are checked, not stored (`start_session` stores them once the start may go ahead)."""
    limits = start_input.limits_of(body)
    fields = {
        "user_id": user.name, "model": body.model, "fallback_models": body.fallback_models,
        "system": body.system, "chat": body.chat or None,
        "search_attributes": await owners.has_search_attributes(),
        "output_schema": body.output_schema,
        "notify": body.notify,
        "on_limit": body.on_limit,
    }  # fmt: skip

    def resolve() -> SessionInput:
        found = start_input.read_definitions()
        try:
            agent = start_input.chosen_agent(found, body.agent)
        except DefinitionError as err:
            raise BadRequest(str(err)) from None
        if agent is None and not worker_tools:  # no agent named and no `default_agent`: no tools
            fields["tools"] = []
        if not user.operator:
            ceiling = start_input.ceilings(found, agent, user.quota.max_cost_budget)
            start_input.check_ceilings(
                {k: getattr(body, k, None) for k in start_input.CEILING_FIELDS}, ceiling
            )
            if user.quota.max_cost_budget is not None and body.cost_budget is None:
                limits["cost_budget_usd"] = ceiling["cost_budget"]
            for key, value in start_input.capped_defaults(ceiling).items():
                limits[key] = value if limits.get(key) is None else limits[key]
        attachments = [
            start_input.NewAttachment(
                name=a.name, data=decode_base64(a.name, a.data), media_type=a.media_type
            )
            for a in body.attachments
        ]
        return start_input.resolve(
            goal=body.goal, agent=body.agent, limits=limits, fields=fields, attachments=attachments,
            settings={k: getattr(body, k) for k in start_input.SETTING_FIELDS}, store=store,
        )  # fmt: skip

    try:
        # Decoding and storing files (up to the body's 48 MB) runs beside the event loop.
        return await asyncio.to_thread(resolve) if body.attachments else resolve()
    except (AttachmentError, BadRequest) as err:
        raise InvalidInput(str(err)) from None
    except ValidationError as err:
        raise InvalidInput(one_line(err)) from None


async def start_session(sessions: Sessions, body: StartSession, user: User) -> str:
    """Start the session `body` asks for, as `user`; its id. In this order, so that a
    refused start writes nothing: check the body (`session_input`, files not stored), the
    user's agents and quotas (`service.quotas`), and the id; then store the files and start."""
    resolved = await session_input(
        body, user, sessions.owners, store=False, worker_tools=sessions.worker_tools
    )
    quotas.check_agent(user, resolved)
    with sessions.rate.start(user):
        await quotas.check_running(sessions.client, user, await sessions.owners.has_search_attributes())
        session_id = body.session_id or f"session-{uuid.uuid4().hex[:12]}"
        await control.check_id(sessions.client, session_id)
        if body.attachments:
            blobs = [decode_base64(a.name, a.data) for a in body.attachments]
            await asyncio.to_thread(start_input.store_attachments, blobs)
        await control.start(sessions.client, resolved, session_id, task_queue=task_queue())
    sessions.owners.remember(session_id, user.name)
    return session_id


async def start(
    sessions: Sessions,
    user: User,
    *,
    goal: str,
    agent: str | None = None,
    session_id: str | None = None,
    model: str | None = None,
    chat: bool = False,
    **choices: Any,
) -> SessionStatus:
    """Start a session for `user`, resolved as `POST /v1/sessions` resolves it; its status.
    `choices` are the body's other fields (`schemas.START_CHOICES`), None meaning not given."""
    if session_id is not None and not re.fullmatch(SESSION_ID, session_id):
        raise BadRequest(f"invalid session id {session_id!r}: letters, digits and . _ : - (at most 200)")
    if unknown := sorted(set(choices) - set(START_CHOICES)):
        raise BadRequest(f"unknown start choices: {', '.join(unknown)}")
    body = start_body(goal=goal, agent=agent, session_id=session_id, model=model, chat=chat, **choices)
    return await control.status(sessions.client, await start_session(sessions, body, user))


async def act(sessions: Sessions, user: User, session_id: str, update: Callable[..., Any], *args: Any) -> Any:
    """One of the session's control updates, if this user may steer it; the update's answer."""
    await sessions.owners.check(user, session_id)
    return await control.act(sessions.client, session_id, update, *args)


async def decide(sessions: Sessions, user: User, session_id: str, decision: Decision, approve: bool) -> None:
    """Approve or deny a call of this session or of one of its sub-agents (shown in its status)."""
    await sessions.owners.check(user, session_id)
    owner = await control.owner_of_call(sessions.client, session_id, decision.tool_use_id)
    update = AgentWorkflow.approve_call if approve else AgentWorkflow.deny_call
    await control.act(sessions.client, owner, update, decision)


def decision(
    user: User, tool_use_id: str, *, input: dict[str, Any] | None = None, reason: str | None = None
) -> Decision:
    try:
        return Decision(tool_use_id=tool_use_id, input=input, reason=reason, decided_by=user.name)
    except ValidationError as err:
        raise BadRequest(one_line(err)) from None


def message(text: str, mode: str | None = None) -> UserMessage:
    try:
        return UserMessage.model_validate({"text": text, "mode": mode})
    except ValidationError as err:
        raise BadRequest(one_line(err)) from None


def limit_raise(user: User, name: str, value: float) -> LimitRaise:
    try:
        return LimitRaise.model_validate({"name": name, "value": value, "decided_by": user.name})
    except ValidationError as err:
        raise BadRequest(one_line(err)) from None


async def check_raise(owners: Owners, user: User, session_id: str, request: LimitRaise) -> None:
    """Below an operator, a raise above the limit's ceiling (the session's agent's, else
    the deployment's `[ceilings]`) is refused as a start's would be: `InvalidInput`, one
    line. A session the user may not see is `SessionNotFound`."""
    if user.operator:
        return
    status = await owners.status(user, session_id)
    try:
        found = start_input.read_definitions()
        agent = status.agent if status.agent in found.agents else None
        ceiling = start_input.ceilings(found, agent, user.quota.max_cost_budget)
        start_input.check_ceilings({request.name: request.value}, ceiling)
    except BadRequest as err:
        raise InvalidInput(str(err)) from None


def limit_decline(user: User, reason: str | None) -> LimitDecline:
    try:
        return LimitDecline(reason=reason, decided_by=user.name)
    except ValidationError as err:
        raise BadRequest(one_line(err)) from None


def cancel_request(user: User, reason: str | None) -> CancelRequest:
    try:
        return CancelRequest(reason=reason, decided_by=user.name)
    except ValidationError as err:
        raise BadRequest(one_line(err)) from None


def ended(status: SessionStatus) -> bool:
    return status.status in FINAL_STATUSES


# ---- following a session -----------------------------------------------------------------

_END_OF_STREAM = object()


class Watch:
    """A session's events from the shared feed, read in batches with a timeout.

    It reads from the session's first event (the feed's buffer, then what arrives), so
    whatever the feed had already read when the watch began, the first batch ends at the
    latest state: callers judge what is new by step numbers, and read the session's status
    for what is true now. When the feed stops before the session's end (its stream could
    not be read: a stuck session, Temporal slow to answer) the watch joins it again after
    `REJOIN_AFTER` seconds and reads on from the last event it had; meanwhile
    `next_batch` just waits out its timeout, so a caller polling the status still moves.
    """

    def __init__(self, feeds: Feeds, session_id: str):
        self.feeds = feeds
        self.session_id = session_id
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._feed: Feed | None = None
        self._reader: asyncio.Task[None] | None = None
        self.finished = False  # the session's end was read

    async def __aenter__(self) -> Watch:
        self._feed = self.feeds.join(self.session_id)
        self._reader = asyncio.create_task(self._read(), name=f"watch {self.session_id}")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._reader is not None:
            self._reader.cancel()
        if self._feed is not None:
            self.feeds.leave(self._feed)
            self._feed = None

    async def _read(self) -> None:
        after = -1
        while self._feed is not None:
            try:
                async for item in self._feed.follow(after):
                    if item.offset is not None:
                        after = item.offset
                    self._queue.put_nowait(EVENTS.validate_json(item.data))
            except ValidationError:
                log.warning("session %s: an event this server cannot read; following on", self.session_id)
                continue
            if self._feed.ended:
                self._queue.put_nowait(_END_OF_STREAM)
                return
            await asyncio.sleep(REJOIN_AFTER)
            stopped, self._feed = self._feed, self.feeds.join(self.session_id)
            self.feeds.leave(stopped)

    async def next_batch(self, timeout: float) -> list[SessionEvent]:
        """The events that arrived, waiting up to `timeout` seconds for the first one."""
        found: list[SessionEvent] = []
        if self.finished:
            await asyncio.sleep(max(timeout, 0.0))
            return found
        try:
            first = await asyncio.wait_for(self._queue.get(), max(timeout, 0.0))
        except TimeoutError:
            return found
        items = [first]
        while not self._queue.empty():
            items.append(self._queue.get_nowait())
        for item in items:
            if item is _END_OF_STREAM:
                self.finished = True
            else:
                found.append(item)  # pyright: ignore[reportArgumentType]
        return found
