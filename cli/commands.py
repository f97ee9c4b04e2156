"""What each `client.py` command does: call `sessions.control` (or the schedules, the
watch, the fork) and print. `client.py` holds the arguments, the one-line errors and the
exit codes, and imports this module only once the arguments are read.

Each command takes the Temporal client (None for `agents`, which needs none) and the
parsed arguments, and returns the exit code. A mistake the person can fix is a
`BadRequest` with one line of text.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from pydantic import ValidationError

from cli import render
from infra.connection import connect, task_queue
from infra.errors import AgentError, BadRequest, Rejected, SessionExists, Unreachable
from sessions import control
from workflows import ids
from workflows.agent import AgentWorkflow
from workflows.contract import (
    CancelRequest,
    Decision,
    EventInput,
    LimitDecline,
    LimitName,
    LimitRaise,
    SessionInput,
    SessionStatus,
    UserMessage,
)

if TYPE_CHECKING:
    from temporalio.client import Client, WorkflowHandle

    from sessions.batch import Outcome
    from sessions.start_input import NewAttachment

EXIT_NOT_COMPLETED = 2
UserError = BadRequest  # a mistake the person can fix; printed as one line


def ui_url(session_id: str, namespace: str = "default") -> str:
    base = os.environ.get("TEMPORAL_UI_URL", "http://localhost:8233").rstrip("/")
    return f"{base}/namespaces/{namespace}/workflows/{session_id}"


# What only some commands use is imported by them: a command that needs the client alone
# (status, approve, cancel, list, ...) loads no follower, start-input checks or schedules.


async def follow(client: Client, handle: WorkflowHandle, url: str, **options: Any) -> int:
    """`watch`: what happened, then live until the end (cli/watch.py)."""
    from cli.watch import watch

    return await watch(client, handle, url, **options)


async def start(client: Client, args: argparse.Namespace) -> int:
    session_input = await with_search_attributes(client, args.session_input)
    session_id = args.session or f"session-{uuid.uuid4().hex[:12]}"
    try:
        handle = await control.start(client, session_input, session_id, task_queue=task_queue())
    except SessionExists:
        raise UserError(
            f"session {session_id} already exists; follow it with: python client.py watch {session_id}"
        ) from None
    print(session_id, flush=True)
    if args.watch:
        return await follow(client, handle, ui_url(session_id, client.namespace))
    if args.wait:
        result: SessionStatus = await handle.result()
        render.print_status(result, ui_url(session_id, client.namespace))
        return 0 if result.status == "completed" else EXIT_NOT_COMPLETED
    return 0


async def with_search_attributes(client: Client, session_input: SessionInput) -> SessionInput:
    """The start input, told whether the server has the project's search attributes."""
    return session_input.model_copy(update={"search_attributes": await control.has_search_attributes(client)})


def resolve_start(args: argparse.Namespace) -> SessionInput:
    """The start input from `start`'s (or `schedule create`'s) arguments (`sessions.start_input`),
    before connecting: a mistake in them is reported whether or not Temporal can be reached."""
    from sessions import start_input

    goal = read_goal(args)
    limits = start_input.limits_of(args)
    fields = {
        "user_id": args.user,
        "model": args.model,
        "fallback_models": args.fallback_models,
        "system": args.system,
        "tools": [t.strip() for t in args.tools.split(",") if t.strip()] if args.tools else None,
        "chat": args.chat or None,
        "summarize_dropped": args.summarize_dropped or None,
        "idle_timeout_seconds": args.idle_timeout,
        "notify": args.notify,
        "on_limit": args.on_limit,
    }
    if args.output_schema is not None:
        fields["output_schema"] = start_input.read_schema_file(args.output_schema)
    attachments = [read_attachment(path) for path in args.attach or []]
    settings = {
        "thinking_budget": args.thinking_budget,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "stop_sequences": args.stop_sequences,
        "tool_choice": args.tool_choice,
    }
    try:
        return start_input.resolve(
            goal=goal,
            agent=args.agent,
            limits=limits,
            fields=fields,
            attachments=attachments,
            settings=settings,
        )
    except ValidationError as err:
        raise UserError(describe_validation(err)) from None


async def list_agents(client: Client | None, args: argparse.Namespace) -> int:
    from sessions import start_input

    render.print_agents(start_input.describe(start_input.read_definitions()), as_json=args.json)
    return 0


def read_attachment(path: Path) -> NewAttachment:
    from sessions import start_input

    try:
        return start_input.NewAttachment(name=path.name, data=path.read_bytes())
    except OSError as err:
        raise UserError(f"cannot read the attachment {path}: {err.strerror}") from None


def read_goal(args: argparse.Namespace) -> str:
    if args.goal_file is not None:
        if args.goal is not None:
            raise UserError("give the goal as an argument or with --goal-file, not both")
        try:
            return args.goal_file.read_text()
        except OSError as err:
            raise UserError(f"cannot read the goal file {args.goal_file}: {err.strerror}") from None
    if not args.goal:
        raise UserError('a goal is needed: python client.py start "what to do"')
    return args.goal


async def status(client: Client, args: argparse.Namespace) -> int:
    snapshot = await control.status(client, args.session)
    if args.json:
        print(snapshot.model_dump_json(indent=2))
    else:
        render.print_status(snapshot, ui_url(args.session, client.namespace))
    return 0


async def history(client: Client, args: argparse.Namespace) -> int:
    found = await control.history(client, args.session)
    if args.json:
        print(json.dumps(control.history_document(found), indent=2, ensure_ascii=False))
    else:
        render.print_history(found)
    return 0


async def export(client: Client, args: argparse.Namespace) -> int:
    """The workflow's event history in Temporal's JSON format (`WorkflowHistory.from_json`, replayers)."""
    handle = control.handle(client, args.session)
    await control.describe(handle)
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


class Deciders(TypedDict):
    decided_by: str
    on_behalf_of: str | None


def deciders(args: argparse.Namespace) -> Deciders:
    """Who decides: always `cli:<login name>`, who ran the command; `--as USER` is whom for."""
    return {"decided_by": control.cli_user(), "on_behalf_of": args.on_behalf_of}


async def decide(client: Client, args: argparse.Namespace) -> int:
    """approve or deny one call, or several of the session's (each with its own line)."""
    approving = args.command == "approve"
    try:
        if approving:
            decisions = {
                i: Decision(tool_use_id=i, input=args.input, **deciders(args)) for i in args.tool_use_id
            }
        else:
            decisions = {
                i: Decision(tool_use_id=i, reason=args.reason, **deciders(args)) for i in args.tool_use_id
            }
    except ValidationError as err:
        raise UserError(describe_validation(err)) from None
    update = AgentWorkflow.approve_call if approving else AgentWorkflow.deny_call
    if len(args.tool_use_id) == 1:
        [decision] = decisions.values()
        owner = await control.owner_of_call(client, args.session, decision.tool_use_id)
        print(await control.act(client, owner, update, decision))
        return 0
    from sessions import batch

    owners = await control.owners_of_calls(client, args.session)  # one read for every call

    async def one(call: str) -> Any:
        return await control.act(client, owners.get(call) or args.session, update, decisions[call])

    return report(await batch.each(decisions, one))


async def fork(client: Client, args: argparse.Namespace) -> int:
    from sessions import start_input
    from sessions.archive import whole_state
    from sessions.fork import forked_input
    from sessions.pricing import price_for

    source = control.handle(client, args.session)
    state = await whole_state(args.session, await control.state(client, args.session))
    started, _ = await control.start_input(client, source)
    if args.model is not None:
        start_input.check_model(args.model)
        start_input.check_attachments_for(args.model, [(a.name, a.media_type) for a in started.attachments])
        if started.model_settings is not None:  # what the source runs with, against the new model
            start_input.check_settings(started.model_settings, args.model, started.limits.max_tokens)
        fallbacks = [m for m in started.fallback_models if m != args.model]  # a model is never its own
        started = started.model_copy(
            update={"model": args.model, "price": price_for(args.model), "fallback_models": fallbacks}
        )
    session_input = forked_input(started, args.session, state, args.at_step, args.message)
    session_id = args.new_session or ids.fork(args.session, uuid.uuid4().hex[:6])
    try:
        handle = await control.start(
            client, session_input, session_id, task_queue=task_queue(), system_id=not args.new_session
        )
    except SessionExists:
        raise UserError(f"session {session_id} already exists") from None
    print(session_id, flush=True)
    if args.watch:
        return await follow(client, handle, ui_url(session_id, client.namespace))
    return 0


async def schedule(client: Client, args: argparse.Namespace) -> int:
    from sessions import schedules, text

    if args.schedule_command == "create":
        session_input = await with_search_attributes(client, args.session_input)
        every = args.every_delta
        await schedules.create(
            client, args.name, session_input, task_queue=task_queue(), cron=args.cron, every=every,
            summary=text.summary(session_input),
        )  # fmt: skip
        print(f"created schedule {args.name}")
    elif args.schedule_command == "list":
        render.print_schedules(await schedules.listing(client), as_json=args.json)
    else:
        print(await schedules.act(client, args.name, args.schedule_command))
    return 0


async def send(client: Client, args: argparse.Namespace) -> int:
    try:
        message = UserMessage(text=args.text, mode=args.mode)
    except ValidationError as err:
        raise UserError(describe_validation(err)) from None
    message_id = await control.act(client, args.session, AgentWorkflow.send_message, message)
    if args.mode == "interrupt":
        print(
            f"message {message_id} sent to {args.session}: the work in flight is cut short, then the model gets it"
        )
    elif args.mode == "steer" or (
        args.mode is None and not (await control.status(client, args.session)).chat
    ):
        print(f"message {message_id} sent to {args.session}: the model gets it at its next call")
    else:
        print(f"message {message_id} queued for {args.session}")
    return 0


async def event(client: Client, args: argparse.Namespace) -> int:
    try:
        payload = EventInput(name=args.name, data=args.data)
    except ValidationError as err:
        raise UserError(describe_validation(err)) from None
    print(await control.act(client, args.session, AgentWorkflow.send_event, payload))
    return 0


async def close(client: Client, args: argparse.Namespace) -> int:
    print(await control.act(client, args.session, AgentWorkflow.close_session))
    return 0


async def steer(client: Client, args: argparse.Namespace) -> int:
    """pause, resume or cancel: one session, several, or those `--query` matches."""
    payload: tuple[Any, ...] = ()
    if args.command == "cancel":
        try:
            payload = (CancelRequest(reason=args.reason, **deciders(args)),)
        except ValidationError as err:
            raise UserError(describe_validation(err)) from None
        update = AgentWorkflow.cancel_session
    elif args.command == "pause":
        update = AgentWorkflow.pause_session
    else:
        update = AgentWorkflow.resume_session
    if args.query is None and len(args.session) == 1:
        print(await control.act(client, args.session[0], update, *payload))
        return 0
    from sessions import batch

    ids = await batch.matching(client, args.query) if args.query is not None else args.session
    if not ids:
        print("no session matches the query", file=sys.stderr)
        return 0
    return report(await batch.each(ids, lambda session_id: control.act(client, session_id, update, *payload)))


def report(outcomes: list[Outcome]) -> int:
    """One line per id, in the order given (`ID: outcome`, or `ID: error: why`); 1 if any failed."""
    for outcome in outcomes:
        if outcome.ok:
            print(f"{outcome.id}: {outcome.text}")
        else:
            print(f"{outcome.id}: error: {failure(outcome.error)}")
    failed = sum(not outcome.ok for outcome in outcomes)
    if failed:
        print(f"error: {failed} of {len(outcomes)} failed", file=sys.stderr)
    return 1 if failed else 0


def failure(err: Exception | None) -> str:
    """One id's failure as one line, worded as the single command's error."""
    from temporalio.service import RPCError

    if isinstance(err, Rejected):
        return f"rejected: {err}"
    if isinstance(err, RPCError):
        return f"Temporal answered: {err.message}"
    if isinstance(err, AgentError):
        return str(err)
    return f"{type(err).__name__}: {err}".splitlines()[0]


async def raise_limit(client: Client, args: argparse.Namespace) -> int:
    """A new limit (`--max-steps`, `--token-budget`, `--cost-budget`), or `--decline`."""
    try:
        if args.decline:
            decline = LimitDecline(reason=args.reason, **deciders(args))
            print(await control.act(client, args.session, AgentWorkflow.decline_limit, decline))
            return 0
        if args.reason is not None:
            raise UserError("--reason goes with --decline")
        given: list[tuple[LimitName, float | None]] = [
            ("max_steps", args.max_steps), ("token_budget", args.token_budget), ("cost_budget", args.cost_budget)
        ]  # fmt: skip
        name, value = next(pair for pair in given if pair[1] is not None)
        request = LimitRaise(name=name, value=value or 0, **deciders(args))
    except ValidationError as err:
        raise UserError(describe_validation(err)) from None
    print(await control.act(client, args.session, AgentWorkflow.raise_limit, request))
    return 0


async def memory(client: Client, args: argparse.Namespace) -> int:
    """memory list | forget KEY | clear, in one user's scope (`--user`, `--agent`)."""
    from sessions import memory as memories

    if args.memory_command == "list":
        render.print_memories(await memories.listing(client, args.user, args.agent), as_json=args.json)
    elif args.memory_command == "forget":
        gone = await memories.forget(client, args.user, args.agent, args.key)
        if not gone:
            raise UserError(f"no memory {args.key!r} for {args.user}; see: python client.py memory list")
        print(f"forgot {args.key}")
    else:
        print(f"forgot {await memories.clear(client, args.user, args.agent)} memories of {args.user}")
    return 0


async def watch(client: Client, args: argparse.Namespace) -> int:
    handle = control.handle(client, args.session)
    await control.describe(handle)
    return await follow(
        client, handle, ui_url(args.session, client.namespace), as_json=args.json, prompt=not args.no_prompt
    )


async def list_sessions(client: Client, args: argparse.Namespace) -> int:
    from sessions import listing

    found = await listing.rows(client, listing.Filter(args.status, args.user), limit=args.limit)
    render.print_sessions([row.summary() for row in found], as_json=args.json)
    return 0


def describe_validation(err: ValidationError) -> str:
    issue = err.errors()[0]
    where = ".".join(str(p) for p in issue["loc"])
    return f"invalid {where or 'input'}: {issue['msg']}"


# Each takes the client (None for the OFFLINE ones) and the arguments, and returns the exit code.
COMMANDS: dict[str, Callable[[Any, argparse.Namespace], Awaitable[int]]] = {
    "start": start,
    "status": status,
    "history": history,
    "approve": decide,
    "deny": decide,
    "pause": steer,
    "resume": steer,
    "cancel": steer,
    "watch": watch,
    "send": send,
    "close": close,
    "event": event,
    "raise": raise_limit,
    "memory": memory,
    "export": export,
    "list": list_sessions,
    "agents": list_agents,
    "fork": fork,
    "schedule": schedule,
}
OFFLINE = {"agents"}  # commands that need no Temporal connection


async def run(args: argparse.Namespace) -> int:
    """Connect (unless the command needs no server) and run the command."""
    if args.command in OFFLINE:
        return await COMMANDS[args.command](None, args)
    # What needs no server is checked first: a mistake in it is the one line the person sees.
    if args.command == "start" or (args.command == "schedule" and args.schedule_command == "create"):
        args.session_input = resolve_start(args)
        if args.command == "schedule":
            from sessions import schedules

            args.every_delta = schedules.parse_every(args.every) if args.every else None
    try:
        client = await connect()
    except Unreachable as err:
        raise UserError(f"{err} (start it with: python devserver.py, or set TEMPORAL_ADDRESS)") from None
    return await COMMANDS[args.command](client, args)
