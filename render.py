"""What the client prints: status, history, session lists, and the live `watch` view.

`watch` reads the session's event stream (Temporal's workflow streams) from the start, so
it shows what already happened and then follows live, whether attached mid-run, after a
restart or after the end. Rendering uses `rich`; `--json` prints one event per line.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from workflows.types import FINAL_STATUSES, Decision, SessionHistory, SessionInput, SessionStatus

console = Console(highlight=False, soft_wrap=True)
STYLE = {"completed": "green", "stopped": "yellow", "failed": "red", "cancelled": "magenta"}


def shorten(value: Any, limit: int = 120) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def session_details(session: SessionInput) -> str:
    """The workflow's static details in the Temporal UI."""
    limits = session.limits
    lines = [
        f"**model** {session.model} (prompt {session.prompt_version})",
        f"**user** {session.user_id}",
        f"**limits** {limits.max_steps} steps, {limits.token_budget} tokens, "
        f"{limits.timeout_seconds:g}s"
        + (f", ${limits.cost_budget_usd:g}" if limits.cost_budget_usd else ""),
        f"**tools** {', '.join(session.tools) if session.tools is not None else 'all of the worker'}",
    ]
    return "\n".join(lines)


def print_status(snapshot: SessionStatus, link: str) -> None:
    style = STYLE.get(snapshot.status, "cyan")
    head = f"[bold]{snapshot.session_id}[/] [{style}]{snapshot.status}[/]"
    if snapshot.stop_reason:
        head += f" ({snapshot.stop_reason})"
    console.print(head)
    console.print(f"steps {snapshot.steps} · {_totals(snapshot.usage.model_dump(), snapshot.cost_usd)}")
    for pending in snapshot.pending_approvals:
        _print_approval_hint(snapshot.session_id, pending.tool_use_id, pending.name, pending.input)
    if snapshot.error:
        console.print(f"[red]error:[/] {escape(snapshot.error)}")
    if snapshot.answer:
        console.print(f"\n{escape(snapshot.answer)}\n")
    console.print(f"[dim]{link}[/]")


def print_history(found: SessionHistory) -> None:
    calls = {c.tool_use_id: c for c in found.tool_calls}
    console.print(f"[bold]{found.session_id}[/] {found.status.status}")
    console.print(f"[bold]goal[/] {escape(shorten(found.messages[0].text(), 400))}")
    for turn in found.trace:
        console.print(
            f"\n[bold]step {turn.step}[/] {turn.model} · {turn.stop_reason} · {turn.latency_ms} ms · "
            f"{turn.usage.total()} tokens" + (f" · ${turn.cost_usd:.4f}" if turn.cost_usd is not None else "")
        )
        if turn.text:
            console.print(escape(turn.text))
        for tool_use_id in turn.tool_use_ids:
            call = calls.get(tool_use_id)
            if call:
                mark = "[green]✓[/]" if call.status == "done" else "[red]✗[/]"
                took = f" ({call.duration_ms} ms)" if call.duration_ms is not None else ""
                console.print(f"  → {call.name} {escape(shorten(call.input, 100))}")
                console.print(f"    {mark} {call.status}{took}: {escape(shorten(call.output or '', 160))}")
    final = found.status
    console.print(f"\n[{STYLE.get(final.status, 'cyan')}]{final.status}[/]" + (f" ({final.stop_reason})" if final.stop_reason else ""))
    if final.error:
        console.print(f"[red]error:[/] {escape(final.error)}")


def print_sessions(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        for row in rows:
            print(json.dumps(row))
        return
    table = Table("session", "status", "steps", "tokens", "approvals", "user", "started", box=None)
    for row in rows:
        table.add_row(*(str(row[k]) if row[k] is not None else "-" for k in
                        ("session_id", "status", "steps", "tokens", "pending_approvals", "user", "started")))  # fmt: skip
    console.print(table)


def _totals(usage: dict[str, Any], cost: float | None) -> str:
    text = (
        f"tokens in {usage['input_tokens']} out {usage['output_tokens']} "
        f"cache read {usage['cache_read_input_tokens']} write {usage['cache_creation_input_tokens']}"
    )
    return text + (f" · ${cost:.4f}" if cost is not None else "")


def _print_approval_hint(session_id: str, tool_use_id: str, name: str, arguments: Any) -> None:
    console.print(f"[yellow]⏸ waiting for approval:[/] {name} {escape(shorten(arguments, 200))}")
    console.print(f"   approve: python client.py approve {session_id} {tool_use_id}")
    console.print(f"   deny:    python client.py deny {session_id} {tool_use_id} --reason \"...\"")


# ---- watch -----------------------------------------------------------------------------


class Watcher:
    """Turns stream events into lines on the terminal."""

    def __init__(self, handle: WorkflowHandle, link: str, prompt: bool):
        self.handle = handle
        self.link = link
        self.prompt = prompt and sys.stdin.isatty()
        self.streamed: dict[int, int] = {}  # step -> attempt whose text was shown live
        self.open_line = False
        self.asked: set[str] = set()
        self.prompts: list[asyncio.Task[None]] = []

    def delta(self, event: dict[str, Any]) -> None:
        step, attempt = event["step"], event["attempt"]
        shown = self.streamed.get(step)
        if shown is not None and shown != attempt:
            console.print(f"\n[dim](attempt {attempt} of step {step}: the text above is replaced)[/]")
        if shown != attempt:
            self._end_line()
            console.print(f"[bold]step {step}[/] ", end="")
        self.streamed[step] = attempt
        console.print(escape(event["text"]), end="")
        self.open_line = True

    def event(self, event: dict[str, Any]) -> bool:
        kind = event["type"]
        if kind != "turn":
            self._end_line()
        if kind == "status":
            console.print(f"[dim]● {event['status']}[/]")
        elif kind == "turn":
            if event["step"] in self.streamed:
                self._end_line()
            elif event.get("text"):
                console.print(f"[bold]step {event['step']}[/] {escape(event['text'])}")
            console.print(
                f"[dim]  step {event['step']} · {event['stop_reason']} · so far: "
                f"{_totals(event['usage'], event.get('cost_usd'))}[/]"
            )
        elif kind == "tool_call":
            console.print(f"  → {event['name']} {escape(shorten(event['input'], 160))}")
        elif kind == "tool_result":
            mark = "[green]✓[/]" if event["status"] == "done" else "[red]✗[/]"
            took = f" ({event['duration_ms']} ms)" if event.get("duration_ms") is not None else ""
            console.print(f"    {mark} {event['name']}{took}: {escape(shorten(event['output'], 160))}")
        elif kind == "approval":
            _print_approval_hint(self.handle.id, event["tool_use_id"], event["name"], event["input"])
            if self.prompt and event["tool_use_id"] not in self.asked:
                self.asked.add(event["tool_use_id"])
                self.prompts.append(asyncio.create_task(self._ask(event)))
        elif kind == "decision":
            verb = "approved" if event["approved"] else "denied"
            console.print(f"  [dim]{verb}: {event['name']} ({event['tool_use_id']})[/]")
        elif kind == "end":
            style = STYLE.get(event["status"], "cyan")
            reason = f" ({event['stop_reason']})" if event.get("stop_reason") else ""
            console.print(f"[bold {style}]{event['status']}{reason}[/]")
            if event.get("error"):
                console.print(f"[red]error:[/] {escape(event['error'])}")
            if event.get("answer"):
                console.print(f"\n{escape(event['answer'])}\n")
            console.print(f"[dim]{self.link}[/]")
            return event["status"] == "completed"
        return False

    async def _ask(self, event: dict[str, Any]) -> None:
        snapshot = await self.handle.query("status", result_type=SessionStatus)
        if event["tool_use_id"] not in {p.tool_use_id for p in snapshot.pending_approvals}:
            return
        answer = await asyncio.to_thread(input, f"   approve {event['name']}? [y/n] ")
        decision = Decision(tool_use_id=event["tool_use_id"], reason=None if answer.strip().lower().startswith("y") else "denied at the prompt")
        name = "approve_call" if answer.strip().lower().startswith("y") else "deny_call"
        try:
            console.print(f"   {await self.handle.execute_update(name, decision, result_type=str)}")
        except WorkflowUpdateFailedError as err:
            console.print(f"   [red]rejected:[/] {err.cause}")

    def _end_line(self) -> None:
        if self.open_line:
            console.print()
            self.open_line = False


async def watch(client: Client, handle: WorkflowHandle, link: str, as_json: bool = False, prompt: bool = True) -> int:
    """Follow the session's events from the beginning until it ends; exit 0 if it completed."""
    stream = WorkflowStreamClient.create(client, handle.id)
    watcher = Watcher(handle, link, prompt=prompt and not as_json)
    completed = False
    try:
        async for item in stream.subscribe(["event", "delta"], poll_cooldown=_cooldown()):
            event = item.data
            if as_json:
                print(json.dumps({"topic": item.topic, "offset": item.offset, **event}), flush=True)
                if item.topic == "event" and event["type"] == "end":
                    completed = event["status"] == "completed"
                    break
                continue
            if item.topic == "delta":
                watcher.delta(event)
            elif watcher.event(event) or event["type"] == "end":
                completed = event["type"] == "end" and event["status"] == "completed"
                break
    finally:
        for task in watcher.prompts:
            task.cancel()
    return 0 if completed else 2


def _cooldown():
    from datetime import timedelta

    return timedelta(milliseconds=200)


__all__ = ["FINAL_STATUSES", "watch", "print_status", "print_history", "print_sessions", "shorten"]
