"""`python client.py`: start, follow and steer agent sessions.

Parse, call, print. Every user mistake (unknown session, Temporal unreachable, bad
arguments, a duplicate session id) is one line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from plumbing import render
from plumbing.connection import ConfigError, Unreachable, connect, task_queue
from workflows import search
from workflows.agent import AgentWorkflow
from workflows.pricing import PRICES, price_for
from workflows.types import (
    DEFAULT_MODEL,
    CancelRequest,
    Decision,
    Limits,
    SessionHistory,
    SessionInput,
    SessionStatus,
    UserMessage,
)

EXIT_NOT_COMPLETED = 2


class UserError(Exception):
    """A mistake the person can fix; printed as one line."""


def ui_url(session_id: str, namespace: str = "default") -> str:
    base = os.environ.get("TEMPORAL_UI_URL", "http://localhost:8233").rstrip("/")
    return f"{base}/namespaces/{namespace}/workflows/{session_id}"


# ---- arguments -------------------------------------------------------------------------


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be 1 or more")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return value


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        finish(1, err=f"error: {message} (see: python client.py {self.prog.split()[-1]} --help)")


def parser() -> argparse.ArgumentParser:
    root = Parser(prog="python client.py", description=__doc__.splitlines()[0])
    commands = root.add_subparsers(dest="command", required=True, parser_class=Parser)

    start = commands.add_parser("start", help="start a session with a goal")
    start.add_argument("goal", nargs="?", help="what the agent should do")
    start.add_argument("--goal-file", type=Path, help="read the goal from this file")
    start.add_argument("--session", help="session id (default: a new one)")
    start.add_argument("--system", help="system prompt")
    start.add_argument("--model", default=os.environ.get("AGENT_MODEL", DEFAULT_MODEL), help="model name")
    start.add_argument("--user", default=os.environ.get("AGENT_USER", "anonymous"), help="user the session acts for")
    start.add_argument("--max-steps", type=positive_int, help="most model calls (default 20)")
    start.add_argument("--token-budget", type=positive_int, help="most tokens, cache included")
    start.add_argument("--cost-budget", type=positive_float, help="most USD (needs prices for the model)")
    start.add_argument("--timeout", type=positive_float, help="wall-clock limit in seconds (default 3600)")
    start.add_argument("--max-tokens", type=positive_int, help="max_tokens per model call (default 4096)")
    start.add_argument("--model-timeout", type=positive_float, help="seconds one model call attempt may take (default 120)")
    start.add_argument("--tools", help="comma-separated tool names (default: all the worker has)")
    start.add_argument("--chat", action="store_true", help="keep the session open for more messages")
    start.add_argument("--idle-timeout", type=positive_float, help="a chat ends after this many idle seconds (default 86400)")
    start.add_argument("--context-tokens", type=positive_int, help="the model's context window (default 200000)")
    start.add_argument("--summarize-dropped", action="store_true", help="summarise what no longer fits the context")
    start.add_argument("--wait", action="store_true", help="wait for the end and print the answer")
    start.add_argument("--watch", action="store_true", help="follow the session live until it ends")

    for name, text in [("status", "the session's status"), ("history", "the conversation and trace")]:
        cmd = commands.add_parser(name, help=text)
        cmd.add_argument("session")
        cmd.add_argument("--json", action="store_true", help="print JSON")

    send = commands.add_parser("send", help="send a message to a chat session")
    send.add_argument("session")
    send.add_argument("text")
    commands.add_parser("close", help="end a chat session after the messages already sent").add_argument("session")

    approve = commands.add_parser("approve", help="approve a tool call that waits for approval")
    approve.add_argument("session")
    approve.add_argument("tool_use_id")
    deny = commands.add_parser("deny", help="deny a tool call; the model is told why")
    deny.add_argument("session")
    deny.add_argument("tool_use_id")
    deny.add_argument("--reason", help="why (the model sees it)")
    for name, text in [("pause", "pause between units of work"), ("resume", "resume a paused session")]:
        commands.add_parser(name, help=text).add_argument("session")
    cancel = commands.add_parser("cancel", help="cancel the session and its work in flight")
    cancel.add_argument("session")
    cancel.add_argument("--reason", help="why")

    export = commands.add_parser("export", help="write the Temporal event history as JSON (replayable)")
    export.add_argument("session")
    export.add_argument("file", type=Path, help="where to write it ('-' for standard output)")

    watch = commands.add_parser("watch", help="show what happened, then follow live until the end")
    watch.add_argument("session")
    watch.add_argument("--json", action="store_true", help="one JSON event per line")
    watch.add_argument("--no-prompt", action="store_true", help="never ask y/n for approvals")

    listing = commands.add_parser("list", help="sessions, newest first")
    listing.add_argument("--status", help="only sessions with this status (e.g. waiting_approval)")
    listing.add_argument("--user", help="only sessions of this user")
    listing.add_argument("--limit", type=positive_int, default=50)
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    return root


# ---- commands --------------------------------------------------------------------------


async def start(client: Client, args: argparse.Namespace) -> int:
    goal = read_goal(args)
    limits = {
        key: value
        for key, value in {
            "max_steps": args.max_steps,
            "token_budget": args.token_budget,
            "cost_budget_usd": args.cost_budget,
            "timeout_seconds": args.timeout,
            "max_tokens": args.max_tokens,
            "context_tokens": args.context_tokens,
            "model_timeout_seconds": args.model_timeout,
        }.items()
        if value is not None
    }
    price = price_for(args.model)
    if args.cost_budget is not None and price is None:
        raise UserError(
            f"no prices for model {args.model!r}, so a cost budget cannot be kept; "
            f"models with prices: {', '.join(sorted(PRICES))}"
        )
    try:
        session_input = SessionInput(
            goal=goal,
            user_id=args.user,
            model=args.model,
            limits=Limits(**limits),
            price=price,
            tools=[t.strip() for t in args.tools.split(",") if t.strip()] if args.tools else None,
            search_attributes=await has_search_attributes(client),
            chat=args.chat,
            summarize_dropped=args.summarize_dropped,
            **({"idle_timeout_seconds": args.idle_timeout} if args.idle_timeout is not None else {}),
            **({"system": args.system} if args.system is not None else {}),
        )
    except ValidationError as err:
        raise UserError(describe_validation(err)) from None
    session_id = args.session or f"session-{uuid.uuid4().hex[:12]}"
    try:
        handle = await client.start_workflow(
            AgentWorkflow.run,
            session_input,
            id=session_id,
            task_queue=task_queue(),
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            static_summary=render.shorten(goal, 200),
            static_details=render.session_details(session_input),
            search_attributes=initial_search_attributes(session_input),
        )
    except WorkflowAlreadyStartedError:
        raise UserError(
            f"session {session_id} already exists; follow it with: python client.py watch {session_id}"
        ) from None
    print(session_id, flush=True)
    if args.watch:
        return await render.watch(client, handle, ui_url(session_id, client.namespace))
    if args.wait:
        result: SessionStatus = await handle.result()
        render.print_status(result, ui_url(session_id, client.namespace))
        return 0 if result.status == "completed" else EXIT_NOT_COMPLETED
    return 0


def read_goal(args: argparse.Namespace) -> str:
    if args.goal_file is not None:
        if args.goal is not None:
            raise UserError("give the goal as an argument or with --goal-file, not both")
        try:
            return args.goal_file.read_text()
        except OSError as err:
            raise UserError(f"cannot read the goal file {args.goal_file}: {err.strerror}") from None
    if not args.goal:
        raise UserError("a goal is needed: python client.py start \"what to do\"")
    return args.goal


async def has_search_attributes(client: Client) -> bool:
    """Whether the namespace has every Agent* search attribute, with the right types."""
    try:
        response = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
    except RPCError:
        return False
    kinds = {**response.custom_attributes}
    wanted = {key.name: key.indexed_value_type for key in search.ALL}
    return all(kinds.get(name) == IndexedValueType.ValueType(kind) for name, kind in wanted.items())


def initial_search_attributes(session_input: SessionInput) -> TypedSearchAttributes | None:
    if not session_input.search_attributes:
        return None
    return TypedSearchAttributes(
        [
            SearchAttributePair(search.AGENT_STATUS, "running"),
            SearchAttributePair(search.AGENT_USER, session_input.user_id),
        ]
    )


async def status(client: Client, args: argparse.Namespace) -> int:
    snapshot = await query(session_handle(client, args.session), "status", SessionStatus)
    if args.json:
        print(snapshot.model_dump_json(indent=2))
    else:
        render.print_status(snapshot, ui_url(args.session, client.namespace))
    return 0


async def history(client: Client, args: argparse.Namespace) -> int:
    found = await query(session_handle(client, args.session), "history", SessionHistory)
    if args.json:
        print(json.dumps(history_document(found), indent=2, ensure_ascii=False))
    else:
        render.print_history(found)
    return 0


def history_document(found: SessionHistory) -> dict[str, Any]:
    """The history as JSON: each trace turn also carries its tool calls, with `error` spelled out."""
    document = found.model_dump(mode="json")
    calls = {call["tool_use_id"]: call for call in document["tool_calls"]}
    for call in calls.values():
        call["error"] = call["output"] if call["is_error"] else None
    for turn in document["trace"]:
        turn["tool_calls"] = [calls[i] for i in turn["tool_use_ids"] if i in calls]
    return document


async def export(client: Client, args: argparse.Namespace) -> int:
    """The workflow's event history in Temporal's JSON format (`WorkflowHistory.from_json`, replayers)."""
    handle = session_handle(client, args.session)
    await describe(handle)
    found = await handle.fetch_history()
    text = found.to_json()
    if str(args.file) == "-":
        print(text)
        return 0
    try:
        args.file.write_text(text)
    except OSError as err:
        raise UserError(f"cannot write {args.file}: {err.strerror}") from None
    print(f"wrote {len(found.events)} events of session {args.session} to {args.file}", file=sys.stderr)
    return 0


async def decide(client: Client, args: argparse.Namespace) -> int:
    handle = session_handle(client, args.session)
    try:
        decision = Decision(tool_use_id=args.tool_use_id, reason=getattr(args, "reason", None))
    except ValidationError as err:
        raise UserError(describe_validation(err)) from None
    if args.command == "approve":
        answer = await update(handle, "approve_call", decision)
    else:
        answer = await update(handle, "deny_call", decision)
    print(answer)
    return 0


async def send(client: Client, args: argparse.Namespace) -> int:
    try:
        message = UserMessage(text=args.text)
    except ValidationError as err:
        raise UserError(describe_validation(err)) from None
    position = await update(session_handle(client, args.session), "send_message", message, result_type=int)
    print(f"message {position} queued for {args.session}")
    return 0


async def close(client: Client, args: argparse.Namespace) -> int:
    print(await update(session_handle(client, args.session), "close_session"))
    return 0


async def control(client: Client, args: argparse.Namespace) -> int:
    handle = session_handle(client, args.session)
    if args.command == "cancel":
        print(await update(handle, "cancel_session", CancelRequest(reason=args.reason)))
    else:
        print(await update(handle, f"{args.command}_session"))
    return 0


async def watch(client: Client, args: argparse.Namespace) -> int:
    handle = session_handle(client, args.session)
    await describe(handle)
    return await render.watch(
        client, handle, ui_url(args.session, client.namespace), as_json=args.json, prompt=not args.no_prompt
    )


async def list_sessions(client: Client, args: argparse.Namespace) -> int:
    clauses = ["WorkflowType = 'AgentWorkflow'"]
    for key, value in (("AgentStatus", args.status), ("AgentUser", args.user)):
        if value is not None:
            if not await has_search_attributes(client):
                raise UserError(
                    "filtering needs the Agent* search attributes on this namespace; see the README"
                )
            clauses.append(f"{key} = {json.dumps(value)}")
    rows = []
    async for execution in client.list_workflows(" AND ".join(clauses), limit=args.limit):
        attrs = execution.typed_search_attributes
        rows.append(
            {
                "session_id": execution.id,
                "status": attrs.get(search.AGENT_STATUS)
                or (execution.status.name.lower() if execution.status else None),
                "steps": attrs.get(search.AGENT_STEPS),
                "tokens": attrs.get(search.AGENT_TOKENS),
                "pending_approvals": attrs.get(search.AGENT_PENDING_APPROVALS),
                "user": attrs.get(search.AGENT_USER),
                "started": execution.start_time.isoformat() if execution.start_time else None,
            }
        )
    render.print_sessions(rows, as_json=args.json)
    return 0


# ---- Temporal calls with errors a person can read ----------------------------------------


def session_handle(client: Client, session_id: str) -> WorkflowHandle:
    return client.get_workflow_handle(session_id)


async def describe(handle: WorkflowHandle) -> Any:
    try:
        return await handle.describe()
    except RPCError as err:
        raise not_found(err, handle.id) from None


def not_found(err: RPCError, session_id: str) -> Exception:
    if err.status == RPCStatusCode.NOT_FOUND:
        return UserError(f"no session {session_id!r}; list sessions with: python client.py list")
    return err


async def query(handle: WorkflowHandle, name: str, result_type: type) -> Any:
    try:
        return await handle.query(name, result_type=result_type, rpc_timeout=timedelta(seconds=20))
    except RPCError as err:
        if err.status == RPCStatusCode.DEADLINE_EXCEEDED:
            raise UserError(
                f"no worker answered for session {handle.id}; start one with: python worker.py"
            ) from None
        raise not_found(err, handle.id) from None
    except WorkflowQueryFailedError as err:
        raise UserError(f"session {handle.id} could not answer: {err}") from None


async def update(handle: WorkflowHandle, name: str, *args: Any, result_type: type = str) -> Any:
    try:
        return await handle.execute_update(name, *args, result_type=result_type)
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        message = cause.message if isinstance(cause, ApplicationError) else str(cause or err)
        raise UserError(f"rejected: {message}") from None
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            described = await describe(handle)
            if described.status != WorkflowExecutionStatus.RUNNING:
                raise UserError(
                    f"session {handle.id} has ended ({described.status.name.lower()}); "
                    f"see: python client.py status {handle.id}"
                ) from None
        raise not_found(err, handle.id) from None


def describe_validation(err: ValidationError) -> str:
    issue = err.errors()[0]
    where = ".".join(str(p) for p in issue["loc"])
    return f"invalid {where or 'input'}: {issue['msg']}"


# ---- the edge ----------------------------------------------------------------------------

COMMANDS = {
    "start": start,
    "status": status,
    "history": history,
    "approve": decide,
    "deny": decide,
    "pause": control,
    "resume": control,
    "cancel": control,
    "watch": watch,
    "send": send,
    "close": close,
    "export": export,
    "list": list_sessions,
}


async def run(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        client = await connect()
    except Unreachable as err:
        raise UserError(f"{err} (start it with: python devserver.py, or set TEMPORAL_ADDRESS)") from None
    except ConfigError as err:
        raise UserError(str(err)) from None
    return await COMMANDS[args.command](client, args)


def finish(code: int, err: str | None = None) -> NoReturn:
    """Flush and leave without the SDK's interpreter-exit shutdown (it can abort the process)."""
    if err:
        print(err, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> NoReturn:
    try:
        code = asyncio.run(run(sys.argv[1:]))
    except UserError as err:
        finish(1, err=f"error: {err}")
    except KeyboardInterrupt:
        finish(130)
    except RPCError as err:
        finish(1, err=f"error: Temporal answered: {err.message}")
    finish(code)


if __name__ == "__main__":
    main()
