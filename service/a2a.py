"""The sessions as an A2A agent, on the `a2a-sdk` library: its card at
`/.well-known/agent-card.json` (public) and its JSON-RPC endpoint at `/a2a` (a bearer
token of the API's users), A2A 1.0 with the SDK's 0.3 compatibility on.

The SDK speaks the protocol (JSON-RPC, the 0.3 adapter, Server-Sent Events, the card's
0.3 fields); `SessionTasks`, the request handler here, answers it from Temporal. A context
is a session (`contextId` = its id) and each user message is one task, `SESSION.turn-N`
(the goal is turn 1). A task holds nothing in this process: its state is derived from
the session's status whenever it is read, so tasks survive a restart of `api.py`.

    session status                              task state
    running, paused, sleeping, waiting_event,   working
    stuck (and anything new)
    waiting_approval                            input-required, with a data part
                                                {"pending_approvals": [...]} in the status message
    waiting_budget                              input-required, with a data part
                                                {"limit_reached": {...}} in the status message
    waiting_input (a chat answered), completed  completed, the answer as the artifact `answer`
    stopped, failed                             failed, with the reason
    cancelled                                   canceled
    a message still queued behind another       submitted

A message without `contextId`, or with one no session has, starts a chat session (its
text is the goal, `metadata.agent` picks the agent, its file parts are the attachments and
other metadata keys are `POST /v1/sessions`'s choices, `START_METADATA`; with
`output_schema` it is not a chat, and the parsed output is a data part of the answer);
with a known `contextId` it is a message to the session (text only, `send_message`):
`metadata.mode` is `queue`, `steer` or `interrupt`, by default the session's (a chat's next
task, or a steer of a working session's current task); a steer or an interrupt answers the
current task, a queued message its own. A reply to the current task (its `taskId`) with
text is a steer, or the mode its metadata names. A reply with a data part
`{"approve": TOOL_USE_ID}` (optionally `"input": {...}`, an edited input) or
`{"deny": TOOL_USE_ID, "reason": ...}` decides a call that waits for approval;
`{"raise": {"name": LIMIT, "value": N}}` raises the limit a session waits at, and
`{"decline": true, "reason": ...}` declines it. A blocking send returns when its task is terminal or needs
input, or after `BLOCKING_SECONDS` with its state then; a non-blocking one at once.
Streaming sends status updates and the model's text as chunks of the `answer` artifact.
Another user's task is not found, as in the HTTP API.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import AsyncGenerator, Callable, Collection, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from a2a.auth.user import User as A2AUser
from a2a.compat.v0_3.conversions import to_compat_agent_card
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler, validate_request_params
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Artifact,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    HTTPAuthSecurityScheme,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Part,
    Role,
    SecurityRequirement,
    SecurityScheme,
    SendMessageConfiguration,
    SendMessageRequest,
    StringList,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.constants import (
    AGENT_CARD_WELL_KNOWN_PATH,
    PROTOCOL_VERSION_0_3,
    PROTOCOL_VERSION_1_0,
    VERSION_HEADER,
)
from a2a.utils.errors import (
    A2AError,
    ExtendedAgentCardNotConfiguredError,
    InternalError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a.utils.task import apply_history_length, validate_page_size
from fastapi import FastAPI
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict, ParseDict
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from temporalio.service import RPCError

from activities.wire import TextBlock, TextDelta
from infra import project
from infra.errors import AgentError, BadRequest, Busy, InvalidInput, NoWorker, SessionExists, SessionNotFound
from service import steering
from service.auth import User, Users, bearer_user
from service.http_errors import RETRY_AFTER, error_response
from service.schemas import START_CHOICES
from service.steering import Sessions
from sessions import control, listing
from sessions.text import shorten
from workflows.agent import AgentWorkflow
from workflows.contract import SessionHistory, SessionStatus

PATH = "/a2a"
SCOPE_USER = "agent.user"
BLOCKING_SECONDS = 60.0  # a blocking send answers with the task's state by then
CANCEL_SECONDS = 30.0  # how long a cancel waits for the session to end cancelled
STATUS_EVERY = 5.0  # seconds between status reads while no event arrives
LIST_PAGE_SIZE = 50  # ListTasks' page without a pageSize (the spec's default)
STATE_NAMES = frozenset(TaskState.keys())
# The sessions whose latest task is in a state, by their status (as `task_of` decides it);
# a latest task is never submitted, rejected or waiting for authentication.
_ENDED_AS = {
    TaskState.TASK_STATE_COMPLETED: ("completed", "waiting_input"),
    TaskState.TASK_STATE_FAILED: ("stopped", "failed"),
    TaskState.TASK_STATE_CANCELED: ("cancelled",),
    TaskState.TASK_STATE_INPUT_REQUIRED: ("waiting_approval", "waiting_budget"),
}
NONE_LATEST = listing.Filter(among=("-",))
LATEST_STATES: dict[int, listing.Filter] = {
    **{state: listing.Filter(among=statuses) for state, statuses in _ENDED_AS.items()},
    TaskState.TASK_STATE_WORKING: listing.Filter(outside=tuple(s for v in _ENDED_AS.values() for s in v)),
    TaskState.TASK_STATE_SUBMITTED: NONE_LATEST,
    TaskState.TASK_STATE_REJECTED: NONE_LATEST,
    TaskState.TASK_STATE_AUTH_REQUIRED: NONE_LATEST,
}
ANSWER = "answer"  # the artifact holding the session's answer to a turn
TASK_ID = re.compile(r"^(?P<session>.+)\.turn-(?P<turn>[1-9][0-9]{0,8})$")
TERMINAL = {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED}
STOPS = TERMINAL | {TaskState.TASK_STATE_INPUT_REQUIRED}
# The metadata keys a start takes (beside `agent`): `POST /v1/sessions`'s fields of the same names.
START_METADATA = ("model", *(k for k in START_CHOICES if k != "attachments"))


@dataclass(frozen=True)
class TaskRef:
    session_id: str
    turn: int

    @property
    def id(self) -> str:
        return f"{self.session_id}.turn-{self.turn}"

    @classmethod
    def parse(cls, task_id: str) -> TaskRef:
        found = TASK_ID.match(task_id)
        if found is None:
            raise TaskNotFoundError(message=f"no task {task_id!r}: task ids are SESSION.turn-N")
        return cls(found["session"], int(found["turn"]))


# ---- tasks from sessions -----------------------------------------------------------------


def turns_of(history: SessionHistory) -> list[tuple[str, str]]:
    """Each user turn's message and the session's last text before the next one."""
    found: list[tuple[str, str]] = []
    for message in history.messages:
        if message.role == "user" and any(isinstance(b, TextBlock) for b in message.content):
            found.append((message.text(), ""))
        elif message.role == "assistant" and found and message.text().strip():
            found[-1] = (found[-1][0], message.text())
    return found


def task_of(status: SessionStatus, turn: int, history: SessionHistory | None = None) -> Task:
    """Turn `turn` of the session as a task, from its status (and its history, for the
    message and the answers of earlier turns)."""
    ref = TaskRef(status.session_id, turn)
    if not 1 <= turn <= status.user_turns + status.queued_messages:
        raise TaskNotFoundError(message=f"no task {ref.id!r}")
    turns = turns_of(history) if history is not None else []
    answer: str | None = None
    output: Any = None  # a typed answer, parsed
    data: dict[str, Any] | None = None
    if turn < status.user_turns:
        state, text = TaskState.TASK_STATE_COMPLETED, "answered"
        answer = turns[turn - 1][1] if turn <= len(turns) else None
    elif turn > status.user_turns and not steering.ended(status):
        state, text = TaskState.TASK_STATE_SUBMITTED, f"queued behind turn {status.user_turns}"
    elif status.status in ("completed", "waiting_input"):
        state, text, answer = TaskState.TASK_STATE_COMPLETED, status.status.replace("_", " "), status.answer
        output = status.output
        if turn > status.user_turns:  # closed before this message was taken
            answer = output = None
    elif status.status == "stopped":
        state, text = (
            TaskState.TASK_STATE_FAILED,
            f"stopped: {status.stop_reason}" + (f": {status.error}" if status.error else ""),
        )
    elif status.status == "failed":
        state, text = TaskState.TASK_STATE_FAILED, status.error or "failed"
    elif status.status == "cancelled":
        state, text = TaskState.TASK_STATE_CANCELED, status.error or "cancelled"
    elif status.status == "waiting_approval":
        state = TaskState.TASK_STATE_INPUT_REQUIRED
        calls = ", ".join(
            f"{p.name}({shorten(p.input, 120)}) [{p.tool_use_id}]" for p in status.pending_approvals
        )
        text = (
            f"waiting for approval: {calls}. Reply with a data part "
            '{"approve": TOOL_USE_ID} (optionally "input": {...}) or {"deny": TOOL_USE_ID, "reason": "..."}'
        )
        data = {"pending_approvals": [p.model_dump(mode="json") for p in status.pending_approvals]}
    elif status.status == "waiting_budget" and status.limit_reached is not None:
        state, reached = TaskState.TASK_STATE_INPUT_REQUIRED, status.limit_reached
        text = (
            f"waiting at {reached.name}: {reached.used:g} used of {reached.limit:g}. Reply with a data part "
            f'{{"raise": {{"name": "{reached.name}", "value": N}}}} (a new limit above what is used) or '
            '{"decline": true, "reason": "..."}'
        )
        data = {"limit_reached": reached.model_dump(mode="json")}
    else:
        state = TaskState.TASK_STATE_WORKING
        text = f"stuck: {status.stuck.message}" if status.stuck else status.status.replace("_", " ")
    parts = [Part(text=text)] + ([Part(data=ParseDict(data, struct_pb2.Value()))] if data is not None else [])
    task = Task(
        id=ref.id,
        context_id=status.session_id,
        status=TaskStatus(
            state=state,
            timestamp=status.updated_at,
            message=Message(
                message_id=f"{ref.id}.{TaskState.Name(state).lower()}.{status.steps}",
                role=Role.ROLE_AGENT, context_id=status.session_id, task_id=ref.id, parts=parts,
            ),
        ),
        metadata={"session_status": status.status, "steps": status.steps, "user_turns": status.user_turns},
    )  # fmt: skip
    if answer is not None:
        artifact = Artifact(artifact_id=ANSWER, name=ANSWER, parts=[Part(text=answer)])
        if output is not None:
            artifact.parts.append(Part(data=ParseDict(output, struct_pb2.Value())))
        task.artifacts.append(artifact)
    if turn <= len(turns):
        task.history.append(
            Message(
                message_id=f"{ref.id}.user", role=Role.ROLE_USER, context_id=status.session_id, task_id=ref.id,
                parts=[Part(text=turns[turn - 1][0])],
            )
        )  # fmt: skip
    return task


def _whole(value: Any) -> Any:
    """A data part's numbers come as doubles: whole ones back to integers."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole(v) for v in value]
    return value


class ServerBusy(A2AError):
    """A read that did not get through in time: the endpoint answers it with HTTP 503,
    `Retry-After` and JSON-RPC code -32000 (`rpc`), not as an internal error."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message, {"retry_after": retry_after})
        self.retry_after = retry_after
        if (waiting := _BUSY.get()) is not None:
            waiting.append(retry_after)


# The `retry_after` of each ServerBusy raised for the request being answered (see `rpc`).
_BUSY: ContextVar[list[int] | None] = ContextVar("a2a_busy", default=None)
BUSY_CODE = -32000  # JSON-RPC's range for a server's own errors


def _a2a_error(err: AgentError | RPCError) -> A2AError:
    """The project's errors in A2A's terms, with their one line."""
    if isinstance(err, Busy):
        return ServerBusy(str(err), err.retry_after)
    if isinstance(err, NoWorker):
        return ServerBusy(str(err), RETRY_AFTER)
    if isinstance(err, RPCError):
        return ServerBusy(f"busy: Temporal answered: {err.message}; retry in {RETRY_AFTER} s", RETRY_AFTER)
    if isinstance(err, SessionNotFound):
        return TaskNotFoundError(message=str(err))
    if isinstance(err, BadRequest | InvalidInput | SessionExists):
        return InvalidParamsError(message=str(err))
    return UnsupportedOperationError(message=str(err))


@contextmanager
def _errors() -> Iterator[None]:
    """The project's errors (and Temporal's) as A2A's."""
    try:
        yield
    except (AgentError, RPCError) as err:
        raise _a2a_error(err) from None


# ---- the request handler -----------------------------------------------------------------


class SessionsUser(A2AUser):
    def __init__(self, user: User):
        self.user = user

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self.user.name


class CallContext(DefaultServerCallContextBuilder):
    """The SDK's call context (headers, extensions) with the user the endpoint found from
    the bearer token."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state[SCOPE_USER] = request.scope[SCOPE_USER]
        return context

    def build_user(self, request: Request) -> A2AUser:
        return SessionsUser(request.scope[SCOPE_USER])


def _user(context: ServerCallContext) -> User:
    user = context.state.get(SCOPE_USER)
    if not isinstance(user, User):
        raise InternalError(message="no user for this call")
    return user


class _Following:
    """A task followed through its session's events: status updates when its state or
    message changes, the model's text of its turn as chunks of the answer, until it is
    terminal, needs input (unless `stops` says only terminal), or the deadline passes."""

    def __init__(
        self, sessions: Sessions, ref: TaskRef, status: SessionStatus, stops: Collection[int] = STOPS
    ):
        self.sessions = sessions
        self.stops = stops
        self.ref = ref
        self.status = status
        self.task = task_of(status, ref.turn)
        self.steps = status.steps  # deltas of later steps are this turn's new text
        self.streamed: tuple[int, int] | None = None

    async def events(
        self, deadline: float | None
    ) -> AsyncGenerator[TaskStatusUpdateEvent | TaskArtifactUpdateEvent]:
        async with steering.Watch(self.sessions.feeds, self.ref.session_id) as watch:
            while self.task.status.state not in self.stops:
                remaining = (
                    STATUS_EVERY if deadline is None else min(STATUS_EVERY, deadline - time.monotonic())
                )
                if remaining <= 0:
                    return
                batch = await watch.next_batch(remaining)
                for event in batch:
                    if isinstance(event, TextDelta) and self._current() and event.step > self.steps:
                        yield self._chunk(event)
                if not batch or any(not isinstance(e, TextDelta) for e in batch):
                    with _errors():
                        self.status = await control.status(self.sessions.client, self.ref.session_id)
                    task = task_of(self.status, self.ref.turn)
                    if MessageToDict(task.status.message) != MessageToDict(self.task.status.message):
                        self.task = task
                        if task.status.state == TaskState.TASK_STATE_COMPLETED and task.artifacts:
                            yield TaskArtifactUpdateEvent(
                                task_id=self.ref.id, context_id=self.ref.session_id, artifact=task.artifacts[0],
                                append=False, last_chunk=True,
                            )  # fmt: skip
                        yield TaskStatusUpdateEvent(
                            task_id=self.ref.id, context_id=self.ref.session_id, status=task.status
                        )

    def _current(self) -> bool:
        return (
            self.ref.turn == self.status.user_turns and self.task.status.state == TaskState.TASK_STATE_WORKING
        )

    def _chunk(self, delta: TextDelta) -> TaskArtifactUpdateEvent:
        """A delta as a chunk of the answer; a new step or a retried attempt starts it again."""
        append = self.streamed == (delta.step, delta.attempt)
        self.streamed = (delta.step, delta.attempt)
        return TaskArtifactUpdateEvent(
            task_id=self.ref.id, context_id=self.ref.session_id, append=append, last_chunk=False,
            artifact=Artifact(artifact_id=ANSWER, name=ANSWER, parts=[Part(text=delta.text)]),
        )  # fmt: skip


class SessionTasks(RequestHandler):
    """A2A's requests answered from the sessions: no task lives in this process."""

    def __init__(self, sessions_of: Callable[[], Sessions]):
        self.sessions_of = sessions_of

    # ---- reading ---------------------------------------------------------------------

    async def _status(self, user: User, ref: TaskRef) -> SessionStatus:
        try:
            return await self.sessions_of().owners.status(user, ref.session_id)
        except SessionNotFound:
            raise TaskNotFoundError(message=f"no task {ref.id!r}") from None

    async def _task(self, user: User, ref: TaskRef) -> Task:
        """The task as it is now, with its message and (for earlier turns) its answer."""
        with _errors():
            status = await self._status(user, ref)
            history = await control.history(self.sessions_of().client, ref.session_id)
        return task_of(status, ref.turn, history)

    @validate_request_params
    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        _check_history_length(params)
        task = await self._task(_user(context), TaskRef.parse(params.id))
        return apply_history_length(task, params)

    @validate_request_params
    async def on_list_tasks(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """A context's tasks (its turns, first first); without one, the latest task of each
        session the user may see, newest first. A page at a time, under an opaque token made
        for this filter and user; `totalSize` counts every task the filter finds."""
        _check_history_length(params)
        size = params.page_size if params.HasField("page_size") else LIST_PAGE_SIZE
        validate_page_size(size)
        if params.status not in TaskState.values():
            raise InvalidParamsError(message=f"unknown task state {params.status}")
        user = _user(context)
        with _errors():
            if params.context_id:
                found, next_token, total = await self._turns(user, params, size)
            else:
                found, next_token, total = await self._latest(user, params, size)
        for task in found:
            if not params.include_artifacts:
                task.ClearField("artifacts")
            task.CopyFrom(apply_history_length(task, params))
        return ListTasksResponse(
            tasks=found, next_page_token=next_token or "", page_size=size, total_size=total
        )

    async def _turns(
        self, user: User, params: ListTasksRequest, size: int
    ) -> tuple[list[Task], str | None, int]:
        """A page of a context's tasks; none for a context no session of this user has."""
        sessions = self.sessions_of()
        made_for = {
            "list": "a2a-context",
            "context": params.context_id,
            "state": params.status,
            "user": user.name,
        }
        start = (
            _position(sessions.owners.tokens.open(params.page_token, made_for)) if params.page_token else 0
        )
        try:
            status = await sessions.owners.status(user, params.context_id)
        except SessionNotFound:
            return [], None, 0
        history = await control.history(sessions.client, params.context_id)
        every = [
            task_of(status, n, history) for n in range(1, status.user_turns + status.queued_messages + 1)
        ]
        every = [t for t in every if not params.status or t.status.state == params.status]
        more = start + size < len(every)
        next_token = sessions.owners.tokens.seal(str(start + size).encode(), made_for) if more else None
        return every[start : start + size], next_token, len(every)

    async def _latest(
        self, user: User, params: ListTasksRequest, size: int
    ) -> tuple[list[Task], str | None, int]:
        """A page of the latest task of each session the user may see, with the state asked for."""
        owners = self.sessions_of().owners
        which = LATEST_STATES.get(params.status, listing.Filter()) if params.status else listing.Filter()
        if which is NONE_LATEST:
            return [], None, 0
        made_for = {"list": "a2a", "state": params.status, "user": user.name}
        rows, next_token = await owners.page(user, which, size, params.page_token or None, made_for)
        found = [task_of(row.found, row.found.user_turns) for row in rows if row.found is not None]
        found = [t for t in found if not params.status or t.status.state == params.status]
        total = await listing.count(owners.client, owners.scoped(user, which))
        return found, next_token, total

    # ---- sending ---------------------------------------------------------------------

    async def _deliver(self, params: SendMessageRequest, user: User) -> tuple[TaskRef, SessionStatus]:
        """Start a session, send it a message, or record decisions; the task the message
        is for, and the session's status after it."""
        sessions, message = self.sessions_of(), params.message
        text = "\n".join(p.text for p in message.parts if p.HasField("text")).strip()
        files = [p for p in message.parts if p.HasField("raw") or p.HasField("url")]
        data = [_whole(MessageToDict(p.data)) for p in message.parts if p.HasField("data")]
        decisions = [d for d in data if isinstance(d, dict) and ("approve" in d or "deny" in d)]
        limits = [d for d in data if isinstance(d, dict) and ("raise" in d or "decline" in d)]
        mode = _metadata(message.metadata).get("mode")
        session_id = message.context_id or None
        ref = TaskRef.parse(message.task_id) if message.task_id else None
        if ref is not None:
            if session_id is not None and session_id != ref.session_id:
                raise InvalidParamsError(
                    message=f"task {ref.id} belongs to context {ref.session_id}, not {session_id}"
                )
            session_id = ref.session_id
        status: SessionStatus | None = None
        if session_id is not None:
            try:
                status = await sessions.owners.status(user, session_id)
            except SessionNotFound:
                if ref is not None or decisions:
                    raise TaskNotFoundError(message=f"no task {ref.id if ref else session_id!r}") from None
        if (
            ref is not None
            and status is not None
            and (ended := task_of(status, ref.turn)).status.state in TERMINAL
        ):
            raise UnsupportedOperationError(
                message=f"task {ref.id} has ended ({TaskState.Name(ended.status.state).removeprefix('TASK_STATE_').lower()}): "
                f"it takes no more messages; send the next one with contextId {ref.session_id} only"
            )
        if decisions or limits:
            if status is None or session_id is None:
                raise InvalidParamsError(
                    message="a decision answers a task: give its taskId (or its contextId)"
                )
            for found in decisions:
                await self._decide(sessions, user, session_id, found)
            for found in limits:
                await self._limit(sessions, user, session_id, found)
            ref = ref or TaskRef(session_id, status.user_turns)
        elif ref is not None:
            assert status is not None and session_id is not None
            waits = task_of(status, ref.turn).status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            if not text or ref.turn != status.user_turns or (waits and mode is None):
                raise InvalidParamsError(
                    message=f'a reply to task {ref.id} is a decision: a data part {{"approve": TOOL_USE_ID}} or '
                    f'{{"deny": TOOL_USE_ID, "reason": ...}} ({{"raise": ...}} or {{"decline": true}} at a limit), '
                    f"or, to its current task, text with metadata.mode; send the next message with contextId "
                    f"{ref.session_id} only"
                )
            ref = await self._send(sessions, user, session_id, text, files, mode or "steer")
        elif not text:
            raise InvalidParamsError(message="the message has no text")
        elif status is not None and session_id is not None:
            ref = await self._send(sessions, user, session_id, text, files, mode)
        else:
            given = {**_whole(_metadata(params.metadata)), **_whole(_metadata(message.metadata))}
            agent = given.get("agent")
            if agent is not None and not isinstance(agent, str):
                raise InvalidParamsError(message="metadata.agent names an agent: a string")
            choices = {k: given[k] for k in START_METADATA if k in given}
            # A typed answer is one answer: such a session is not a chat.
            started = await steering.start(
                sessions, user, goal=text, agent=agent, session_id=session_id,
                chat=choices.get("output_schema") is None, attachments=_attachments(files) or None, **choices,
            )  # fmt: skip
            ref = TaskRef(started.session_id, 1)
        return ref, await control.status(sessions.client, ref.session_id)

    async def _send(
        self, sessions: Sessions, user: User, session_id: str, text: str, files: list[Part], mode: Any
    ) -> TaskRef:
        """A message to the session (`send_message`); the task it is for: its own while it is
        queued, else the session's current one (a steer or an interrupt joins its run; a
        message a chat took at once started it)."""
        if files:
            raise InvalidParamsError(
                message="a message to a session takes text only: files go with the first message of a context"
            )
        if mode is not None and not isinstance(mode, str):
            raise InvalidParamsError(message="metadata.mode is queue, steer or interrupt")
        sent = await steering.act(
            sessions, user, session_id, AgentWorkflow.send_message, steering.message(text, mode)
        )
        status = await control.status(sessions.client, session_id)
        queued = [m.id for m in status.pending_messages if m.mode == "queue"]
        if sent in queued:
            return TaskRef(session_id, status.user_turns + 1 + queued.index(sent))
        return TaskRef(session_id, status.user_turns)

    async def _limit(self, sessions: Sessions, user: User, session_id: str, found: dict[str, Any]) -> None:
        """`{"raise": {"name": ..., "value": ...}}` or `{"decline": true, "reason": ...}`."""
        if "raise" in found:
            asked = found["raise"]
            name = asked.get("name") if isinstance(asked, dict) else None
            value = asked.get("value") if isinstance(asked, dict) else None
            if (
                "decline" in found
                or not isinstance(name, str)
                or not isinstance(value, int | float)
                or isinstance(value, bool)
            ):
                raise InvalidParamsError(
                    message='a raise is {"raise": {"name": "max_steps"|"token_budget"|"cost_budget", "value": N}}'
                )
            request = steering.limit_raise(user, name, value)
            await steering.check_raise(sessions.owners, user, session_id, request)
            await steering.act(sessions, user, session_id, AgentWorkflow.raise_limit, request)
            return
        reason = found.get("reason")
        if found["decline"] is not True or (reason is not None and not isinstance(reason, str)):
            raise InvalidParamsError(message='a decline is {"decline": true} (optionally "reason": "...")')
        await steering.act(
            sessions, user, session_id, AgentWorkflow.decline_limit, steering.limit_decline(user, reason)
        )

    async def _decide(self, sessions: Sessions, user: User, session_id: str, found: dict[str, Any]) -> None:
        approve = "approve" in found
        tool_use_id = found.get("approve" if approve else "deny")
        if not isinstance(tool_use_id, str) or ("approve" in found and "deny" in found):
            raise InvalidParamsError(
                message='a decision is {"approve": TOOL_USE_ID} or {"deny": TOOL_USE_ID}'
            )
        edited, reason = found.get("input"), found.get("reason")
        if approve and edited is not None and not isinstance(edited, dict):
            raise InvalidParamsError(message="the edited input must be a JSON object")
        if not approve and reason is not None and not isinstance(reason, str):
            raise InvalidParamsError(message="the reason must be a string")
        decision = (
            steering.decision(user, tool_use_id, input=edited if approve else None)
            if approve
            else steering.decision(user, tool_use_id, reason=reason)
        )
        await steering.decide(sessions, user, session_id, decision, approve)

    @validate_request_params
    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Task | Message:
        user = _user(context)
        _check_history_length(params.configuration)
        with _errors():
            ref, status = await self._deliver(params, user)
            if not params.configuration.return_immediately:
                following = _Following(self.sessions_of(), ref, status)
                async for _ in following.events(time.monotonic() + BLOCKING_SECONDS):
                    pass
        return apply_history_length(await self._task(user, ref), params.configuration)

    @validate_request_params
    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Task | TaskStatusUpdateEvent | TaskArtifactUpdateEvent]:
        user = _user(context)
        _check_history_length(params.configuration)
        with _errors():
            ref, status = await self._deliver(params, user)
        async for event in self._stream(user, ref, status):
            yield event

    async def _stream(
        self, user: User, ref: TaskRef, status: SessionStatus
    ) -> AsyncGenerator[Task | TaskStatusUpdateEvent | TaskArtifactUpdateEvent]:
        task = await self._task(user, ref)
        yield task
        if task.status.state in STOPS:
            return
        following = _Following(self.sessions_of(), ref, status)
        async for event in following.events(None):
            yield event

    @validate_request_params
    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Task | TaskStatusUpdateEvent | TaskArtifactUpdateEvent]:
        user, ref = _user(context), TaskRef.parse(params.id)
        with _errors():
            status = await self._status(user, ref)
        if task_of(status, ref.turn).status.state in TERMINAL:
            raise UnsupportedOperationError(message=f"task {ref.id} has ended; read it with GetTask")
        async for event in self._stream(user, ref, status):
            yield event

    @validate_request_params
    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        """Cancel the task's session (it ends `cancelled`); answers the task once it has."""
        user, ref = _user(context), TaskRef.parse(params.id)
        with _errors():
            status = await self._status(user, ref)
            if task_of(status, ref.turn).status.state in TERMINAL:
                raise TaskNotCancelableError(message=f"task {ref.id} has ended")
            reason = _metadata(params.metadata).get("reason")
            request = steering.cancel_request(user, reason if isinstance(reason, str) else None)
            await steering.act(
                self.sessions_of(), user, ref.session_id, AgentWorkflow.cancel_session, request
            )
            status = await control.status(self.sessions_of().client, ref.session_id)
            # Until it has ended: a session waiting for a decision needs input until its cancel lands.
            following = _Following(self.sessions_of(), ref, status, stops=TERMINAL)
            async for _ in following.events(time.monotonic() + CANCEL_SECONDS):
                pass
        return await self._task(user, ref)

    # ---- what this agent does not do -------------------------------------------------

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        raise PushNotificationNotSupportedError

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        raise PushNotificationNotSupportedError

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError


async def _unknown_state(request: Request) -> Response | None:
    """-32602 for a ListTasks whose `status` names no task state: the SDK parses unknown enum
    names as unset (forward compatibility), which would list every task instead."""
    try:
        body = await request.json()  # Starlette keeps it for the dispatcher
    except ValueError:
        return None
    params = body.get("params") if isinstance(body, dict) and body.get("method") == "ListTasks" else None
    state = params.get("status") if isinstance(params, dict) else None
    if not isinstance(state, str) or state in STATE_NAMES:
        return None
    request_id = body.get("id")
    return JSONResponse({
        "jsonrpc": "2.0", "id": request_id if isinstance(request_id, str | int) else None,
        "error": {"code": -32602, "message": f"unknown task state {state!r}"},
    })  # fmt: skip


def _busy(response: JSONResponse, retry_after: int) -> Response:
    """A JSON-RPC error answer for a read that did not get through in time: 503, Retry-After."""
    document = json.loads(bytes(response.body))
    error = document.get("error") if isinstance(document, dict) else None
    if not isinstance(error, dict):
        return response
    error["code"] = BUSY_CODE
    return JSONResponse(document, status_code=503, headers={"Retry-After": str(retry_after)})


def _position(sealed: bytes) -> int:
    """The offset a context's page token names (the token is ours: sealed, made for it)."""
    return int(sealed.decode())


def _check_history_length(params: GetTaskRequest | ListTasksRequest | SendMessageConfiguration) -> None:
    """`historyLength` counts messages: a negative one is invalid params (-32602)."""
    if params.HasField("history_length") and params.history_length < 0:
        raise InvalidParamsError(message=f"historyLength must be 0 or more, not {params.history_length}")


def _metadata(metadata: struct_pb2.Struct) -> dict[str, Any]:
    return MessageToDict(metadata) if metadata.fields else {}


def _attachments(files: list[Part]) -> list[dict[str, str]]:
    """A start's file parts (inline bytes) as `POST /v1/sessions`'s attachments; a file by
    URL is refused (nothing is downloaded)."""
    found: list[dict[str, str]] = []
    for n, part in enumerate(files, 1):
        name = part.filename or f"file-{n}"
        if part.HasField("url"):
            raise InvalidParamsError(message=f"file {name}: send the file's bytes, not a URL ({part.url})")
        if not part.media_type:
            raise InvalidParamsError(message=f"file {name}: give its mediaType")
        found.append(
            {"name": name, "media_type": part.media_type, "data": base64.b64encode(part.raw).decode()}
        )
    return found


# ---- the card and the routes -------------------------------------------------------------


def agent_card(agents: list[dict[str, Any]]) -> AgentCard:
    """The card: one skill per agent definition (`start_input.describe`'s), the bearer
    scheme, streaming, and the JSON-RPC endpoint at A2A 1.0 and 0.3 (its URL `at_url` sets)."""
    skills = [
        AgentSkill(
            id=a["name"], name=a["name"], tags=["agent", *(["default"] if a["default"] else [])],
            description=a["description"] or f"the {a['name']} agent ({a['model']})",
        )
        for a in agents
    ] or [AgentSkill(id="session", name="session", description="an agent session with the worker's tools", tags=["agent"])]  # fmt: skip
    return AgentCard(
        name="Agent sessions",
        description=(
            "Durable agent sessions (each one a Temporal workflow). A message starts a chat session "
            "(contextId = its id; metadata.agent picks the agent) or is a message to it (metadata.mode "
            "queue, steer or interrupt); each queued message is one task. A tool call waiting for approval "
            'makes the task input-required: reply with a data part {"approve": TOOL_USE_ID} or '
            '{"deny": TOOL_USE_ID, "reason": "..."}; a limit reached, with {"raise": {"name": ..., '
            '"value": N}} or {"decline": true}.'
        ),
        version=project.version(),
        supported_interfaces=[
            AgentInterface(url=PATH, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION_1_0),
            AgentInterface(url=PATH, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION_0_3),
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False, extended_agent_card=False),
        security_schemes={
            "bearer": SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="bearer", description="a token of the API's users (AGENT_API_USERS)"
                )
            )
        },
        security_requirements=[SecurityRequirement(schemes={"bearer": StringList()})],
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=skills,
    )


def at_url(card: AgentCard, base_url: str) -> AgentCard:
    """The card with its endpoint at `base_url` (the public URL, or where the caller reached the service)."""
    found = AgentCard()
    found.CopyFrom(card)
    for interface in found.supported_interfaces:
        interface.url = base_url.rstrip("/") + PATH
    return found


def card_for(version: str | None, card: AgentCard) -> dict[str, Any]:
    """The card as the asking client's protocol version defines it: 1.0's (interfaces in
    `supportedInterfaces`, a security scheme as one member) for a 1.x `A2A-Version`, 0.3's
    (`url`, `protocolVersion`, a scheme as `{type, ...}`) otherwise, no header meaning 0.3
    as the protocol says. One definition, either shape, never both."""
    if (version or PROTOCOL_VERSION_0_3).strip().split(".")[0] not in ("", "0"):
        return MessageToDict(card)
    legacy = to_compat_agent_card(card).model_dump(mode="json", by_alias=True, exclude_none=True)
    if not legacy.get("supportsAuthenticatedExtendedCard"):
        legacy.pop("supportsAuthenticatedExtendedCard", None)
    return legacy


def install(
    app: FastAPI, users: Users, sessions_of: Callable[[], Sessions], agents: list[dict[str, Any]]
) -> None:
    """The card (public) and the JSON-RPC endpoint (bearer token) on the API's app. The card
    is made here, once, from `agents` (the definitions read when the service started): a
    request reads no file, and the card cannot fail."""
    made = agent_card(agents)
    dispatcher = JsonRpcDispatcher(
        SessionTasks(sessions_of), context_builder=CallContext(), enable_v0_3_compat=True
    )

    async def rpc(request: Request) -> Response:
        try:
            request.scope[SCOPE_USER] = bearer_user(users, request.headers.get("authorization"))
        except AgentError as err:
            return error_response(401, "Unauthorized", str(err), {"WWW-Authenticate": "Bearer"})
        if (refused := await _unknown_state(request)) is not None:
            return refused
        busy: list[int] = []
        token = _BUSY.set(busy)
        try:
            response = await dispatcher.handle_requests(request)
        finally:
            _BUSY.reset(token)
        return _busy(response, busy[-1]) if busy and isinstance(response, JSONResponse) else response

    async def card(request: Request) -> Response:
        public_url = request.app.state.access.public_url
        found = at_url(made, public_url or str(request.base_url))
        # The version the client speaks: its A2A-Version header, or the request parameter of that name.
        version = request.headers.get(VERSION_HEADER) or request.query_params.get(VERSION_HEADER)
        return JSONResponse(card_for(version, found), headers={"Vary": VERSION_HEADER})

    app.router.routes.append(Route(PATH, rpc, methods=["POST"]))
    app.router.routes.append(Route(AGENT_CARD_WELL_KNOWN_PATH, card, methods=["GET"]))
