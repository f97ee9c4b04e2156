"""What the MCP server speaks beside its tools (`service.mcp_tools`), as strict clients and
the protocol's conformance suite expect it: prompts, argument completion, resource
subscriptions, notices as log messages, and error codes.

- **Prompts.** `run_agent` (a goal, optionally an agent) asks the client's model to start
  a session and follow it; `follow_session` (a session id) to follow one to its end.
- **Completion.** A session id wherever a resource template or a prompt takes one
  (`session://{session_id}`, `follow_session`): the caller's own sessions only, read from
  visibility. An agent name (`run_agent`'s `agent`) from the definitions.
- **Subscriptions.** `resources/subscribe` on `session://ID` or `session://ID/transcript`
  (a session the caller may see) follows the session over the service's shared feed
  (`service.feeds`: the history long-poll every follower uses, so no query, no update and
  no billable action) and sends `notifications/resources/updated` for each change after the
  subscription began (the transcript's only when its messages change); `resources/unsubscribe`
  stops it. At protocol 2026-07-28, `subscriptions/listen` with `resourceSubscriptions` does
  the same on its stream (a URI that is not the caller's is left out of the acknowledgement).
- **Notices.** After `logging/setLevel`, what happens to a session the connection follows
  comes as `notifications/message` (logger `sessions`) at or above that level: a tool call
  waiting for approval (`notice`), a chat's answer (`info`), the end (`info` completed,
  `notice` cancelled, `warning` stopped, `error` failed). None before the client sets a level.
  At 2026-07-28 they ride a listen stream whose request opted in with a log level.
- **Errors.** An unknown tool or prompt, a missing argument, a resource that is not one of
  this server's: -32602. Anything unexpected: -32603 with one line (never the SDK's code 0).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Annotated, Any, get_args

import anyio
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    CompleteRequestParams,
    CompleteResult,
    Completion,
    EmptyResult,
    LoggingLevel,
    LoggingMessageNotificationParams,
    PromptReference,
    ResourceUpdatedNotification,
    ResourceUpdatedNotificationParams,
    SetLevelRequestParams,
    SubscribeRequestParams,
    SubscriptionFilter,
    SubscriptionsAcknowledgedNotification,
    SubscriptionsAcknowledgedNotificationParams,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
    UnsubscribeRequestParams,
)
from pydantic import Field, ValidationError
from temporalio.service import RPCError

from infra.errors import AgentError, BadRequest, SessionNotFound
from service import quotas, steering
from service.auth import User
from service.schemas import SESSION_ID
from service.steering import Sessions
from sessions import start_input
from workflows import events as ev

log = logging.getLogger("service.mcp")
LEVELS: tuple[LoggingLevel, ...] = get_args(LoggingLevel)  # least severe first
LOGGER = "sessions"
SESSION_URI = re.compile(r"^session://(?P<id>[^/]+)(?P<transcript>/transcript)?$")
TEMPLATES = ("session://{session_id}", "session://{session_id}/transcript")
# The events after which the transcript (the session's messages) reads differently.
TRANSCRIPT_EVENTS = {"turn", "tool_result", "user_message"}
END_LEVEL: dict[str, LoggingLevel] = {"completed": "info", "cancelled": "notice", "stopped": "warning", "failed": "error"}  # fmt: skip
MAX_COMPLETIONS = 100  # the protocol's limit on one answer
WAIT = 60.0  # seconds a follower waits for the session's next events before looking again
BASELINE_WAIT = 10.0  # seconds a subscription waits for the session's events so far
FOLLOWS_KEY = "agent.follows"  # where a connection keeps what it follows (`Connection.state`)

Caller = Callable[[ServerRequestContext[Any, Any]], User]


# ---- errors ------------------------------------------------------------------------------


async def error_codes(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Server middleware: a handler's unexpected failure is -32603 with one line, not the
    SDK's code 0 (which JSON-RPC does not define)."""
    try:
        return await call_next(ctx)
    except (MCPError, ValidationError):
        raise
    except Exception as err:
        log.exception("MCP %s failed", ctx.method)
        line = (str(err) or type(err).__name__).splitlines()[0]
        raise MCPError(code=INTERNAL_ERROR, message=f"{ctx.method} failed: {line}") from None


def invalid(message: str, **data: Any) -> MCPError:
    return MCPError(code=INVALID_PARAMS, message=message, data=data or None)


async def owned_session(sessions: Sessions, user: User, uri: str) -> str:
    """The session a `session://` URI names, if this user may see it; -32602 otherwise."""
    found = SESSION_URI.match(uri)
    if found is None:
        raise invalid(
            f"{uri!r} is not a resource of this server: session://ID or session://ID/transcript", uri=uri
        )
    await check_session(sessions, user, found["id"], uri=uri)
    return found["id"]


async def check_session(sessions: Sessions, user: User, session_id: str, **data: Any) -> None:
    """-32602 unless this user may see the session, as for an unknown one (the owner is
    read from the session's start input: no query)."""
    if not re.fullmatch(SESSION_ID, session_id):
        raise invalid(f"no session {session_id!r}", **data)
    try:
        await sessions.owners.check(user, session_id)
    except SessionNotFound as err:
        raise invalid(str(err), **data) from None
    except AgentError as err:
        raise MCPError(code=INTERNAL_ERROR, message=str(err)) from None
    except RPCError as err:
        raise MCPError(code=INTERNAL_ERROR, message=f"Temporal answered: {err.message}") from None


# ---- following sessions ------------------------------------------------------------------


async def changes(
    sessions: Sessions, session_id: str, began: asyncio.Event
) -> AsyncIterator[Sequence[ev.SessionEvent]]:
    """Each batch of the session's durable events after the first, until its end: from the
    shared feed, no query. The first batch is the session as it was when following began
    (`began` is set once it is read, or after `BASELINE_WAIT` without one): a change the
    client makes after that comes in a later batch."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BASELINE_WAIT
    try:
        async with steering.Watch(sessions.feeds, session_id) as watch:
            while not watch.finished:
                wait = WAIT if began.is_set() else max(0.0, deadline - loop.time())
                batch = [
                    e
                    for e in await watch.next_batch(wait)
                    if not isinstance(e, ev.TextDelta | ev.ThinkingDelta)
                ]
                if began.is_set():
                    if batch:
                        yield batch
                elif batch or loop.time() >= deadline:
                    began.set()
    finally:
        began.set()


def notices(session_id: str, events: Sequence[ev.SessionEvent]) -> list[tuple[LoggingLevel, dict[str, Any]]]:
    """What a follower of the session is told of these events, at what level."""
    found: list[tuple[LoggingLevel, dict[str, Any]]] = []
    for event in events:
        about: dict[str, Any] = {"session_id": session_id, "event": event.type}
        if isinstance(event, ev.ApprovalRequested):
            found.append(("notice", {
                **about, "tool_use_id": event.tool_use_id, "name": event.name,
                "message": f"session {session_id}: {event.name} waits for approval "
                f"(tool_use_id {event.tool_use_id}): approve_tool_call or deny_tool_call",
            }))  # fmt: skip
        elif isinstance(event, ev.Answered):
            found.append(("info", {
                **about, "message": f"session {session_id} answered; it waits for the next message (send_message)",
            }))  # fmt: skip
        elif isinstance(event, ev.SessionEnded):
            why = "".join(
                [
                    f" ({event.stop_reason})" if event.stop_reason else "",
                    f": {event.error}" if event.error else "",
                ]
            )
            found.append((END_LEVEL.get(event.status, "notice"), {
                **about, "status": event.status, "message": f"session {session_id} ended {event.status}{why}",
            }))  # fmt: skip
    return found


def at_least(level: LoggingLevel, threshold: LoggingLevel) -> bool:
    return LEVELS.index(level) >= LEVELS.index(threshold)


class Follows:
    """The sessions one client follows (by the URIs it subscribed to) and what it is told:
    `updated(uri)` for a changed resource, `notice(level, data)` for what happened."""

    def __init__(
        self,
        sessions: Sessions,
        updated: Callable[[str], Awaitable[None]],
        notice: Callable[[LoggingLevel, dict[str, Any]], Awaitable[None]],
    ):
        self.sessions = sessions
        self.updated = updated
        self.notice = notice
        self.uris: dict[str, set[str]] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}

    async def follow(self, session_id: str, uri: str) -> None:
        """Follow the session for `uri`; returns once its events so far are read, so any
        change after it is told."""
        self.uris.setdefault(session_id, set()).add(uri)
        task = self.tasks.get(session_id)
        if task is None or task.done():
            began = asyncio.Event()
            task = self.tasks[session_id] = asyncio.create_task(
                self._run(session_id, began), name=f"mcp follows {session_id}"
            )
            waiting = asyncio.ensure_future(began.wait())
            try:
                await asyncio.wait([waiting, task], return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiting.cancel()

    def unfollow(self, session_id: str, uri: str) -> None:
        uris = self.uris.get(session_id, set())
        uris.discard(uri)
        if not uris:
            self.uris.pop(session_id, None)
            if (task := self.tasks.pop(session_id, None)) is not None:
                task.cancel()

    async def _run(self, session_id: str, began: asyncio.Event) -> None:
        try:
            async for events in changes(self.sessions, session_id, began):
                messages = any(e.type in TRANSCRIPT_EVENTS for e in events)
                for uri in sorted(self.uris.get(session_id, ())):
                    if messages or not uri.endswith("/transcript"):
                        await self.updated(uri)
                for level, data in notices(session_id, events):
                    await self.notice(level, data)
        except Exception:  # the client keeps its other subscriptions; a new subscribe starts again
            log.exception("following session %s for an MCP client failed", session_id)

    async def close(self) -> None:
        tasks, self.tasks = list(self.tasks.values()), {}
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task


def _connection(ctx: ServerRequestContext[Any, Any]) -> Connection:
    # The SDK keeps a connection's own state and teardown (`state`, `exit_stack`) on its
    # `Connection`, which a request reaches only through its session.
    return ctx.session._connection  # pyright: ignore[reportPrivateUsage]


class _ConnectionFollows(Follows):
    """A handshake-era connection's follows: told on its standalone channel, its notices
    at or above the level it set (none before it sets one)."""

    def __init__(self, sessions: Sessions, connection: Connection):
        super().__init__(sessions, self._updated, self._notice)
        self.connection = connection
        self.level: LoggingLevel | None = None

    async def _updated(self, uri: str) -> None:
        params = ResourceUpdatedNotificationParams(uri=uri)
        await self.connection.notify(
            "notifications/resources/updated", params.model_dump(by_alias=True, exclude_none=True)
        )

    async def _notice(self, level: LoggingLevel, data: dict[str, Any]) -> None:
        if self.level is not None and at_least(level, self.level):
            params = LoggingMessageNotificationParams(level=level, logger=LOGGER, data=data)
            await self.connection.notify(
                "notifications/message", params.model_dump(by_alias=True, exclude_none=True, mode="json")
            )


def follows_of(ctx: ServerRequestContext[Any, Any], sessions: Sessions) -> _ConnectionFollows:
    """This connection's follows, made on first use and closed with the connection."""
    connection = _connection(ctx)
    found = connection.state.get(FOLLOWS_KEY)
    if not isinstance(found, _ConnectionFollows):
        found = connection.state[FOLLOWS_KEY] = _ConnectionFollows(sessions, connection)
        connection.exit_stack.push_async_callback(found.close)
    return found


# ---- the handlers ------------------------------------------------------------------------


def install(server: MCPServer, sessions_of: Callable[[], Sessions], caller_of: Caller) -> None:
    """Prompts, completion, subscriptions (both protocol eras), the log level and the error
    codes, on the server `service.mcp_tools.build` made."""
    server.middleware.append(error_codes)
    _prompts(server, sessions_of, caller_of)
    add = server._lowlevel_server.add_request_handler  # pyright: ignore[reportPrivateUsage]

    async def subscribe(ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams) -> EmptyResult:
        sessions = sessions_of()
        session_id = await owned_session(sessions, caller_of(ctx), params.uri)
        await follows_of(ctx, sessions).follow(session_id, params.uri)
        return EmptyResult()

    async def unsubscribe(
        ctx: ServerRequestContext[Any, Any], params: UnsubscribeRequestParams
    ) -> EmptyResult:
        found = SESSION_URI.match(params.uri)
        if found is not None:
            follows_of(ctx, sessions_of()).unfollow(found["id"], params.uri)
        return EmptyResult()

    async def set_level(ctx: ServerRequestContext[Any, Any], params: SetLevelRequestParams) -> EmptyResult:
        follows_of(ctx, sessions_of()).level = params.level
        return EmptyResult()

    async def complete(ctx: ServerRequestContext[Any, Any], params: CompleteRequestParams) -> CompleteResult:
        values = await _completions(sessions_of(), caller_of(ctx), params)
        return CompleteResult(
            completion=Completion(
                values=values[:MAX_COMPLETIONS], total=len(values), has_more=len(values) > MAX_COMPLETIONS
            )
        )

    add("resources/subscribe", SubscribeRequestParams, subscribe)
    add("resources/unsubscribe", UnsubscribeRequestParams, unsubscribe)
    add("logging/setLevel", SetLevelRequestParams, set_level)
    add("completion/complete", CompleteRequestParams, complete)
    add("subscriptions/listen", SubscriptionsListenRequestParams, _Listen(sessions_of, caller_of))


class _Listen:
    """`subscriptions/listen` (2026-07-28): the caller's own session resources among the
    requested URIs are followed for this stream, and its notices come on it when the
    request opted in with a log level. The lists it may ask about never change: asked, they
    are acknowledged and never fire."""

    def __init__(self, sessions_of: Callable[[], Sessions], caller_of: Caller):
        self.sessions_of = sessions_of
        self.caller_of = caller_of

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], params: SubscriptionsListenRequestParams
    ) -> SubscriptionsListenResult:
        if ctx.request_id is None:
            raise MCPError(code=INVALID_PARAMS, message="subscriptions/listen needs a request id")
        sessions, user, wanted = self.sessions_of(), self.caller_of(ctx), params.notifications
        owned: list[tuple[str, str]] = []
        for uri in wanted.resource_subscriptions or []:
            with contextlib.suppress(MCPError):  # not the caller's, or not a session: not acknowledged
                owned.append((await owned_session(sessions, user, uri), uri))
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: ctx.request_id}
        honored = SubscriptionFilter(
            tools_list_changed=wanted.tools_list_changed or None,
            prompts_list_changed=wanted.prompts_list_changed or None,
            resources_list_changed=wanted.resources_list_changed or None,
            resource_subscriptions=[uri for _, uri in owned] or None,
        )

        acked = asyncio.Event()  # the acknowledgement is the stream's first frame

        async def updated(uri: str) -> None:
            await acked.wait()
            params = ResourceUpdatedNotificationParams(uri=uri, _meta=meta)
            await ctx.session.send_notification(ResourceUpdatedNotification(params=params), ctx.request_id)

        async def notice(level: LoggingLevel, data: dict[str, Any]) -> None:
            # Sent only when this request opted in at this level or below (the SDK's gate).
            await acked.wait()
            await ctx.session.send_log_message(level, data, LOGGER, related_request_id=ctx.request_id)  # pyright: ignore[reportDeprecated]

        follows = Follows(sessions, updated, notice)
        try:
            for session_id, uri in owned:
                await follows.follow(session_id, uri)  # before the ack: what changes after it is told
            await ctx.session.send_notification(
                SubscriptionsAcknowledgedNotification(
                    params=SubscriptionsAcknowledgedNotificationParams(notifications=honored, _meta=meta)
                ),
                ctx.request_id,
            )
            acked.set()
            await anyio.sleep_forever()  # until the client goes: its stream is this request's answer
        finally:
            with anyio.CancelScope(shield=True):
                await follows.close()
        return SubscriptionsListenResult(_meta=meta)


# ---- completion --------------------------------------------------------------------------

# What each prompt's arguments complete from: "session" (the caller's session ids),
# "agent" (the agent names), None (free text).
PROMPT_ARGUMENTS: dict[str, dict[str, str | None]] = {
    "run_agent": {"goal": None, "agent": "agent"},
    "follow_session": {"session_id": "session"},
}


async def _completions(sessions: Sessions, user: User, params: CompleteRequestParams) -> list[str]:
    ref, argument = params.ref, params.argument
    if isinstance(ref, PromptReference):
        arguments = PROMPT_ARGUMENTS.get(ref.name)
        if arguments is None:
            raise invalid(f"no prompt {ref.name!r}: the prompts are {', '.join(PROMPT_ARGUMENTS)}")
        if argument.name not in arguments:
            raise invalid(f"prompt {ref.name} has no argument {argument.name!r}")
        kind = arguments[argument.name]
    else:
        if ref.uri not in TEMPLATES:
            raise invalid(f"no resource template {ref.uri!r}: the templates are {', '.join(TEMPLATES)}")
        if argument.name != "session_id":
            raise invalid(f"{ref.uri} has no variable {argument.name!r}")
        kind = "session"
    prefix = argument.value
    if kind == "agent":
        try:
            found = start_input.describe(start_input.read_definitions())
            names = [a["name"] for a in quotas.startable(user, found)]  # the ones this user may start
        except BadRequest:  # the definitions cannot be read: nothing to offer
            names = []
        return sorted(n for n in names if n.startswith(prefix))
    if kind == "session":
        try:
            return await sessions.owners.session_ids(user, prefix)
        except RPCError as err:
            raise MCPError(code=INTERNAL_ERROR, message=f"Temporal answered: {err.message}") from None
    return []


# ---- prompts -----------------------------------------------------------------------------


def _prompts(server: MCPServer, sessions_of: Callable[[], Sessions], caller_of: Caller) -> None:
    @server.prompt(title="Run an agent on a goal")
    def run_agent(
        goal: Annotated[str, Field(description="what the session should do")],
        agent: Annotated[str | None, Field(description="an agent from the definitions (list_agents)")] = None,
    ) -> str:
        """Start a session on a goal (with an agent of the definitions) and follow it to its end."""
        if agent:
            try:
                names = [a["name"] for a in start_input.describe(start_input.read_definitions())]
            except BadRequest as err:
                raise invalid(str(err)) from None
            if agent not in names:
                raise invalid(f"no agent {agent!r}: the agents are {', '.join(names) or 'none'}")
        choice = f" with agent {agent!r}" if agent else ""
        return (
            f"Start an agent session{choice} with start_session on this goal:\n\n{goal}\n\n"
            "Then call wait_for_session with its session_id until it returns. If it returns "
            "waiting_approval, show me each pending tool call and ask me whether to approve it "
            "(approve_tool_call) or deny it (deny_tool_call); if waiting_input, the session answered: "
            "show me the answer. When it ends, tell me its status and answer."
        )

    @server.prompt(title="Follow a session")
    async def follow_session(
        session_id: Annotated[str, Field(description="the session's id (completion offers yours)")],
        ctx: Context[Any, Any],
    ) -> str:
        """Follow a session to its end, putting each tool call that waits for approval to me."""
        await check_session(sessions_of(), caller_of(ctx.request_context), session_id)
        return (
            f"Follow the agent session {session_id}: read session://{session_id} for its status, then "
            "call wait_for_session with its session_id until it ends. Each time it returns "
            "waiting_approval, show me the pending tool calls and ask me whether to approve or deny "
            "each. When it ends, tell me its status and answer."
        )
