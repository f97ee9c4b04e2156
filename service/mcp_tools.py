"""The sessions as an MCP server (the `mcp` SDK's `MCPServer`), shared by
`python mcp_server.py` (stdio) and `api.py` (streamable HTTP at `/mcp`).

Tools start, read, wait on and steer sessions; resources give a session's status
(`session://{id}`) and its messages (`session://{id}/transcript`). Everything goes
through `service.steering`, so a tool does what the HTTP route of the same name does,
as the caller: over stdio one user who sees every session (`mcp:<login name>`, as the
command line is `cli:<login name>`), over HTTP the user of the bearer token, who sees
and decides only their own sessions (others' answer as unknown). Prompts, completion,
resource subscriptions and notices are `service.mcp_protocol`'s.

`wait_for_session` waits for the session to end, to need a person or for its timeout,
sending progress notifications meanwhile (their values only grow, across the rounds of
one call too). A call waiting for approval is put to the person through the client when
the client declared elicitation: at protocol 2026-07-28 the tool answers that input is
required and the client calls again with the answers; at earlier revisions the server
asks during the call. A form has flat fields, as MCP requires: `decision` (approve or
deny), `reason`, and `input` (the JSON to run with, as text). Declining denies the call;
cancelling leaves it waiting. Failures are tool errors of one line.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal

from mcp.server import MCPServer
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.elicitation import (
    AcceptedElicitation,
    CancelledElicitation,
    DeclinedElicitation,
    ElicitationResult,
    render_elicitation_schema,
)
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.server.request_state import RequestStateSecurity
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    GetPromptResult,
    InputRequiredResult,
    ToolAnnotations,
)
from mcp_types.version import is_version_at_least
from pydantic import BaseModel, Field, ValidationError, create_model
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send
from temporalio.service import RPCError

from activities.wire import TextDelta
from infra import project
from infra.definitions import NAME_PATTERN
from infra.errors import AgentError, BadRequest, InvalidInput, Rejected, SessionNotFound
from service import mcp_protocol, quotas, schemas, steering
from service.auth import User, Users, bearer_user
from service.http_errors import RETRY_AFTER, error_response
from service.schemas import SessionPage
from service.steering import Sessions
from sessions import control, start_input
from sessions import memory as memories
from sessions.text import shorten
from workflows import events as ev
from workflows.agent import AgentWorkflow
from workflows.contract import PendingApproval, SessionStatus

NAME = project.NAME  # serverInfo: the project's name and version (pyproject.toml)
TITLE = "Agent sessions"
PATH = "/mcp"
SCOPE_USER = "agent.user"  # the ASGI scope key of the caller, set by `BearerOnly`
# The first revision whose tools answer "input required" instead of asking during the call.
INPUT_REQUIRED_REVISION = "2026-07-28"
DEFAULT_WAIT = 50.0
MAX_WAIT = 600.0
STATUS_EVERY = 5.0  # seconds between status reads while no event arrives
TEXT_IN_PROGRESS = 240  # characters of the text so far in a progress message

INSTRUCTIONS = """Durable agent sessions (each one a Temporal workflow). Start one with
start_session, follow it with wait_for_session (it returns when the session ends, needs a
person, or after timeout_seconds), then answer what it needs: approve_tool_call or
deny_tool_call for a call waiting for approval, send_message for a chat session's next
message. get_session and list_sessions read; pause_session, resume_session, close_session
and cancel_session steer."""

SessionId = Annotated[str, Field(min_length=1, max_length=200, description="the session's id")]
ToolUseId = Annotated[
    str,
    Field(
        min_length=1, max_length=200, description="the id of the tool call (pending_approvals[].tool_use_id)"
    ),
]
Reason = Annotated[str | None, Field(max_length=2000, description="why; the model is told")]

READS = ToolAnnotations(read_only_hint=True, open_world_hint=False)
CHANGES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)


class Started(BaseModel):
    session_id: str
    status: str


class AgentList(BaseModel):
    agents: list[dict[str, Any]]


# An agent's name, as the definitions spell it: the memory scope it names.
MemoryScope = Annotated[
    str | None, Field(pattern=NAME_PATTERN, description="an agent's scope (default: your own)")
]


class MemoryList(BaseModel):
    user: str
    agent: str | None
    memories: list[memories.Memory]


class WaitResult(SessionStatus):
    """The session's status (what `status --json` prints) and why the wait returned."""

    returned_because: Literal["ended", "waiting_approval", "waiting_budget", "waiting_input", "timeout"]


class WaitState(BaseModel):
    """What one `wait_for_session` call carries between its rounds (2026-07-28): the
    server seals it, and binds it to the call's arguments and its user."""

    user: str
    deadline: float  # seconds since the epoch
    asked: list[str] = Field(default_factory=list)  # tool_use_ids put to the person once
    progress: float = 0  # the last progress value sent


class SessionsServer(MCPServer):
    """`MCPServer` whose failed calls answer with one line: an argument that breaks a
    tool's schema says which and why, instead of pydantic's multi-line report. An unknown
    tool or prompt, or a prompt's missing argument, is a protocol error (-32602)."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        if self._tool_manager.get_tool(name) is None:
            raise MCPError(code=INVALID_PARAMS, message=f"unknown tool {name!r}", data={"name": name})
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as err:
            if isinstance(err.__cause__, ValidationError):
                raise ToolError(f"invalid arguments for {name}: {steering.one_line(err.__cause__)}") from err
            raise

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None, context: Context[Any, Any] | None = None
    ) -> GetPromptResult | InputRequiredResult:
        if self._prompt_manager.get_prompt(name) is None:
            known = ", ".join(p.name for p in self._prompt_manager.list_prompts())
            raise MCPError(code=INVALID_PARAMS, message=f"unknown prompt {name!r}: the prompts are {known}")
        try:
            return await super().get_prompt(name, arguments, context)
        except ValueError as err:  # a missing argument, or one its function refused
            cause = err.__cause__ or err
            if isinstance(cause, MCPError):
                raise cause from None
            raise MCPError(code=INVALID_PARAMS, message=f"prompt {name}: {cause}") from None


@contextmanager
def one_line_errors() -> Iterator[None]:
    """The project's errors (unknown session, not yours, a refused decision, bad input) and
    Temporal's as tool errors of one line."""
    try:
        yield
    except AgentError as err:
        raise ToolError(str(err)) from None
    except RPCError as err:  # Temporal itself, for now: worth asking again
        raise ToolError(f"busy: Temporal answered: {err.message}; retry in {RETRY_AFTER} s") from None


def build(
    sessions_of: Callable[[], Sessions], caller_of: Callable[[ServerRequestContext[Any, Any] | None], User]
) -> MCPServer:
    """The server: `sessions_of()` gives what the tools act through, `caller_of(request
    context)` the user a request acts as."""

    def principal(ctx: ServerRequestContext[Any, Any]) -> str | None:
        return caller_of(ctx).name

    server = SessionsServer(
        NAME, title=TITLE, version=project.version(), instructions=INSTRUCTIONS, log_level="WARNING",
        # Per process: the rounds of a call end with the process that answered the first.
        request_state_security=RequestStateSecurity(keys=[os.urandom(32)], bind_principal=principal),
        subscriptions=False,  # `mcp_protocol` serves subscriptions/listen, per caller
    )  # fmt: skip
    mcp_protocol.install(server, sessions_of, caller_of)

    def caller(ctx: Context[Any, Any]) -> User:
        return caller_of(ctx.request_context)

    @server.tool(annotations=CHANGES, title="Start a session")
    async def start_session(
        goal: Annotated[
            str, Field(min_length=1, max_length=200_000, description="what the session should do")
        ],
        agent: Annotated[
            str | None,
            Field(
                max_length=200,
                description="an agent from the definitions (list_agents); default: the file's default",
            ),
        ] = None,
        session_id: Annotated[
            str | None, Field(max_length=200, description="the id to give it; default: a new one")
        ] = None,
        model: Annotated[
            str | None, Field(max_length=200, description="the model, e.g. anthropic:claude-sonnet-4-5")
        ] = None,
        chat: Annotated[
            bool, Field(description="a chat session: after each answer it waits for send_message")
        ] = False,
        fallback_models: schemas.FallbackModels = None,
        max_steps: schemas.MaxSteps = None,
        token_budget: schemas.TokenBudget = None,
        cost_budget: schemas.CostBudget = None,
        timeout: schemas.Timeout = None,
        approval_timeout: schemas.ApprovalTimeout = None,
        output_schema: schemas.OutputSchema = None,
        attachments: Annotated[
            list[schemas.NewAttachment] | None,
            Field(max_length=schemas.MAX_ATTACHMENTS, description=schemas.ATTACHMENTS),
        ] = None,
        thinking_budget: schemas.ThinkingBudget = None,
        temperature: schemas.Temperature = None,
        top_p: schemas.TopP = None,
        stop_sequences: schemas.StopSequences = None,
        tool_choice: schemas.ToolChoice = None,
        on_limit: schemas.OnLimit = None,
        *,
        ctx: Context[Any, Any],
    ) -> Started:
        """Start an agent session on a goal; answers its id and status. Follow it with wait_for_session.
        The other choices are POST /v1/sessions's: fallback models, limits (with on_limit "ask", a
        limit reached waits for raise_limit or decline_limit), a typed answer (output_schema: the
        answer is JSON matching it, read as `output`), model settings and attachments (each
        {name, media_type, data: base64})."""
        given = locals()
        with one_line_errors():
            found = await steering.start(
                sessions_of(), caller(ctx), goal=goal, agent=agent, session_id=session_id, model=model, chat=chat,
                **{k: given[k] for k in schemas.START_CHOICES},
            )  # fmt: skip
        return Started(session_id=found.session_id, status=found.status)

    @server.tool(annotations=READS, title="Read a session")
    async def get_session(session_id: SessionId, ctx: Context[Any, Any]) -> SessionStatus:
        """A session's status: status, steps, usage, cost, pending_approvals, answer, output (a typed answer, parsed), error, ... (what `client.py status --json` prints)."""
        with one_line_errors():
            return await sessions_of().owners.status(caller(ctx), session_id)

    @server.tool(annotations=READS, title="List sessions")
    async def list_sessions(
        status: Annotated[
            str | None,
            Field(
                max_length=40,
                description=(
                    "only sessions with this status (running, waiting_approval, waiting_event, "
                    "sleeping, completed, ...)"
                ),
            ),
        ] = None,
        limit: Annotated[int, Field(ge=1, le=200, description="at most this many, newest first")] = 50,
        cursor: Annotated[
            str | None,
            Field(
                max_length=4096, description="`next_cursor` of the page before, with the same status filter"
            ),
        ] = None,
        *,
        ctx: Context[Any, Any],
    ) -> SessionPage:
        """The sessions this caller may see, newest first, as status objects, a page at a time."""
        with one_line_errors():
            rows, next_cursor = await sessions_of().owners.listing(caller(ctx), status, limit, cursor)
            return SessionPage(sessions=rows, next_cursor=next_cursor)

    @server.tool(annotations=READS, title="List agents")
    async def list_agents(ctx: Context[Any, Any]) -> AgentList:
        """The agent definitions a session can run that this caller may start (start_session's `agent`)."""
        with one_line_errors():
            found = start_input.describe(start_input.read_definitions())
            return AgentList(agents=quotas.startable(caller(ctx), found))

    @server.tool(annotations=READS, title="List your memories")
    async def list_memories(
        ctx: Context[Any, Any],
        agent: MemoryScope = None,
    ) -> MemoryList:
        """Your memories across sessions in one scope, newest first (what remember, recall and forget reach)."""
        user = caller(ctx)
        with one_line_errors():
            found = await memories.listing(sessions_of().client, user.name, agent)
        return MemoryList(user=user.name, agent=agent, memories=found)

    @server.tool(annotations=CHANGES, title="Forget a memory")
    async def forget_memory(
        key: Annotated[str, Field(min_length=1, max_length=100, description="the memory's key")],
        ctx: Context[Any, Any],
        agent: MemoryScope = None,
    ) -> MemoryList:
        """Forget one of your memories by its key; your memories after it."""
        user = caller(ctx)
        with one_line_errors():
            if not await memories.forget(sessions_of().client, user.name, agent, key):
                raise BadRequest(f"no memory {key!r}")
            found = await memories.listing(sessions_of().client, user.name, agent)
        return MemoryList(user=user.name, agent=agent, memories=found)

    @server.tool(annotations=CHANGES, title="Wait for a session")
    async def wait_for_session(
        session_id: SessionId,
        timeout_seconds: Annotated[
            float,
            Field(
                gt=0,
                le=MAX_WAIT,
                description=f"wait at most this long (default {DEFAULT_WAIT:g}, at most {MAX_WAIT:g})",
            ),
        ] = DEFAULT_WAIT,
        *,
        ctx: Context[Any, Any],
    ) -> WaitResult | InputRequiredResult:
        """Wait until the session ends, needs a person (a tool call waiting for approval, a chat
        waiting for the next message, a limit reached: raise_limit or decline_limit) or the timeout
        passes; answers its status and why it returned.
        Progress notifications say the step, the text so far and the tool calls. A call waiting
        for approval is put to the person when the client supports elicitation; otherwise it is
        in pending_approvals, for approve_tool_call or deny_tool_call."""
        with one_line_errors():
            return await _wait(sessions_of(), caller(ctx), ctx, session_id, timeout_seconds)

    @server.tool(annotations=CHANGES, title="Approve a tool call")
    async def approve_tool_call(
        session_id: SessionId,
        tool_use_id: ToolUseId,
        input: Annotated[
            dict[str, Any] | None,
            Field(
                description="run the tool with this input instead of the model's (checked against the tool's schema)"
            ),
        ] = None,
        *,
        ctx: Context[Any, Any],
    ) -> SessionStatus:
        """Approve a tool call that waits for approval, optionally with an edited input; answers the status."""
        with one_line_errors():
            user, sessions = caller(ctx), sessions_of()
            await steering.decide(
                sessions, user, session_id, steering.decision(user, tool_use_id, input=input), approve=True
            )
            return await control.status(sessions.client, session_id)

    @server.tool(annotations=CHANGES, title="Deny a tool call")
    async def deny_tool_call(
        session_id: SessionId, tool_use_id: ToolUseId, reason: Reason = None, *, ctx: Context[Any, Any]
    ) -> SessionStatus:
        """Deny a tool call that waits for approval; the model is told the reason. Answers the status."""
        with one_line_errors():
            user, sessions = caller(ctx), sessions_of()
            await steering.decide(
                sessions, user, session_id, steering.decision(user, tool_use_id, reason=reason), approve=False
            )
            return await control.status(sessions.client, session_id)

    async def steer(
        ctx: Context[Any, Any], session_id: str, update: Callable[..., Any], *args: Any
    ) -> SessionStatus:
        with one_line_errors():
            sessions = sessions_of()
            await steering.act(sessions, caller(ctx), session_id, update, *args)
            return await control.status(sessions.client, session_id)

    @server.tool(annotations=CHANGES, title="Send a message")
    async def send_message(
        session_id: SessionId,
        text: Annotated[str, Field(min_length=1, max_length=200_000, description="the message")],
        ctx: Context[Any, Any],
        mode: Annotated[
            Literal["queue", "steer", "interrupt"] | None,
            Field(
                description="queue: after the run's answer (a chat's default); steer: at the model's next "
                "call (the default otherwise); interrupt: the work in flight cut short, then the model's next turn"
            ),
        ] = None,
    ) -> SessionStatus:
        """A message while the session works: a chat's next (queued if it is busy), a steer the model
        gets at its next call, or an interrupt that cuts the model call and tools in flight short
        first. Answers the status."""
        with one_line_errors():
            message = steering.message(text, mode)
        return await steer(ctx, session_id, AgentWorkflow.send_message, message)

    @server.tool(annotations=CHANGES, title="Pause a session")
    async def pause_session(session_id: SessionId, ctx: Context[Any, Any]) -> SessionStatus:
        """Pause the session between units of work (a model call or a tool call in flight finishes)."""
        return await steer(ctx, session_id, AgentWorkflow.pause_session)

    @server.tool(annotations=CHANGES, title="Resume a session")
    async def resume_session(session_id: SessionId, ctx: Context[Any, Any]) -> SessionStatus:
        """Resume a paused session."""
        return await steer(ctx, session_id, AgentWorkflow.resume_session)

    @server.tool(annotations=CHANGES, title="Close a chat session")
    async def close_session(session_id: SessionId, ctx: Context[Any, Any]) -> SessionStatus:
        """End a chat session after the messages already sent."""
        return await steer(ctx, session_id, AgentWorkflow.close_session)

    @server.tool(annotations=CHANGES, title="Raise a session's limit")
    async def raise_limit(
        session_id: SessionId,
        name: Annotated[Literal["max_steps", "token_budget", "cost_budget"], Field(description="the limit")],
        value: Annotated[float, Field(gt=0, description="the new absolute limit, above what is used")],
        ctx: Context[Any, Any],
    ) -> SessionStatus:
        """Set a new limit; a session waiting at it (waiting_budget) goes on. Answers the status."""
        with one_line_errors():
            request = steering.limit_raise(caller(ctx), name, value)
            await steering.check_raise(sessions_of().owners, caller(ctx), session_id, request)
        return await steer(ctx, session_id, AgentWorkflow.raise_limit, request)

    @server.tool(annotations=CHANGES, title="Decline more budget")
    async def decline_limit(
        session_id: SessionId, ctx: Context[Any, Any], reason: Reason = None
    ) -> SessionStatus:
        """A session waiting at a limit (waiting_budget) ends stopped, the limit its reason."""
        with one_line_errors():
            request = steering.limit_decline(caller(ctx), reason)
        return await steer(ctx, session_id, AgentWorkflow.decline_limit, request)

    @server.tool(
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False),
        title="Cancel a session",
    )
    async def cancel_session(
        session_id: SessionId, reason: Reason = None, *, ctx: Context[Any, Any]
    ) -> SessionStatus:
        """Cancel the session and the work in flight; it ends `cancelled`."""
        with one_line_errors():
            request = steering.cancel_request(caller(ctx), reason)
        return await steer(ctx, session_id, AgentWorkflow.cancel_session, request)

    @server.resource(
        "session://{session_id}", name="session", mime_type="application/json",
        description="the session's status (what `client.py status --json` prints)",
    )  # fmt: skip
    async def session_resource(session_id: str, ctx: Context[Any, Any]) -> str:
        with resource_errors():
            found = await sessions_of().owners.status(caller(ctx), session_id)
        return found.model_dump_json(indent=2)

    @server.resource(
        "session://{session_id}/transcript", name="transcript", mime_type="application/json",
        description="the session's messages, as `client.py history --json` has them",
    )  # fmt: skip
    async def transcript_resource(session_id: str, ctx: Context[Any, Any]) -> str:
        with resource_errors():
            sessions = sessions_of()
            await sessions.owners.check(caller(ctx), session_id)
            document = control.history_document(await control.history(sessions.client, session_id))
        return json.dumps(document["messages"], indent=2, ensure_ascii=False)

    return server


@contextmanager
def resource_errors() -> Iterator[None]:
    try:
        yield
    except SessionNotFound as err:
        raise ResourceNotFoundError(str(err)) from None
    except AgentError as err:
        raise ResourceError(str(err)) from None
    except RPCError as err:
        raise ResourceError(f"Temporal answered: {err.message}") from None


# ---- waiting -----------------------------------------------------------------------------


async def _wait(
    sessions: Sessions, user: User, ctx: Context[Any, Any], session_id: str, timeout: float
) -> WaitResult | InputRequiredResult:
    state = _state(ctx, user, timeout)
    status = await sessions.owners.status(user, session_id)
    if ctx.input_responses:  # the answers to the previous round's questions
        await _record_answers(sessions, user, session_id, status, ctx.input_responses)
        status = await control.status(sessions.client, session_id)
    modern = is_version_at_least(ctx.protocol_version or "", INPUT_REQUIRED_REVISION)
    progress = _Progress(ctx, state.progress, status.steps)
    await progress.report([], status)
    async with steering.Watch(sessions.feeds, session_id) as watch:
        while True:
            if steering.ended(status):
                return WaitResult(**status.model_dump(), returned_because="ended")
            if status.status in ("waiting_input", "waiting_budget"):
                return WaitResult(**status.model_dump(), returned_because=status.status)
            if status.status == "waiting_approval":
                fresh = [p for p in status.pending_approvals if p.tool_use_id not in state.asked]
                if not (fresh and _can_ask(ctx)):
                    return WaitResult(**status.model_dump(), returned_because="waiting_approval")
                state.asked += [p.tool_use_id for p in fresh]
                if modern:
                    state.progress = progress.value
                    return InputRequiredResult(
                        input_requests={
                            p.tool_use_id: ElicitRequest(
                                params=ElicitRequestFormParams(
                                    message=_ask(status, p), requested_schema=_schema(p)
                                )
                            )
                            for p in fresh
                        },
                        request_state=state.model_dump_json(),
                    )
                for pending in fresh:
                    try:
                        answer = await ctx.elicit(_ask(status, pending), _form(pending))
                    except ValueError as err:  # accepted content that breaks the form
                        raise ToolError(str(err)) from None
                    await _record(sessions, user, session_id, pending, answer)
                status = await control.status(sessions.client, session_id)
                continue
            remaining = state.deadline - time.time()
            if remaining <= 0:
                return WaitResult(**status.model_dump(), returned_because="timeout")
            events = await watch.next_batch(min(remaining, STATUS_EVERY))
            if not events or any(not isinstance(e, TextDelta) for e in events):
                status = await control.status(sessions.client, session_id)
            await progress.report(events, status)


def _state(ctx: Context[Any, Any], user: User, timeout: float) -> WaitState:
    """This call's state: new, or carried from its previous round (sealed by the SDK)."""
    if ctx.request_state is not None:
        try:
            state = WaitState.model_validate_json(ctx.request_state)
        except ValidationError:
            raise ToolError("the request state of this call is not one this server wrote") from None
        if state.user == user.name:
            return state
        raise ToolError("the request state of this call belongs to another user")
    return WaitState(user=user.name, deadline=time.time() + timeout)


def _can_ask(ctx: Context[Any, Any]) -> bool:
    """Whether the client declared elicitation with forms (an empty declaration means forms)."""
    capabilities = ctx.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


def _ask(status: SessionStatus, pending: PendingApproval) -> str:
    owner = pending.session_id or status.session_id
    where = (
        f"session {owner}"
        if owner == status.session_id
        else f"sub-agent {owner} of session {status.session_id}"
    )
    return (
        f"{where} wants to run {pending.name} with {shorten(pending.input, 400)}. "
        "Approve it (optionally with an edited input) or deny it."
    )


def _form(pending: PendingApproval) -> type[BaseModel]:
    """The approval form for one call: flat fields, the input as JSON text to edit."""
    return create_model(
        "ToolCallApproval",
        decision=(Literal["approve", "deny"], Field(description="approve or deny the call")),
        reason=(str, Field(default="", max_length=2000, description="why (told to the model when denied)")),
        input=(str, Field(default=json.dumps(pending.input, ensure_ascii=False), description="the input the tool runs with, as JSON; edit it to change it")),
    )  # fmt: skip


def _schema(pending: PendingApproval) -> dict[str, Any]:
    return render_elicitation_schema(_form(pending))


async def _record_answers(
    sessions: Sessions, user: User, session_id: str, status: SessionStatus, answers: dict[str, Any]
) -> None:
    """The answers of a 2026-07-28 round, keyed by tool_use_id, as decisions."""
    pending = {p.tool_use_id: p for p in status.pending_approvals}
    for tool_use_id, answer in answers.items():
        if tool_use_id not in pending or not isinstance(answer, ElicitResult):
            continue  # decided meanwhile, or not an answer to a form
        call = pending[tool_use_id]
        if answer.action != "accept":
            outcome: ElicitationResult[Any] = (
                DeclinedElicitation() if answer.action == "decline" else CancelledElicitation()
            )
        else:
            try:
                outcome = AcceptedElicitation(data=_form(call).model_validate(answer.content or {}))
            except ValidationError as err:
                raise ToolError(
                    f"the answer for {call.name} breaks the form: {steering.one_line(err)}"
                ) from None
        await _record(sessions, user, session_id, call, outcome)


async def _record(
    sessions: Sessions, user: User, session_id: str, call: PendingApproval, answer: ElicitationResult[Any]
) -> None:
    """One person's answer as a decision: approve (with the edited input if it changed),
    deny (declining is denying), or nothing (cancelled: the call keeps waiting)."""
    if answer.action == "cancel":
        return
    if answer.action == "decline":
        decision, approve = (
            steering.decision(user, call.tool_use_id, reason=f"declined by {user.name}"),
            False,
        )
    else:
        data = answer.data
        approve = data.decision == "approve"
        if approve:
            decision = steering.decision(user, call.tool_use_id, input=_edited(call, data.input))
        else:
            decision = steering.decision(user, call.tool_use_id, reason=data.reason.strip() or None)
    try:
        await steering.decide(sessions, user, session_id, decision, approve)
    except InvalidInput:
        raise
    except Rejected:
        pass  # decided by someone else meanwhile: the status says what was recorded


def _edited(call: PendingApproval, text: str) -> dict[str, Any] | None:
    """The edited input, or None when the person left it as it was."""
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ToolError(f"the edited input for {call.name} is not JSON: {err.msg} (at {err.pos})") from None
    if not isinstance(value, dict):
        raise ToolError(f"the edited input for {call.name} must be a JSON object")
    return None if value == call.input else value


class _Progress:
    """Progress notifications while a wait follows the session: the step, the text so far
    and the latest step's tool calls, each with a larger value than the last."""

    def __init__(self, ctx: Context[Any, Any], start: float, steps: int):
        self.ctx = ctx
        self.value = start
        self.steps = steps  # steps recorded when the wait began; deltas after them are new
        self.step = steps
        self.attempt = 1
        self.text = ""
        self.calls: dict[str, tuple[str, str]] = {}  # the latest step's tool calls: name, state
        self.new_step = False
        self.last = ""

    def add(self, event: ev.SessionEvent) -> None:
        if isinstance(event, TextDelta):
            if event.step <= self.steps:
                return
            if (event.step, event.attempt) != (self.step, self.attempt):
                self.text = ""
            self.step, self.attempt = event.step, event.attempt
            self.text += event.text
        elif isinstance(event, ev.TurnRecorded):
            self.step, self.attempt, self.text, self.new_step = event.step, event.attempt, event.text, True
        elif isinstance(event, ev.ToolCallStarted | ev.ApprovalRequested):
            if self.new_step:  # the first call of a step: the previous step's calls are done
                self.calls, self.new_step = {}, False
            waiting = isinstance(event, ev.ApprovalRequested)
            self.calls[event.tool_use_id] = (event.name, "waiting for approval" if waiting else "running")
        elif isinstance(event, ev.DecisionRecorded):
            self.calls[event.tool_use_id] = (event.name, "approved" if event.approved else "denied")
        elif isinstance(event, ev.ToolCallEnded):
            self.calls[event.tool_use_id] = (event.name, event.status)

    async def report(self, events: list[ev.SessionEvent], status: SessionStatus) -> None:
        for event in events:
            self.add(event)
        step = max(self.step, status.steps)
        parts = [f"step {step}", status.status.replace("_", " ")]
        if self.text.strip():
            text = " ".join(self.text.split())
            parts.append(
                "text so far: " + (text if len(text) <= TEXT_IN_PROGRESS else "…" + text[-TEXT_IN_PROGRESS:])
            )
        if self.calls:
            parts.append(
                "tool calls: " + ", ".join(f"{name} ({state})" for name, state in self.calls.values())
            )
        message = " · ".join(parts)
        if message != self.last:
            self.last = message
            self.value += 1
            await self.ctx.report_progress(self.value, None, message)


# ---- over HTTP ---------------------------------------------------------------------------


class BearerOnly:
    """The MCP endpoint behind the API's users: a bearer token is required (no cookie), and
    the user it names is put in the request's scope for the tools, and as the scope's
    `user` the SDK binds an MCP session (`Mcp-Session-Id`) to: a session answers only the
    user who opened it, any other as an unknown session (404)."""

    def __init__(self, app: ASGIApp, users: Users):
        self.app = app
        self.users = users

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers") or [])
        try:
            user = bearer_user(self.users, headers.get(b"authorization", b"").decode("latin-1") or None)
        except AgentError as err:
            response = error_response(401, "Unauthorized", str(err), {"WWW-Authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        scope[SCOPE_USER] = user
        scope["user"] = AuthenticatedUser(AccessToken(token="", client_id=user.name, scopes=[]))
        await self.app(scope, receive, send)


def http_caller(ctx: ServerRequestContext[Any, Any] | None) -> User:
    """The user `BearerOnly` found for this request."""
    request = ctx.request if ctx is not None else None
    scope = getattr(request, "scope", None)
    user = scope.get(SCOPE_USER) if isinstance(scope, dict) else None
    if not isinstance(user, User):
        raise ToolError("no user for this request: send Authorization: Bearer TOKEN")
    return user


def http_route(server: MCPServer, users: Users) -> Route:
    """The `/mcp` route (streamable HTTP) for the API. The caller runs
    `server.session_manager.run()` for the app's lifetime."""
    # The SDK's Host and Origin check is off: the app's own (`service.origins`) guards
    # every door, `/mcp` among them, with the names and origins the operator allowed.
    inner = server.streamable_http_app(
        streamable_http_path=PATH,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    endpoint = next(r for r in inner.routes if isinstance(r, Route) and r.path == PATH).endpoint
    return Route(PATH, endpoint=BearerOnly(endpoint, users))
