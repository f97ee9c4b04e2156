"""What the client prints: status, history and session lists (`rich`). The live view is
in `cli/watch.py`."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sessions.text import shorten
from workflows.contract import SessionHistory, SessionStatus, StuckTask

console = Console(highlight=False, soft_wrap=True)
STYLE = {
    "completed": "green",
    "stopped": "yellow",
    "failed": "red",
    "cancelled": "magenta",
    "stuck": "bold red",
}
CALL_MARK = {"done": "[green]✓[/]", "denied": "[yellow]⊘[/]", "unknown": "[yellow]?[/]"}


def print_status(snapshot: SessionStatus, link: str) -> None:
    style = STYLE.get(snapshot.status, "cyan")
    head = f"[bold]{snapshot.session_id}[/] [{style}]{snapshot.status}[/]"
    if snapshot.stop_reason:
        head += f" ({snapshot.stop_reason})"
    console.print(head)
    console.print(
        f"steps {snapshot.steps} · {_totals(snapshot.usage.model_dump(), snapshot.cost_usd)} · "
        f"{snapshot.temporal_actions} Temporal actions · {snapshot.worked_seconds:.1f} s worked"
    )
    if snapshot.model_in_use and snapshot.model_in_use != snapshot.model:
        console.print(
            f"[yellow]model in use:[/] {escape(snapshot.model_in_use)} (a fallback of {escape(snapshot.model)})"
        )
    if snapshot.waiting_for is not None:
        print_event_hint(snapshot.session_id, snapshot.waiting_for.name, snapshot.waiting_for.until)
    if snapshot.wake_at is not None:
        print_sleeping(snapshot.wake_at, "")
    for pending in snapshot.pending_approvals:
        print_approval_hint(
            snapshot.session_id, pending.tool_use_id, pending.name, pending.input, pending.reason
        )
    if snapshot.limit_reached is not None and snapshot.status == "waiting_budget":
        reached = snapshot.limit_reached
        print_limit_hint(snapshot.session_id, reached.name, reached.limit, reached.used)
    for repeat in snapshot.repeats[:3]:
        kind = "the same input" if repeat.kind == "input" else "the same output in a row"
        console.print(f"[dim]repeats: {escape(repeat.name)} {repeat.count} times with {kind}[/]")
    if snapshot.stuck is not None:
        print_stuck(snapshot.stuck)
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
            f"{turn.usage.total()} tokens"
            + (f" · ${turn.cost_usd:.4f}" if turn.cost_usd is not None else "")
            + f" · {turn.temporal_actions} actions"
        )
        for tried in turn.fallback:
            console.print(f"[yellow]fell back from {escape(tried.model)}:[/] {escape(tried.reason)}")
        if turn.text:
            console.print(escape(turn.text))
        for tool_use_id in turn.tool_use_ids:
            call = calls.get(tool_use_id)
            if call:
                mark = CALL_MARK.get(call.status, "[red]✗[/]")
                took = f" ({call.duration_ms} ms)" if call.duration_ms is not None else ""
                console.print(f"  → {call.name} {escape(shorten(call.input, 100))}")
                if call.approved_input is not None:
                    console.print(
                        f"    [yellow]edited before approval:[/] {escape(shorten(call.approved_input, 100))}"
                    )
                if call.decided_by:
                    verb = "approved" if call.approved else "decided"
                    behalf = f" for {escape(call.on_behalf_of)}" if call.on_behalf_of else ""
                    console.print(f"    [dim]{verb} by {escape(call.decided_by)}{behalf}[/]")
                console.print(f"    {mark} {call.status}{took}: {escape(shorten(call.output or '', 160))}")
    final = found.status
    console.print(
        f"\n[{STYLE.get(final.status, 'cyan')}]{final.status}[/]"
        + (f" ({final.stop_reason})" if final.stop_reason else "")
        + f" · {found.temporal_actions} Temporal actions"
    )
    if final.error:
        console.print(f"[red]error:[/] {escape(final.error)}")


LIST_COLUMNS = ("session_id", "status", "steps", "tokens", "pending_approvals", "user", "started", "actions")
HEADINGS = ("session", "status", "steps", "tokens", "approvals", "user", "started", "actions")


def print_sessions(rows: list[dict[str, Any]], as_json: bool) -> None:
    """A table in a terminal, tab-separated lines in a pipe. Ids, users and times are never
    shortened: in a narrow terminal the table wraps them instead."""
    if as_json:
        for row in rows:
            print(json.dumps(row))
        return
    cells = [_cells(row) for row in rows]
    if not console.is_terminal:
        for line in [list(HEADINGS), *cells]:
            print("\t".join(line))
        return
    table = Table(*HEADINGS, box=None)
    for column in table.columns:
        column.overflow = "fold"
        column.no_wrap = False
    for line in cells:
        table.add_row(*line)
    console.print(table)


def _cells(row: dict[str, Any]) -> list[str]:
    """A row's cells; a row read from the index alone (its session not replayable here) shows
    its figures with the time they were indexed, and `?` for what the index does not hold."""
    cells = [str(row[k]) if row.get(k) is not None else "-" for k in LIST_COLUMNS]
    if row.get("unavailable"):
        at = (
            datetime.fromisoformat(row["as_of"]).astimezone(UTC).strftime("%H:%M:%S")
            if row.get("as_of")
            else "?"
        )
        for column in ("steps", "tokens", "pending_approvals"):
            i = LIST_COLUMNS.index(column)
            cells[i] = f"{cells[i]} (as of {at})"
        cells[LIST_COLUMNS.index("actions")] = "?"
    return cells


def print_stuck(stuck: StuckTask) -> None:
    console.print(
        f"[bold red]stuck:[/] its workflow task has failed {stuck.attempts} times since "
        f"{stuck.since.isoformat(timespec='seconds')}: {escape(stuck.message)}"
    )
    console.print("   fix the worker's code and redeploy it: the session carries on from where it stopped")


def _totals(usage: dict[str, Any], cost: float | None) -> str:
    text = (
        f"tokens in {usage['input_tokens']} out {usage['output_tokens']} "
        f"cache read {usage['cache_read_input_tokens']} write {usage['cache_creation_input_tokens']}"
    )
    return text + (f" · ${cost:.4f}" if cost is not None else "")


def print_approval_hint(
    session_id: str, tool_use_id: str, name: str, arguments: Any, reason: str | None = None
) -> None:
    console.print(f"[yellow]⏸ waiting for approval:[/] {name} {escape(shorten(arguments, 200))}")
    if reason:
        console.print(f"   [yellow]because[/] {escape(reason)}")
    console.print(f"   approve: python client.py approve {session_id} {tool_use_id}")
    console.print(f'   deny:    python client.py deny {session_id} {tool_use_id} --reason "..."')


def print_limit_hint(session_id: str, name: str, limit: float, used: float) -> None:
    flag = "--" + name.replace("_", "-")
    console.print(f"[yellow]⏸ waiting at {name}:[/] {used:g} used of {limit:g}")
    console.print(f"   raise:   python client.py raise {session_id} {flag} NEW")
    console.print(f"   decline: python client.py raise {session_id} --decline")


def print_event_hint(session_id: str, name: str, until: datetime) -> None:
    console.print(f"  [cyan]waiting for event[/] {escape(name)} until {_at(until)}")
    console.print(f"[dim]    python client.py event {session_id} {escape(name)} --data '...'[/]")


def print_sleeping(until: datetime, reason: str) -> None:
    console.print(f"  [cyan]sleeping[/] until {_at(until)}" + (f": {escape(reason)}" if reason else ""))


def _at(when: datetime) -> str:
    """A wall-clock time in UTC, to the second."""
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def print_agents(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        for row in rows:
            print(json.dumps(row))
        return
    if not rows:
        console.print("no agents defined (see AGENT_DEFINITIONS in the README)")
    for row in rows:
        default = " [dim](default)[/]" if row["default"] else ""
        console.print(f"[bold]{escape(row['name'])}[/]{default} · {escape(row['model'])}")
        if row["description"]:
            console.print(f"  {escape(row['description'])}")
        tools = ", ".join(row["tools"]) if row["tools"] is not None else "all of the worker's"
        console.print(f"  tools: {escape(tools)}")
        for key in ("mcp_servers", "subagents"):
            if row[key]:
                console.print(f"  {key.replace('_', ' ')}: {escape(', '.join(row[key]))}")


def print_schedules(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        for row in rows:
            print(json.dumps(row))
        return
    if not rows:
        console.print("no schedules")
    for row in rows:
        state = " [yellow](paused)[/]" if row["paused"] else ""
        console.print(
            f"[bold]{escape(row['name'])}[/]{state} · {escape(row['spec'])} · next {row['next_run'] or '-'}"
        )
        for session in row["recent_sessions"][-3:]:
            console.print(f"  {escape(session)}")


def print_memories(found: list[Any], as_json: bool) -> None:
    """A scope's memories: `[key] text`, newest first, or one JSON object per line."""
    if as_json:
        for memory in found:
            print(memory.model_dump_json())
        return
    if not found:
        console.print("[dim]no memories[/]")
    for memory in found:
        console.print(f"[bold]{escape(memory.key)}[/] [dim]{_at(memory.at)}[/] {escape(memory.text)}")
