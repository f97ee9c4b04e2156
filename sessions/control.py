"""Sessions as the entry points see them: start, read, steer and list, with Temporal's
failures turned into the project's errors (`infra.errors`).

The command line and the HTTP service both go through here, so a rule (what "stuck"
means, which refusal is a conflict and which a bad input) is written once. Workflow
handlers are named by their typed references (`AgentWorkflow.status`), never by string.
"""

from __future__ import annotations

import getpass
import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from infra.errors import (
    Busy,
    InvalidInput,
    NoWorker,
    Rejected,
    SessionEnded,
    SessionExists,
    SessionNotFound,
)
from sessions import reading, text
from sessions.archive import whole_history
from sessions.replays import CannotReplay
from workflows import ids, search
from workflows.agent import AgentWorkflow
from workflows.contract import (
    FINAL_STATUSES,
    INVALID_TOOL_INPUT,
    SessionHistory,
    SessionInput,
    SessionStatus,
    StuckTask,
)
from workflows.notify import NotifyResult
from workflows.state import SessionState

log = logging.getLogger("sessions.control")

QUERY_TIMEOUT = timedelta(seconds=20)
# A stuck session may not answer queries at all: ask briefly, then build the status
# from its start input.
STUCK_QUERY_TIMEOUT = timedelta(seconds=3)
# What each query the entry points read answers.
QUERY_TYPES: dict[str, type] = {"status": SessionStatus, "history": SessionHistory, "state": SessionState}
SESSION_WORKFLOW = "AgentWorkflow"  # the workflow type of every session (workflows/agent.py)


def cli_user() -> str:
    """Who decides from this terminal: `cli:<login name>`."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no login name in this environment
        return "cli:unknown"


def handle(client: Client, session_id: str) -> WorkflowHandle:
    return client.get_workflow_handle(session_id)


# ---- start -------------------------------------------------------------------------------


async def start(
    client: Client,
    session_input: SessionInput,
    session_id: str,
    *,
    task_queue: str,
    system_id: bool = False,
) -> WorkflowHandle:
    """Start a session, named in the Temporal UI by its goal and settings (`sessions.text`);
    `SessionExists` when the id is taken, whoever took it (ids are never reused). An id of
    the shape the system makes (`workflows.ids`: sub-agents, notifications, forks, memories,
    scheduled runs) is `InvalidInput` unless the system made it (`system_id`, a fork's
    default id): a sub-agent or a notification never finds its id taken."""
    if not system_id:
        refuse_reserved(session_id)
    try:
        return await client.start_workflow(
            AgentWorkflow.run,
            session_input,
            id=session_id,
            task_queue=task_queue,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            static_summary=text.summary(session_input),
            static_details=text.details(session_input),
            search_attributes=initial_search_attributes(session_input),
        )
    except WorkflowAlreadyStartedError:
        raise SessionExists(session_id) from None


def refuse_reserved(session_id: str) -> None:
    """`InvalidInput` for an id of a shape the system makes for its own sessions."""
    if (reserved := ids.reserved_for(session_id)) is not None:
        raise InvalidInput(f"session id {session_id!r} has the shape reserved for {reserved}")


async def check_id(client: Client, session_id: str) -> None:
    """Before anything is stored for a start: `SessionExists` when a workflow has the id
    (ids are never reused), `InvalidInput` for one of the shapes the system makes. Two starts
    racing for one id may both pass; `start` still lets only one of them have it."""
    refuse_reserved(session_id)
    try:
        await handle(client, session_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return
        raise
    raise SessionExists(session_id)


async def has_search_attributes(client: Client) -> bool:
    """Whether the namespace has every Agent* search attribute, with the right types."""
    try:  # tried again while Temporal is slow, so a loaded server does not read as "none"
        response = await reading.patiently(
            lambda: client.operator_service.list_search_attributes(
                ListSearchAttributesRequest(namespace=client.namespace)
            ),
            "Temporal's search attributes",
        )
    except (RPCError, Busy):
        return False
    kinds = {**response.custom_attributes}
    wanted = {key.name: key.indexed_value_type for key in search.ALL}
    return all(kinds.get(name) == IndexedValueType.ValueType(kind) for name, kind in wanted.items())


def initial_search_attributes(session_input: SessionInput) -> TypedSearchAttributes | None:
    if not session_input.search_attributes:
        return None
    # Every attribute the workflow indexes, as its first run starts: it upserts only changes.
    return TypedSearchAttributes(
        [
            SearchAttributePair(search.AGENT_STATUS, "running"),
            SearchAttributePair(search.AGENT_STEPS, 0),
            SearchAttributePair(search.AGENT_TOKENS, 0),
            SearchAttributePair(search.AGENT_PENDING_APPROVALS, 0),
            SearchAttributePair(search.AGENT_USER, session_input.user_id),
        ]
    )


# ---- read --------------------------------------------------------------------------------


async def describe(h: WorkflowHandle) -> Any:
    """The session's description; `SessionNotFound` when there is no workflow with its id,
    or the workflow is not a session (a notification's, a workflow of another program)."""
    try:
        described = await h.describe()
    except RPCError as err:
        raise _not_found(err, h.id) from None
    if described.workflow_type != SESSION_WORKFLOW:
        raise SessionNotFound(h.id)
    return described


async def status(client: Client, session_id: str) -> SessionStatus:
    """The session's status, read from its history (sessions/reading.py: no billable
    action); `stuck` (with the failing task's message) when its workflow task keeps
    failing. A session that has closed with a result answers with it: the final status its
    worker computed, with the refusals no replay sees (workflows/metering.py)."""
    h = handle(client, session_id)

    async def attempt() -> SessionStatus:
        return await status_of(client, h, await describe(h))

    return await reading.patiently(attempt, f"session {session_id}")


async def status_of(
    client: Client, h: WorkflowHandle, described: Any, *, ask_worker: bool = True
) -> SessionStatus:
    """`status`, for a session described as `described`. Without `ask_worker`, a session this
    process cannot replay raises `CannotReplay` instead of costing a query, and one whose
    first workflow task has not completed is not waited for."""
    if (ended := await closed_status(client, h.id, described)) is not None:
        return await with_notifications(client, ended)
    stuck = await stuck_task(client, h, described)
    if stuck is None:
        snapshot = await read(
            client, h, AgentWorkflow.status, described, wait=ask_worker, ask_worker=ask_worker
        )
        return await with_notifications(client, snapshot)
    try:  # as its last completed task left it; a failing task may not answer queries either
        snapshot = await read(
            client, h, AgentWorkflow.status, described, wait=False, ask_worker=ask_worker, timeout=STUCK_QUERY_TIMEOUT
        )  # fmt: skip
    except (NoWorker, Rejected, RPCError, CannotReplay):
        snapshot = await _status_from_start(client, h)
    return snapshot.model_copy(update={"status": "stuck", "stuck": stuck})


async def read(
    client: Client,
    h: WorkflowHandle,
    method: Callable[..., Any],
    described: Any = None,
    *,
    wait: bool = True,
    ask_worker: bool = True,
    timeout: timedelta = QUERY_TIMEOUT,
) -> Any:
    """What the session's query `method` answers, from its replay here (no billable action);
    asked of its worker (a query) only when this process cannot replay it and `ask_worker`.
    `wait`: for the run's first workflow task, when none has completed."""
    described = described if described is not None else await describe(h)
    try:
        return await reading.read(
            client, h.id, method, QUERY_TYPES[method.__name__],
            run_id=described.run_id, history_length=described.history_length, wait=wait,
        )  # fmt: skip
    except CannotReplay as why:
        if not ask_worker:
            raise
        log.info("session %s: asking its worker: %s", h.id, why)
    return await query(h, method, timeout=timeout)


async def state(client: Client, session_id: str) -> SessionState:
    """Everything the session knows but its event stream, as its `state` query answers it."""
    return await read(client, handle(client, session_id), AgentWorkflow.state)


async def with_notifications(client: Client, snapshot: SessionStatus) -> SessionStatus:
    """A closed session's status with the outcomes of its notifications that were still
    delivering when it closed (the `ended` one at least), read from their own workflows:
    a closed session takes no more signals (workflows/notify.py)."""
    counts = snapshot.notifications
    if snapshot.status not in FINAL_STATUSES or not counts.pending:
        return snapshot
    counts, actions = counts.model_copy(deep=True), snapshot.temporal_actions
    for key in list(counts.pending):
        notification = client.get_workflow_handle(key, result_type=NotifyResult)
        try:
            if (await notification.describe()).status != WorkflowExecutionStatus.COMPLETED:
                continue
            outcome: NotifyResult = await notification.result()
        except (RPCError, WorkflowFailureError):
            continue
        counts.pending.remove(key)
        counts.delivered += outcome.delivered
        counts.failed += outcome.failed
        actions += outcome.actions
    return snapshot.model_copy(update={"notifications": counts, "temporal_actions": actions})


async def history(client: Client, session_id: str) -> SessionHistory:
    """The whole history: the running run's part joined with what earlier runs stored. A
    session that has closed with a result takes its status and `temporal_actions` from the
    result, as `status` does (a replay does not see the refusals its worker counted)."""
    h = handle(client, session_id)

    async def attempt() -> SessionHistory:
        described = await describe(h)
        found = await whole_history(await read(client, h, AgentWorkflow.history, described))
        ended = await closed_status(client, h.id, described)
        if ended is None:
            return found
        ended = await with_notifications(client, ended)
        return found.model_copy(update={"status": ended, "temporal_actions": ended.temporal_actions})

    return await reading.patiently(attempt, f"session {session_id}")


async def closed_status(client: Client, session_id: str, described: Any) -> SessionStatus | None:
    """The final status of the session's latest run, read from its last event when it has
    completed with one (every way a session ends but a terminate or a timeout of the whole
    workflow); None while it runs or when it ended otherwise."""
    if described.status != WorkflowExecutionStatus.COMPLETED:
        return None
    last = await _last_event(client, session_id, described.run_id)
    if last is None or last.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
        return None
    payloads = last.workflow_execution_completed_event_attributes.result.payloads
    [ended] = await client.data_converter.decode(payloads, [SessionStatus])
    return ended


async def _last_event(client: Client, session_id: str, run_id: str) -> Any:
    response = await client.workflow_service.get_workflow_execution_history_reverse(
        GetWorkflowExecutionHistoryReverseRequest(
            namespace=client.namespace,
            execution=WorkflowExecution(workflow_id=session_id, run_id=run_id),
            maximum_page_size=1,
        )
    )
    return response.history.events[0] if response.history.events else None


def history_document(found: SessionHistory) -> dict[str, Any]:
    """The history as JSON: each trace turn also carries its tool calls, with `error` spelled out."""
    document = found.model_dump(mode="json")
    calls = {call["tool_use_id"]: call for call in document["tool_calls"]}
    for call in calls.values():
        call["error"] = call["output"] if call["is_error"] else None
    for turn in document["trace"]:
        turn["tool_calls"] = [calls[i] for i in turn["tool_use_ids"] if i in calls]
    return document


async def query(h: WorkflowHandle, method: Callable[..., Any], *, timeout: timedelta = QUERY_TIMEOUT) -> Any:
    try:
        return await h.query(method, rpc_timeout=timeout)
    except RPCError as err:
        if err.status == RPCStatusCode.DEADLINE_EXCEEDED:
            raise NoWorker(
                f"no worker answered for session {h.id}; start one with: python worker.py"
            ) from None
        raise _not_found(err, h.id) from None
    except WorkflowQueryFailedError as err:
        raise Rejected(f"session {h.id} could not answer: {err}") from None


async def stuck_task(client: Client, h: WorkflowHandle, described: Any = None) -> StuckTask | None:
    """The failing workflow task of a running session, read from its last WorkflowTaskFailed
    event; None when its tasks complete. `described`: the session's description, if read."""
    described = described if described is not None else await describe(h)
    if described.status != WorkflowExecutionStatus.RUNNING:
        return None
    pending = described.raw_description.pending_workflow_task
    if not pending.attempt or pending.attempt < 2:
        return None
    response = await client.workflow_service.get_workflow_execution_history_reverse(
        GetWorkflowExecutionHistoryReverseRequest(
            namespace=client.namespace,
            execution=WorkflowExecution(workflow_id=h.id, run_id=described.run_id),
            maximum_page_size=100,
        )
    )
    for event in response.history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            failure = event.workflow_task_failed_event_attributes.failure
            return StuckTask(
                message=_first_line(failure.message) or "the workflow task failed",
                since=event.event_time.ToDatetime().replace(tzinfo=UTC),
                attempts=pending.attempt,
            )
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            break
    return None


async def start_input(client: Client, h: WorkflowHandle) -> tuple[SessionInput, datetime]:
    """The input the session's latest run started with, and when; `SessionNotFound` when
    the workflow is not a session (its type is not AgentWorkflow)."""
    try:
        async for event in h.fetch_history_events():
            attributes = event.workflow_execution_started_event_attributes
            if attributes.workflow_type.name != SESSION_WORKFLOW:
                raise SessionNotFound(h.id)
            [started] = await client.data_converter.decode(attributes.input.payloads, [SessionInput])
            return started, event.event_time.ToDatetime().replace(tzinfo=UTC)
    except RPCError as err:
        raise _not_found(err, h.id) from None
    raise SessionNotFound(h.id)


async def _status_from_start(client: Client, h: WorkflowHandle) -> SessionStatus:
    """What is known of a session that cannot answer: its start input."""
    started, at = await start_input(client, h)
    return SessionStatus(
        session_id=h.id, status="running", model=started.model, user_id=started.user_id, limits=started.limits,
        chat=started.chat, started_at=at, updated_at=at, agent=started.agent.name if started.agent else None,
    )  # fmt: skip


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:500] if text.strip() else ""


# ---- steer -------------------------------------------------------------------------------


async def act(client: Client, session_id: str, update: Callable[..., Any], *args: Any) -> Any:
    """Run one of the session's control updates; `Rejected` (or `InvalidInput`) with the
    session's reason when it refuses, `SessionEnded` when it has ended."""
    h = handle(client, session_id)
    # One id for every attempt: Temporal runs an update id once, so a retry after a transient
    # answer (a workflow task that failed under load, a timeout) gets the first one's result.
    update_id = uuid.uuid4().hex
    try:
        return await reading.patiently(
            # Any of the session's updates: the SDK's overloads type one update method at a time.
            lambda: h.execute_update(update, *args, id=update_id),  # pyright: ignore[reportCallIssue, reportArgumentType, reportUnknownLambdaType]
            f"session {session_id}",
        )
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        message = cause.message if isinstance(cause, ApplicationError) else str(cause or err)
        if isinstance(cause, ApplicationError) and cause.type == INVALID_TOOL_INPUT:
            raise InvalidInput(message) from None
        raise Rejected(message) from None
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            described = await describe(h)
            if described.status != WorkflowExecutionStatus.RUNNING:
                raise SessionEnded(
                    f"session {h.id} has ended ({described.status.name.lower()}); "
                    f"see: python client.py status {h.id}"
                ) from None
        raise _not_found(err, h.id) from None


async def owner_of_call(client: Client, session_id: str, tool_use_id: str) -> str:
    """The session a pending call belongs to: this one or one of its sub-agents (their
    pending calls show in the parent's status). Unknown calls go to `session_id`, whose
    validator says why."""
    return (await owners_of_calls(client, session_id)).get(tool_use_id) or session_id


async def owners_of_calls(client: Client, session_id: str) -> dict[str, str]:
    """The session each pending call of this one (or of its sub-agents) belongs to, from one
    read of its status; empty when it cannot be read (each call then goes to `session_id`)."""
    try:
        snapshot = await read(client, handle(client, session_id), AgentWorkflow.status)
    except (NoWorker, Rejected, SessionNotFound, RPCError):
        return {}
    return {p.tool_use_id: p.session_id for p in reversed(snapshot.pending_approvals) if p.session_id}


def _not_found(err: RPCError, session_id: str) -> Exception:
    if err.status == RPCStatusCode.NOT_FOUND:
        return SessionNotFound(session_id)
    return err
