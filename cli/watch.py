"""`watch`: a session's events, from its start, then live until it ends.

It reads the session's event stream (Temporal's workflow streams) through the typed
events of `workflows/events.py`, by replaying the session's history here (sessions/follow.py:
no billable action, however many watch), so it shows what already happened and then follows,
whether attached mid-run, after a restart or after the end; the model's text comes live from
the worker writing it, outside Temporal (sessions/live_text.py). `--json` prints every event, one
per line, as the same types serialise, with its `offset` in the stream; live text (`delta`)
has none (`"offset": null`): the turn that follows carries the whole text. The model's
thinking comes the same way as `thinking_delta` events, shown dimmed before the text in a
terminal; it is never the answer. A session whose workflow task keeps failing is reported
as stuck while the watch goes on. A session that continued as new keeps only its last
events in the stream (workflows/archive.py): the watch starts at the first it holds and
says that the rest is in `client.py history ID`.
"""

from __future__ import annotations

import asyncio
import json
import sys

from rich.live import Live
from rich.markup import escape
from rich.text import Text
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from activities.wire import Usage
from cli.render import (
    CALL_MARK,
    STYLE,
    console,
    print_approval_hint,
    print_event_hint,
    print_limit_hint,
    print_sleeping,
    print_stuck,
)
from infra.errors import AgentError
from sessions import control
from sessions.live_text import session_events
from sessions.text import shorten
from workflows import events as ev
from workflows.agent import AgentWorkflow
from workflows.contract import Decision

STUCK_CHECK_EVERY_S = 5.0


def _ms(value: int | None) -> str:
    if value is None:
        return ""
    return f"{value} ms" if value < 1000 else f"{value / 1000:.1f} s"


def running_totals(step: int, usage: Usage, cost: float | None) -> str:
    """`2 steps · 1,234 tokens (in 1,000 · out 234 · cache read 0 write 0) · $0.0123`."""
    text = (
        f"{step} step{'s' if step != 1 else ''} · {usage.total():,} tokens "
        f"(in {usage.input_tokens:,} · out {usage.output_tokens:,}"
    )
    if usage.cache_read_input_tokens or usage.cache_creation_input_tokens:
        text += f" · cache read {usage.cache_read_input_tokens:,} write {usage.cache_creation_input_tokens:,}"
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
        self.thinking = ""
        self.text = ""
        self.live: Live | None = None

    def add(self, delta: ev.TextDelta | ev.ThinkingDelta) -> None:
        if (delta.step, delta.attempt) != (self.step, self.attempt):
            # A new step, or a retried attempt: its partial text is replaced.
            self.text = self.thinking = ""
        self.step, self.attempt = delta.step, delta.attempt
        if isinstance(delta, ev.ThinkingDelta):
            self.thinking += delta.text
        else:
            self.text += delta.text
        if self.live is None:
            self.live = Live(self._render(), console=console, transient=True, auto_refresh=False)
            self.live.start()
        self.live.update(self._render(), refresh=True)

    def _render(self) -> Text:
        head = Text(f"step {self.step}", style="bold")
        if self.attempt and self.attempt > 1:
            head.append(f" (attempt {self.attempt})", style="yellow")
        head.append(" ▍ ", style="dim")
        body = head + Text(self.thinking, style="dim")
        if self.thinking and self.text:
            body.append("\n")
        body.append(self.text)
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
        self.text = self.thinking = ""


class Watcher:
    """Turns session events into lines on the terminal."""

    def __init__(self, client: Client, handle: WorkflowHandle, link: str, prompt: bool):
        self.client = client
        self.handle = handle
        self.link = link
        self.prompt = prompt and sys.stdin.isatty()
        self.streaming = _Streaming() if console.is_terminal else None
        self.last_text: str | None = None
        self.asked: set[str] = set()
        self.prompts: list[asyncio.Task[None]] = []

    def show(self, event: ev.SessionEvent) -> bool:
        """Print one event; True when it is the end of the session."""
        if isinstance(event, (ev.TextDelta, ev.ThinkingDelta)):
            if self.streaming is not None:
                self.streaming.add(event)
            return False
        if self.streaming is not None:
            self.streaming.stop()
        printer = getattr(self, f"_on_{event.type}", None)
        if printer is None:
            console.print(f"[dim]● {escape(event.type)}[/]")
            return False
        printer(event)
        return isinstance(event, ev.SessionEnded)

    def _on_status(self, event: ev.StatusChanged) -> None:
        console.print(f"[dim]● {event.status.replace('_', ' ')}[/]")

    def _on_turn(self, event: ev.TurnRecorded) -> None:
        retried = f" [yellow](attempt {event.attempt})[/]" if event.attempt > 1 else ""
        if event.text:
            console.print(f"[bold]step {event.step}[/]{retried} {escape(event.text)}")
            self.last_text = event.text
        totals = running_totals(event.step, event.usage, event.cost_usd)
        console.print(f"[dim]  ↳ {event.stop_reason} · so far {totals}[/]")

    def _on_tool_call(self, event: ev.ToolCallStarted) -> None:
        console.print(f"  [cyan]→ {event.name}[/] {escape(shorten(event.input, 160))}")

    def _on_tool_result(self, event: ev.ToolCallEnded) -> None:
        mark = CALL_MARK.get(event.status, "[red]✗[/]")
        took = f" [dim]{_ms(event.duration_ms)}[/]" if event.duration_ms is not None else ""
        state = "" if event.status in ("done", "error") else f" {event.status}"
        console.print(f"    {mark} {event.name}{state}{took} {escape(shorten(event.output or '', 160))}")

    def _on_approval(self, event: ev.ApprovalRequested) -> None:
        print_approval_hint(self.handle.id, event.tool_use_id, event.name, event.input, event.reason)
        if self.prompt and event.tool_use_id not in self.asked:
            self.asked.add(event.tool_use_id)
            self.prompts.append(asyncio.create_task(self._ask(event)))

    def _on_decision(self, event: ev.DecisionRecorded) -> None:
        verb = "[green]approved[/]" if event.approved else "[yellow]denied[/]"
        why = f": {escape(event.reason)}" if event.reason else ""
        who = f" by {escape(event.decided_by)}" if event.decided_by else ""
        who += f" for {escape(event.on_behalf_of)}" if event.on_behalf_of else ""
        console.print(f"  {verb} {event.name} ({event.tool_use_id}){who}{why}")
        if event.input is not None:
            console.print(f"    [yellow]with an edited input:[/] {escape(shorten(event.input, 160))}")

    def _on_sleeping(self, event: ev.Sleeping) -> None:
        print_sleeping(event.until, event.reason)

    def _on_waiting_event(self, event: ev.WaitingEvent) -> None:
        print_event_hint(self.handle.id, event.name, event.until)

    def _on_event_received(self, event: ev.EventReceived) -> None:
        console.print(f"  [green]event[/] {escape(event.name)} received")

    def _on_limit_reached(self, event: ev.LimitWait) -> None:
        print_limit_hint(self.handle.id, event.name, event.limit, event.used)

    def _on_limit_raised(self, event: ev.LimitRaised) -> None:
        who = f" by {escape(event.decided_by)}" if event.decided_by else ""
        console.print(f"  [green]{escape(event.name)} raised[/] to {event.value:g}{who}")

    def _on_answered(self, event: ev.Answered) -> None:
        console.print(f'[dim]● waiting for the next message: python client.py send {self.handle.id} "..."[/]')

    def _on_user_message(self, event: ev.UserMessageTaken) -> None:
        console.print(f"[bold]you ({event.turn})[/] {escape(shorten(event.text, 400))}")

    def _on_message_delivered(self, event: ev.MessageDelivered) -> None:
        console.print(f"[dim]● message {event.id} delivered to the model (step {event.step})[/]")

    def _on_continued(self, event: ev.ContinuedAsNew) -> None:
        console.print(f"[dim]● continued as new (run {event.run}, after {event.steps} steps)[/]")

    def _on_end(self, event: ev.SessionEnded) -> None:
        style = STYLE.get(event.status, "cyan")
        reason = f" ({event.stop_reason})" if event.stop_reason else ""
        console.print(f"[bold {style}]■ {event.status}{reason}[/]")
        if event.error:
            console.print(f"[red]error:[/] {escape(event.error)}")
        if event.answer and event.answer != self.last_text:
            console.print(f"\n{escape(event.answer)}\n")
        console.print(f"[dim]{self.link}[/]")

    async def _ask(self, event: ev.ApprovalRequested) -> None:
        snapshot = await control.status(self.client, self.handle.id)
        if event.tool_use_id not in {p.tool_use_id for p in snapshot.pending_approvals}:
            return
        answer = await asyncio.to_thread(input, f"   approve {event.name}? [y/n] ")
        yes = answer.strip().lower().startswith("y")
        decision = Decision(
            tool_use_id=event.tool_use_id,
            reason=None if yes else "denied at the prompt",
            decided_by=control.cli_user(),
        )
        update = AgentWorkflow.approve_call if yes else AgentWorkflow.deny_call
        try:
            # The decision event that follows says what was recorded.
            await control.act(self.client, self.handle.id, update, decision)
        except AgentError as err:
            console.print(f"   [red]rejected:[/] {escape(str(err))}")

    async def watch_for_stuck(self) -> None:
        """Say so, once per failure, when the session's workflow task keeps failing."""
        reported = None
        while True:
            await asyncio.sleep(STUCK_CHECK_EVERY_S)
            try:
                stuck = await control.stuck_task(self.client, self.handle)
            except AgentError:
                continue
            if stuck is not None and stuck.since != reported:
                reported = stuck.since
                if self.streaming is not None:
                    self.streaming.stop()
                print_stuck(stuck)

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


async def watch(
    client: Client, handle: WorkflowHandle, link: str, as_json: bool = False, prompt: bool = True
) -> int:
    """Follow the session's events from the beginning until it ends; exit 0 if it completed.

    While the session is stuck its stream cannot be read (every read is an update, which
    the server refuses while the workflow task fails): the watch says why and reads again
    from where it was, every few seconds, until a fixed worker runs the session."""
    watcher = Watcher(client, handle, link, prompt=prompt and not as_json)
    if not as_json:
        await print_header(handle)
    stuck = asyncio.create_task(watcher.watch_for_stuck()) if not as_json else None
    offset = 0
    try:
        while True:
            try:
                ended = await _follow(client, handle, watcher, as_json, offset)
                return 0 if ended == "completed" else 2
            except _Interrupted as interrupted:
                offset = interrupted.offset
                await asyncio.sleep(STUCK_CHECK_EVERY_S)
    finally:
        if stuck is not None:
            stuck.cancel()
        watcher.close()


def _earlier_events_gone(session_id: str, first: int, as_json: bool) -> None:
    line = (
        f"events before {first} are no longer in the stream (the session continued as new); "
        f"the whole session: python client.py history {session_id}"
    )
    if as_json:  # standard output carries session events only
        print(line, file=sys.stderr, flush=True)
    else:
        console.print(f"[dim]● {escape(line)}[/]")


def _say(why: str) -> None:
    print(why, file=sys.stderr, flush=True)


class _Interrupted(Exception):
    def __init__(self, offset: int):
        self.offset = offset


async def _follow(
    client: Client, handle: WorkflowHandle, watcher: Watcher, as_json: bool, offset: int
) -> str:
    """Print events from `offset` until the end event; the session's final status."""
    try:
        async for item in session_events(client, handle.id, offset, say=_say):
            if item.offset is not None:
                if item.offset > offset:  # the stream no longer holds the events before it
                    _earlier_events_gone(handle.id, item.offset, as_json)
                offset = item.offset + 1
            if as_json:
                print(json.dumps(item.as_json()), flush=True)
            else:
                watcher.show(item.event)
            if isinstance(item.event, ev.SessionEnded):
                return item.event.status
    except RPCError as err:
        if "failed state" not in err.message:
            raise
        if as_json:  # standard output carries session events only
            print(f"session {handle.id} is stuck ({err.message}); reading again", file=sys.stderr, flush=True)
        raise _Interrupted(offset) from None
    return "unknown"
