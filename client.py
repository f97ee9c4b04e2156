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
from pathlib import Path
from typing import NoReturn

from pydantic import ValidationError
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from infra.errors import ConfigError
from infra.definitions import DefinitionError, Definitions, load_definitions
from activities.providers import split
from sessions import control, render, schedules, start_input
from infra.arguments import json_object, positive_float, positive_int
from sessions.fork import forked_input
from sessions.watch import watch as follow
from infra.connection import connect, task_queue
from infra.errors import AgentError, BadRequest, Rejected, SessionExists, SessionNotFound, Unreachable
from workflows.agent import AgentWorkflow
from sessions.pricing import PRICES, price_for
from workflows.contract import DEFAULT_MODEL, CancelRequest, Decision, SessionInput, SessionStatus, UserMessage

EXIT_NOT_COMPLETED = 2
UserError = BadRequest  # a mistake the person can fix; printed as one line


def ui_url(session_id: str, namespace: str = "default") -> str:
    base = os.environ.get("TEMPORAL_UI_URL", "http://localhost:8233").rstrip("/")
    return f"{base}/namespaces/{namespace}/workflows/{session_id}"


# ---- arguments -------------------------------------------------------------------------


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("python client.py").strip()
        finish(1, err=f"error: {message} (see: python client.py {command + ' ' if command else ''}--help)")


def add_session_flags(command: argparse.ArgumentParser) -> None:
    """The settings of a new session, shared by `start` and `schedule create`."""
    command.add_argument("--system", help="system prompt")
    command.add_argument("--agent", help="the agent to run, from the definitions (default: the file's default)")
    command.add_argument("--model", default=os.environ.get("AGENT_MODEL"), help=f"provider:model (default: the agent's, else {DEFAULT_MODEL})")
    command.add_argument("--user", default=os.environ.get("AGENT_USER", "anonymous"), help="user the session acts for")
    command.add_argument("--max-steps", type=positive_int, help="most model calls (default 20)")
    command.add_argument("--token-budget", type=positive_int, help="most tokens, cache included")
    command.add_argument("--cost-budget", type=positive_float, help="most USD (needs prices for the model)")
    command.add_argument("--timeout", type=positive_float, help="wall-clock limit in seconds (default 3600)")
    command.add_argument("--max-tokens", type=positive_int, help="max_tokens per model call (default 4096)")
    command.add_argument("--model-timeout", type=positive_float, help="seconds one model call attempt may take (default 120)")
    command.add_argument("--tools", help="comma-separated tool names (default: all the worker has)")
    command.add_argument("--chat", action="store_true", help="keep the session open for more messages")
    command.add_argument("--idle-timeout", type=positive_float, help="a chat ends after this many idle seconds (default 86400)")
    command.add_argument("--context-tokens", type=positive_int, help="the model's context window (default 200000)")
    command.add_argument("--summarize-dropped", action="store_true", help="summarise what no longer fits the context")


def parser() -> argparse.ArgumentParser:
    root = Parser(prog="python client.py", description=__doc__.splitlines()[0])
    commands = root.add_subparsers(dest="command", required=True, parser_class=Parser)

    start = commands.add_parser("start", help="start a session with a goal")
    start.add_argument("goal", nargs="?", help="what the agent should do")
    start.add_argument("--goal-file", type=Path, help="read the goal from this file")
    start.add_argument("--session", help="session id (default: a new one)")
    add_session_flags(start)
    start.add_argument("--wait", action="store_true", help="wait for the end and print the answer")
    start.add_argument("--watch", action="store_true", help="follow the session live until it ends")

    fork = commands.add_parser("fork", help="a new session from another's state after step N")
    fork.add_argument("session", help="the session to fork (it is only read)")
    fork.add_argument("--at-step", type=positive_int, required=True, help="the step to fork after")
    fork.add_argument("--session", dest="new_session", help="the new session's id (default: ID.fork-XXXX)")
    fork.add_argument("--message", help="one more user message for the fork")
    fork.add_argument("--model", help="run the fork with another provider:model")
    fork.add_argument("--watch", action="store_true", help="follow the fork live until it ends")

    schedule = commands.add_parser("schedule", help="start sessions on a timetable (Temporal Schedules)")
    schedule_commands = schedule.add_subparsers(dest="schedule_command", required=True, parser_class=Parser)
    create = schedule_commands.add_parser("create", help="a schedule that starts a session with GOAL")
    create.add_argument("name")
    create.add_argument("goal", nargs="?", help="what each session should do")
    create.add_argument("--goal-file", type=Path, help="read the goal from this file")
    when = create.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", help='a cron expression, like "0 7 * * 1-5"')
    when.add_argument("--every", help="an interval, like 15m, 1h or 1d")
    add_session_flags(create)
    schedule_commands.add_parser("list", help="the schedules").add_argument("--json", action="store_true")
    for name, text in [("pause", "stop starting sessions"), ("unpause", "start sessions again"),
                       ("delete", "remove the schedule (its sessions go on)"),
                       ("trigger", "start a session now, even if one is running")]:  # fmt: skip
        schedule_commands.add_parser(name, help=text).add_argument("name")

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
    approve.add_argument("--input", type=json_object, help="approve with this input instead (a JSON object)")
    approve.add_argument("--as", dest="decided_by", default=control.cli_user(), help="who decides (default cli:LOGIN)")
    deny = commands.add_parser("deny", help="deny a tool call; the model is told why")
    deny.add_argument("session")
    deny.add_argument("tool_use_id")
    deny.add_argument("--reason", help="why (the model sees it)")
    deny.add_argument("--as", dest="decided_by", default=control.cli_user(), help="who decides (default cli:LOGIN)")
    for name, text in [("pause", "pause between units of work"), ("resume", "resume a paused session")]:
        commands.add_parser(name, help=text).add_argument("session")
    cancel = commands.add_parser("cancel", help="cancel the session and its work in flight")
    cancel.add_argument("session")
    cancel.add_argument("--reason", help="why")
    cancel.add_argument("--as", dest="decided_by", default=control.cli_user(), help="who cancels (default cli:LOGIN)")

    export = commands.add_parser("export", help="write the Temporal event history as JSON (replayable)")
    export.add_argument("session")
    export.add_argument("file", type=Path, help="where to write it ('-' for standard output)")

    watch = commands.add_parser("watch", help="show what happened, then follow live until the end")
    watch.add_argument("session")
    watch.add_argument("--json", action="store_true", help="one JSON event per line")
    watch.add_argument("--no-prompt", action="store_true", help="never ask y/n for approvals")

    agents_cmd = commands.add_parser("agents", help="the agent definitions (AGENT_DEFINITIONS, default agents.toml)")
    agents_cmd.add_argument("--json", action="store_true", help="one JSON object per line")

    listing = commands.add_parser("list", help="sessions, newest first")
    listing.add_argument("--status", help="only sessions with this status (e.g. waiting_approval)")
    listing.add_argument("--user", help="only sessions of this user")
    listing.add_argument("--limit", type=positive_int, default=50)
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    return root


# ---- commands --------------------------------------------------------------------------


async def start(client: Client, args: argparse.Namespace) -> int:
    session_input = await start_input(client, args)
    session_id = args.session or f"session-{uuid.uuid4().hex[:12]}"
    try:
        handle = await control.start(
            client, session_input, session_id, task_queue=task_queue(),
            summary=render.shorten(session_input.goal, 200), details=render.session_details(session_input),
        )  # fmt: skip
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


async def start_input(client: Client, args: argparse.Namespace) -> SessionInput:
    goal = read_goal(args)
    if args.model is not None:
        check_model(args.model)
    definitions = read_definitions()
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
    fields = {
        "user_id": args.user,
        "model": args.model,
        "system": args.system,
        "tools": [t.strip() for t in args.tools.split(",") if t.strip()] if args.tools else None,
        "chat": args.chat or None,
        "summarize_dropped": args.summarize_dropped or None,
        "idle_timeout_seconds": args.idle_timeout,
        "search_attributes": await control.has_search_attributes(client),
    }
    try:
        agent = start_input.chosen_agent(definitions, args.agent)
        session_input = start_input.session_input(definitions, agent, goal=goal, limits=limits, fields=fields)
    except DefinitionError as err:
        raise UserError(str(err)) from None
    except ValidationError as err:
        raise UserError(describe_validation(err)) from None
    if session_input.limits.cost_budget_usd is not None and session_input.price is None:
        raise UserError(
            f"no prices for model {session_input.model!r}, so a cost budget cannot be kept; "
            f"models with prices: {', '.join(sorted(PRICES))}"
        )
    return session_input


def read_definitions() -> Definitions:
    try:
        return load_definitions()
    except DefinitionError as err:
        raise UserError(str(err)) from None


async def list_agents(client: Client | None, args: argparse.Namespace) -> int:
    render.print_agents(start_input.describe(read_definitions()), as_json=args.json)
    return 0


def check_model(model: str) -> None:
    """An unknown provider prefix is the caller's mistake, said before anything starts."""
    try:
        split(model)
    except ApplicationError as err:
        raise UserError(err.message) from None


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


async def decide(client: Client, args: argparse.Namespace) -> int:
    fields = {"tool_use_id": args.tool_use_id, "decided_by": args.decided_by}
    if args.command == "approve":
        fields["input"] = args.input
    else:
        fields["reason"] = args.reason
    try:
        decision = Decision(**fields)
    except ValidationError as err:
        raise UserError(describe_validation(err)) from None
    update = AgentWorkflow.approve_call if args.command == "approve" else AgentWorkflow.deny_call
    owner = await control.owner_of_call(client, args.session, args.tool_use_id)
    print(await control.act(client, owner, update, decision))
    return 0


async def fork(client: Client, args: argparse.Namespace) -> int:
    source = control.handle(client, args.session)
    found = await control.history(client, args.session)
    started, _ = await control.start_input(client, source)
    if args.model is not None:
        check_model(args.model)
        started = started.model_copy(update={"model": args.model, "price": price_for(args.model)})
    session_input = forked_input(started, found, args.at_step, args.message)
    session_id = args.new_session or f"{args.session}.fork-{uuid.uuid4().hex[:6]}"
    details = render.session_details(session_input) + f"\n**forked from** {args.session} after step {args.at_step}"
    try:
        handle = await control.start(
            client, session_input, session_id, task_queue=task_queue(),
            summary=render.shorten(session_input.goal, 200), details=details,
        )  # fmt: skip
    except SessionExists:
        raise UserError(f"session {session_id} already exists") from None
    print(session_id, flush=True)
    if args.watch:
        return await follow(client, handle, ui_url(session_id, client.namespace))
    return 0


async def schedule(client: Client, args: argparse.Namespace) -> int:
    if args.schedule_command == "create":
        session_input = await start_input(client, args)
        every = schedules.parse_every(args.every) if args.every else None
        await schedules.create(
            client, args.name, session_input, task_queue=task_queue(), cron=args.cron, every=every,
            summary=render.shorten(session_input.goal, 200),
        )  # fmt: skip
        print(f"created schedule {args.name}")
    elif args.schedule_command == "list":
        render.print_schedules(await schedules.listing(client), as_json=args.json)
    else:
        print(await schedules.act(client, args.name, args.schedule_command))
    return 0


async def send(client: Client, args: argparse.Namespace) -> int:
    try:
        message = UserMessage(text=args.text)
    except ValidationError as err:
        raise UserError(describe_validation(err)) from None
    position = await control.act(client, args.session, AgentWorkflow.send_message, message)
    print(f"message {position} queued for {args.session}")
    return 0


async def close(client: Client, args: argparse.Namespace) -> int:
    print(await control.act(client, args.session, AgentWorkflow.close_session))
    return 0


async def control(client: Client, args: argparse.Namespace) -> int:
    if args.command == "cancel":
        try:
            request = CancelRequest(reason=args.reason, decided_by=args.decided_by)
        except ValidationError as err:
            raise UserError(describe_validation(err)) from None
        print(await control.act(client, args.session, AgentWorkflow.cancel_session, request))
    elif args.command == "pause":
        print(await control.act(client, args.session, AgentWorkflow.pause_session))
    else:
        print(await control.act(client, args.session, AgentWorkflow.resume_session))
    return 0


async def watch(client: Client, args: argparse.Namespace) -> int:
    handle = control.handle(client, args.session)
    await control.describe(handle)
    return await follow(
        client, handle, ui_url(args.session, client.namespace), as_json=args.json, prompt=not args.no_prompt
    )


async def list_sessions(client: Client, args: argparse.Namespace) -> int:
    rows = await control.list_sessions(client, status=args.status, user=args.user, limit=args.limit)
    render.print_sessions(rows, as_json=args.json)
    return 0


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
    "agents": list_agents,
    "fork": fork,
    "schedule": schedule,
}
OFFLINE = {"agents"}  # commands that need no Temporal connection


def parse(argv: list[str]) -> argparse.Namespace:
    """The arguments; a goal may also come after the options (`schedule create NAME --every 1h GOAL`)."""
    root = parser()
    args, extra = root.parse_known_args(argv)
    if len(extra) == 1 and not extra[0].startswith("-") and getattr(args, "goal", "") is None:
        args.goal = extra[0]
    elif extra:
        root.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


async def run(argv: list[str]) -> int:
    args = parse(argv)
    if args.command in OFFLINE:
        return await COMMANDS[args.command](None, args)
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


def one_line(err: AgentError) -> str:
    if isinstance(err, SessionNotFound):
        return f"{err}; list sessions with: python client.py list"
    if isinstance(err, Rejected):
        return f"rejected: {err}"
    return str(err)


def main() -> NoReturn:
    try:
        code = asyncio.run(run(sys.argv[1:]))
    except AgentError as err:
        finish(1, err=f"error: {one_line(err)}")
    except KeyboardInterrupt:
        finish(130)
    except RPCError as err:
        finish(1, err=f"error: Temporal answered: {err.message}")
    finish(code)


if __name__ == "__main__":
    main()
