"""`python client.py`: start, follow and steer agent sessions.

Parse, call, print. This file is the command line itself: its arguments, and how a
failure ends (one line on stderr, exit code 1, for every user mistake: an unknown
session, Temporal unreachable, bad arguments, a duplicate session id). What each command
does is in `cli/commands.py`, which is imported only once the arguments are read:
`--help` and a mistyped flag answer without loading Temporal's SDK or the workflow's
modules.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import NoReturn

from infra.arguments import (
    json_object,
    json_value,
    non_negative_float,
    positive_float,
    positive_int,
    thinking_budget,
)
from infra.errors import AgentError, Rejected, SessionNotFound
from infra.model_names import DEFAULT_MODEL

# ---- arguments -------------------------------------------------------------------------

ON_BEHALF_OF = "for whom (recorded as on_behalf_of; decided_by is always cli:LOGIN, who ran it)"


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("python client.py").strip()
        finish(1, err=f"error: {message} (see: python client.py {command + ' ' if command else ''}--help)")


def add_session_flags(command: argparse.ArgumentParser) -> None:
    """The settings of a new session, shared by `start` and `schedule create`."""
    command.add_argument("--system", help="system prompt")
    command.add_argument(
        "--agent", help="the agent to run, from the definitions (default: the file's default)"
    )
    command.add_argument(
        "--model",
        default=os.environ.get("AGENT_MODEL"),
        help=f"provider:model (default: the agent's, else {DEFAULT_MODEL})",
    )
    command.add_argument(
        "--fallback-model", action="append", metavar="M", dest="fallback_models",
        help="provider:model that makes a step when the one before is unavailable, rate limited or refuses "
             "the key (repeatable, tried in order; default: the agent's)",
    )  # fmt: skip
    command.add_argument(
        "--user", default=os.environ.get("AGENT_USER", "anonymous"), help="user the session acts for"
    )
    command.add_argument("--max-steps", type=positive_int, help="most model calls (default 20)")
    command.add_argument("--token-budget", type=positive_int, help="most tokens, cache included")
    command.add_argument("--cost-budget", type=positive_float, help="most USD (needs prices for the model)")
    command.add_argument(
        "--timeout", type=positive_float, help="working-time limit in seconds, waits excluded (default 3600)"
    )
    command.add_argument(
        "--approval-timeout", type=positive_float,
        help="deny a call no one decides on within this many seconds (default: it waits)",
    )  # fmt: skip
    command.add_argument(
        "--on-limit", choices=("stop", "ask"),
        help="at max-steps, token-budget or cost-budget: stop (default), or wait for `raise`",
    )  # fmt: skip
    command.add_argument("--max-tokens", type=positive_int, help="max_tokens per model call (default 4096)")
    command.add_argument(
        "--model-timeout", type=positive_float, help="seconds one model call attempt may take (default 120)"
    )
    command.add_argument("--tools", help="comma-separated tool names (default: all the worker has)")
    command.add_argument("--chat", action="store_true", help="keep the session open for more messages")
    command.add_argument(
        "--idle-timeout", type=positive_float, help="a chat ends after this many idle seconds (default 86400)"
    )
    command.add_argument(
        "--context-tokens", type=positive_int, help="the model's context window (default 200000)"
    )
    command.add_argument(
        "--summarize-dropped", action="store_true", help="summarise what no longer fits the context"
    )
    command.add_argument(
        "--output-schema", type=Path, metavar="FILE",
        help="a JSON Schema (a JSON file): the answer is JSON that matches it, given as `output`",
    )  # fmt: skip
    command.add_argument(
        "--attach", type=Path, action="append", metavar="FILE",
        help="a file for the goal's message: PNG, JPEG, GIF, WebP, PDF or plain text (repeatable)",
    )  # fmt: skip
    command.add_argument(
        "--notify", action="append", metavar="URL",
        help="POST a signed JSON notification here when a call waits for approval, the session waits "
             "for an event, and it ends (repeatable; allowed by AGENT_NOTIFY_ALLOW)",
    )  # fmt: skip
    command.add_argument(
        "--thinking-budget", type=thinking_budget, metavar="N|adaptive",
        help="extended thinking: a budget of tokens (1024 or more, below --max-tokens) or adaptive",
    )  # fmt: skip
    command.add_argument("--temperature", type=non_negative_float, help="sampling temperature")
    command.add_argument("--top-p", type=non_negative_float, help="nucleus sampling: top_p")
    command.add_argument(
        "--stop-sequence", action="append", dest="stop_sequences", metavar="TEXT",
        help="stop when the model writes this (repeatable)",
    )  # fmt: skip
    command.add_argument(
        "--tool-choice", metavar="auto|any|none|TOOL",
        help="the first model call of each run: auto, any (some tool), none, or the tool named",
    )  # fmt: skip


CALLS = "the call's id (pending_approvals[].tool_use_id); several: each is decided, one line each"
BATCH = (
    "the session's id; with several (or --query) each is acted on, 32 at a time, one line each "
    "(ID: outcome), exit code 1 if any failed"
)
TARGETED = ("pause", "resume", "cancel")  # the commands that take session ids or --query


def add_targets(command: argparse.ArgumentParser) -> None:
    """The sessions `pause`, `resume` and `cancel` act on: ids, or a visibility query."""
    command.add_argument("session", nargs="*", metavar="SESSION", help=BATCH)
    command.add_argument(
        "--query", metavar="FILTER",
        help="every session this Temporal visibility filter matches (at most 1000), e.g. "
             "\"AgentStatus = 'running' AND AgentUser = 'alice'\"",
    )  # fmt: skip


def parser() -> argparse.ArgumentParser:
    root = Parser(prog="python client.py", description=(__doc__ or "").partition("\n")[0])
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

    send = commands.add_parser(
        "send", help="send a message to a working session (a chat's next, a steer, or an interrupt)"
    )
    send.add_argument("session")
    send.add_argument("text")
    send.add_argument(
        "--mode", choices=("queue", "steer", "interrupt"),
        help="queue: after the run's answer (a chat's default); steer: at the model's next call (the default "
        "otherwise); interrupt: cut the model call and tools in flight short, then the model's next turn",
    )  # fmt: skip
    commands.add_parser("close", help="end a chat session after the messages already sent").add_argument(
        "session"
    )
    event = commands.add_parser("event", help="send an event, for the session's wait_for_event NAME")
    event.add_argument("session")
    event.add_argument("name")
    event.add_argument("--data", type=json_value, help="the event's data, as JSON (default null)")

    approve = commands.add_parser("approve", help="approve tool calls that wait for approval")
    approve.add_argument("session")
    approve.add_argument("tool_use_id", nargs="+", metavar="TOOL_USE_ID", help=CALLS)
    approve.add_argument(
        "--input", type=json_object, help="approve one call with this input instead (a JSON object)"
    )
    approve.add_argument("--as", dest="on_behalf_of", metavar="USER", help=ON_BEHALF_OF)
    deny = commands.add_parser("deny", help="deny tool calls; the model is told why")
    deny.add_argument("session")
    deny.add_argument("tool_use_id", nargs="+", metavar="TOOL_USE_ID", help=CALLS)
    deny.add_argument("--reason", help="why (the model sees it)")
    deny.add_argument("--as", dest="on_behalf_of", metavar="USER", help=ON_BEHALF_OF)
    for name, text in [("pause", "pause sessions between units of work"), ("resume", "resume paused ones")]:
        add_targets(commands.add_parser(name, help=text))
    cancel = commands.add_parser("cancel", help="cancel sessions and their work in flight")
    add_targets(cancel)
    cancel.add_argument("--reason", help="why")
    cancel.add_argument("--as", dest="on_behalf_of", metavar="USER", help=ON_BEHALF_OF)

    raising = commands.add_parser(
        "raise", help="raise a limit of a session (one waiting at it goes on), or --decline"
    )
    raising.add_argument("session")
    new_limit = raising.add_mutually_exclusive_group(required=True)
    new_limit.add_argument("--max-steps", type=positive_int, help="the new most model calls")
    new_limit.add_argument("--token-budget", type=positive_int, help="the new most tokens")
    new_limit.add_argument("--cost-budget", type=positive_float, help="the new most USD")
    new_limit.add_argument(
        "--decline", action="store_true", help="no more: the session waiting at a limit stops"
    )
    raising.add_argument("--reason", help="why, with --decline")
    raising.add_argument("--as", dest="on_behalf_of", metavar="USER", help=ON_BEHALF_OF)

    memory = commands.add_parser("memory", help="a user's memories across sessions: list, forget, clear")
    memory_commands = memory.add_subparsers(dest="memory_command", required=True, parser_class=Parser)
    for name, text in [("list", "the memories, newest first"), ("forget", "forget one memory by its key"),
                       ("clear", "forget every memory of the scope")]:  # fmt: skip
        verb = memory_commands.add_parser(name, help=text)
        if name == "forget":
            verb.add_argument("key")
        verb.add_argument(
            "--user",
            default=os.environ.get("AGENT_USER", "anonymous"),
            help="whose memories (default AGENT_USER)",
        )
        verb.add_argument(
            "--agent",
            help="the agent's scope (default: the user's own, shared by agents with memory = \"user\")",
        )
        if name == "list":
            verb.add_argument("--json", action="store_true", help="one JSON object per line")

    export = commands.add_parser("export", help="write the Temporal event history as JSON (replayable)")
    export.add_argument("session")
    export.add_argument("file", type=Path, help="where to write it ('-' for standard output)")

    watch = commands.add_parser("watch", help="show what happened, then follow live until the end")
    watch.add_argument("session")
    watch.add_argument("--json", action="store_true", help="one JSON event per line")
    watch.add_argument("--no-prompt", action="store_true", help="never ask y/n for approvals")

    agents_cmd = commands.add_parser(
        "agents", help="the agent definitions (AGENT_DEFINITIONS, default agents.toml)"
    )
    agents_cmd.add_argument("--json", action="store_true", help="one JSON object per line")

    listing = commands.add_parser("list", help="sessions, newest first")
    listing.add_argument("--status", help="only sessions with this status (e.g. waiting_approval)")
    listing.add_argument("--user", help="only sessions of this user")
    listing.add_argument(
        "--limit", type=positive_int, default=50, help="at most this many (any number: read a page at a time)"
    )
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    return root


def parse(argv: list[str]) -> argparse.Namespace:
    """The arguments; a goal may also come after the options (`schedule create NAME --every 1h GOAL`)."""
    root = parser()
    args, extra = root.parse_known_args(argv)
    if len(extra) == 1 and not extra[0].startswith("-") and getattr(args, "goal", "") is None:
        args.goal = extra[0]
    elif extra:
        root.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command in TARGETED and bool(args.session) == bool(args.query):
        wrong = "give session ids or --query, not both" if args.query else "a session id or --query is needed"
        Parser(prog=f"python client.py {args.command}").error(wrong)
    if args.command == "approve" and args.input is not None and len(args.tool_use_id) > 1:
        Parser(prog="python client.py approve").error("--input edits one call: give one TOOL_USE_ID with it")
    return args


# ---- the edge ----------------------------------------------------------------------------


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
    args = parse(sys.argv[1:])
    from temporalio.service import RPCError

    from cli import commands

    try:
        code = asyncio.run(commands.run(args))
    except AgentError as err:
        finish(1, err=f"error: {one_line(err)}")
    except KeyboardInterrupt:
        finish(130)
    except RPCError as err:
        finish(1, err=f"error: Temporal answered: {err.message}")
    finish(code)


if __name__ == "__main__":
    main()
