"""What the client prints: status, history, session lists, and the live `watch` view.

`watch` reads the session's event stream (Temporal's workflow streams) from the start, so
it shows what already happened and then follows live, whether attached mid-run, after a
restart or after the end. Rendering uses `rich`; `--json` prints one event per line.
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import timedelta
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text
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


def _ms(value: int | None) -> str:
    if value is None:
        return ""
    return f"{value} ms" if value < 1000 else f"{value / 1000:.1f} s"


def _num(value: int) -> str:
    return f"{value:,}"


def running_totals(step: int, usage: dict[str, Any], cost: float | None) -> str:
    """`2 steps · 1,234 tokens (in 1,000 · out 234 · cache 0/0) · $0.0123`."""
    total = sum(usage.get(k, 0) for k in
                ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))  # fmt: skip
    text = (
        f"{step} step{'s' if step != 1 else ''} · {_num(total)} tokens "
        f"(in {_num(usage['input_tokens'])} · out {_num(usage['output_tokens'])}"
    )
    if usage.get("cache_read_input_tokens") or usage.get("cache_creation_input_tokens"):
        text += f" · cache read {_num(usage['cache_read_input_tokens'])} write {_num(usage['cache_creation_input_tokens'])}"
    text += ")"
    return text + (f" · ${cost:.4f}" if cost is not None else "")


class _Streaming:
    """The model's text as it streams, in a live region that a retried attempt replaces.

    Only in a terminal: the region is erased when the turn is recorded, and the turn's
    complete text is printed once in its place.
    """

    def __init__(self) -> None:
        self.step: int | None = None
        self.attempt: int | None = None
        self.text = ""
        self.live: Live | None = None

    def add(self, step: int, attempt: int, text: str) -> None:
        if (step, attempt) != (self.step, self.attempt):
            self.text = ""  # a new step, or a retried attempt: its partial text is replaced
        self.step, self.attempt = step, attempt
        self.text += text
        if self.live is None:
            self.live = Live(self._render(), console=console, transient=True, auto_refresh=False)
            self.live.start()
        self.live.update(self._render(), refresh=True)

    def _render(self) -> Text:
        head = Text(f"step {self.step}", style="bold")
        if self.attempt and self.attempt > 1:
            head.append(f" (attempt {self.attempt})", style="yellow")
        head.append(" ▍ ", style="dim")
        body = head + Text(self.text)
        room = max(3, console.size.height - 2)
        lines = body.wrap(console, console.size.width)
        if len(lines) > room:
            lines = lines[-room:]
        return Text("\n").join(lines)

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None
        self.step = self.attempt = None
        self.text = ""


class Watcher:
    """Turns stream events into lines on the terminal."""

    def __init__(self, handle: WorkflowHandle, link: str, prompt: bool):
        self.handle = handle
        self.link = link
        self.prompt = prompt and sys.stdin.isatty()
        self.streaming = _Streaming() if console.is_terminal else None
        self.last_text: str | None = None
        self.asked: set[str] = set()
        self.prompts: list[asyncio.Task[None]] = []
        self.started: dict[str, str] = {}  # tool_use_id -> name, for calls still running

    def delta(self, event: dict[str, Any]) -> None:
        if self.streaming is not None:
            self.streaming.add(event["step"], event["attempt"], event["text"])

    def event(self, event: dict[str, Any]) -> bool:
        """Print one event; True when it is the end of the session."""
        if self.streaming is not None:
            self.streaming.stop()
        kind = event["type"]
        if kind == "status":
            console.print(f"[dim]● {event['status'].replace('_', ' ')}[/]")
        elif kind == "turn":
            text = event.get("text") or ""
            retried = f" [yellow](attempt {event['attempt']})[/]" if event.get("attempt", 1) > 1 else ""
            if text:
                console.print(f"[bold]step {event['step']}[/]{retried} {escape(text)}")
                self.last_text = text
            console.print(
                f"[dim]  ↳ {event['stop_reason']} · so far {running_totals(event['step'], event['usage'], event.get('cost_usd'))}[/]"
            )
        elif kind == "tool_call":
            self.started[event["tool_use_id"]] = event["name"]
            console.print(f"  [cyan]→ {event['name']}[/] {escape(shorten(event['input'], 160))}")
        elif kind == "tool_result":
            self.started.pop(event["tool_use_id"], None)
            mark = {"done": "[green]✓[/]", "denied": "[yellow]⊘[/]"}.get(event["status"], "[red]✗[/]")
            took = f" [dim]{_ms(event.get('duration_ms'))}[/]" if event.get("duration_ms") is not None else ""
            state = "" if event["status"] in ("done", "error") else f" {event['status']}"
            console.print(f"    {mark} {event['name']}{state}{took} {escape(shorten(event.get('output') or '', 160))}")
        elif kind == "approval":
            _print_approval_hint(self.handle.id, event["tool_use_id"], event["name"], event["input"])
            if self.prompt and event["tool_use_id"] not in self.asked:
                self.asked.add(event["tool_use_id"])
                self.prompts.append(asyncio.create_task(self._ask(event)))
        elif kind == "decision":
            verb = "[green]approved[/]" if event["approved"] else "[yellow]denied[/]"
            why = f": {escape(event['reason'])}" if event.get("reason") else ""
            console.print(f"  {verb} {event['name']} ({event['tool_use_id']}){why}")
        elif kind == "answered":
            console.print(f"[dim]● waiting for the next message: python client.py send {self.handle.id} \"...\"[/]")
        elif kind == "user_message":
            console.print(f"[bold]you ({event['turn']})[/] {escape(shorten(event['text'], 400))}")
        elif kind == "continued":
            console.print(f"[dim]● continued as new (run {event['run']}, after {event['steps']} steps)[/]")
        elif kind == "end":
            style = STYLE.get(event["status"], "cyan")
            reason = f" ({event['stop_reason']})" if event.get("stop_reason") else ""
            console.print(f"[bold {style}]■ {event['status']}{reason}[/]")
            if event.get("error"):
                console.print(f"[red]error:[/] {escape(event['error'])}")
            if event.get("answer") and event["answer"] != self.last_text:
                console.print(f"\n{escape(event['answer'])}\n")
            console.print(f"[dim]{self.link}[/]")
            return True
        else:
            console.print(f"[dim]● {escape(kind)}[/]")
        return False

    async def _ask(self, event: dict[str, Any]) -> None:
        snapshot = await self.handle.query("status", result_type=SessionStatus)
        if event["tool_use_id"] not in {p.tool_use_id for p in snapshot.pending_approvals}:
            return
        answer = await asyncio.to_thread(input, f"   approve {event['name']}? [y/n] ")
        yes = answer.strip().lower().startswith("y")
        decision = Decision(tool_use_id=event["tool_use_id"], reason=None if yes else "denied at the prompt")
        try:
            # The decision event that follows says what was recorded.
            await self.handle.execute_update("approve_call" if yes else "deny_call", decision, result_type=str)
        except WorkflowUpdateFailedError as err:
            console.print(f"   [red]rejected:[/] {escape(str(err.cause))}")

    def close(self) -> None:
        if self.streaming is not None:
            self.streaming.stop()
        for task in self.prompts:
            task.cancel()


async def print_header(handle: WorkflowHandle) -> None:
    """`watching <id>: <the goal, shortened>` from the workflow's static summary."""
    try:
        described = await handle.describe()
        summary = await described.static_summary()
    except Exception:
        summary = None
    console.print(f"[bold]watching {handle.id}[/]" + (f": {escape(summary)}" if summary else ""))


async def watch(client: Client, handle: WorkflowHandle, link: str, as_json: bool = False, prompt: bool = True) -> int:
    """Follow the session's events from the beginning until it ends; exit 0 if it completed."""
    stream = WorkflowStreamClient.create(client, handle.id)
    watcher = Watcher(handle, link, prompt=prompt and not as_json)
    if not as_json:
        await print_header(handle)
    completed = False
    try:
        async for item in stream.subscribe(["event", "delta"], poll_cooldown=timedelta(milliseconds=200)):
            event = item.data
            if as_json:
                kind = {"type": "delta"} if item.topic == "delta" else {}
                print(json.dumps({"topic": item.topic, "offset": item.offset, **kind, **event}), flush=True)
            elif item.topic == "delta":
                watcher.delta(event)
            else:
                watcher.event(event)
            if item.topic == "event" and event["type"] == "end":
                completed = event["status"] == "completed"
                break
    finally:
        watcher.close()
    return 0 if completed else 2


__all__ = ["FINAL_STATUSES", "watch", "print_status", "print_history", "print_sessions", "shorten"]
