"""Activity heartbeats: sent only where something reads them, and counted.

Every heartbeat that reaches the server is a billable action on Temporal Cloud. By
default the workflow schedules its activities without a heartbeat timeout
(workflows/options.py), and then nothing reads a heartbeat: the activities send none.
With `worker.py --heartbeat-timeout SECONDS` the model call, tool and MCP activities get
that timeout, and `Heartbeats` beats every third of it, the first beat after one interval
(a call shorter than that sends none): a dead worker's call is noticed within the
timeout, and a cancel reaches the activity within a third of it.

A tool's own `ctx.heartbeat(*details)` is sent with or without a timeout (it is how a long
tool learns that it was cancelled), at most one a second (`TOOL_BEAT_SPACING_S`); beats in
between are folded into the next, and with a timeout into the periodic beat. It may be
called from the thread a synchronous tool runs in.

Each beat sent is counted, and the count travels as the beat's first detail (a tool's
details follow it): a retry reads the last one the server recorded
(`activity.info().heartbeat_details`) and counts on from there, so the reply says how many
the call sent over all its attempts (`ModelReply.heartbeats`, `ToolOutcome.heartbeats`).
The worker's heartbeat throttle is set below the spacing of the beats (worker.py), so the
SDK sends each beat it is given rather than folding two into one.
"""

from __future__ import annotations

import asyncio
import threading
import time
from types import TracebackType
from typing import Any

from temporalio import activity

# A tool's own heartbeats, without a heartbeat timeout: at most one this often.
TOOL_BEAT_SPACING_S = 1.0


class Heartbeats:
    """The heartbeats of one activity attempt (an async context: leaving it stops them).

    Build it inside the activity, on its event loop."""

    def __init__(self) -> None:
        info = activity.info() if activity.in_activity() else None  # None: called directly (tests)
        timeout = info.heartbeat_timeout if info is not None and not info.is_local else None
        # Every third of the timeout: two beats may be late or lost before the server gives up.
        self.every: float | None = timeout.total_seconds() / 3 if timeout else None
        self.sent = carried_count(info.heartbeat_details) if info is not None else 0
        self._local = info is None or info.is_local
        self._details: tuple[Any, ...] = ()
        self._last: float | None = None  # when the last beat was sent (monotonic)
        self._flush: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    async def __aenter__(self) -> Heartbeats:
        if self.every is not None:
            self._task = asyncio.create_task(self._beat_forever(self.every))
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self) -> None:
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None

    def beat(self, *details: Any) -> None:
        """A tool's own heartbeat: sent now, or folded into the next one."""
        if self._local or self._stopped:
            return  # a local activity has no heartbeat of its own; an ended one sends none
        if threading.get_ident() != self._thread:
            self._loop.call_soon_threadsafe(lambda: self.beat(*details))
            return
        self._details = details
        if self.every is not None:
            return  # the periodic beat carries them
        now = time.monotonic()
        if self._last is None or now - self._last >= TOOL_BEAT_SPACING_S:
            self._send()
        elif self._flush is None:
            self._flush = self._loop.call_later(self._last + TOOL_BEAT_SPACING_S - now, self._flushed)

    async def _beat_forever(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            self._send()

    def _flushed(self) -> None:
        self._flush = None
        self._send()

    def _send(self) -> None:
        self.sent += 1
        self._last = time.monotonic()
        activity.heartbeat(self.sent, *self._details)


def carried_count(details: Any) -> int:
    """The heartbeats counted by earlier attempts: the first detail of the last one recorded."""
    if details and isinstance(details[0], int) and not isinstance(details[0], bool):
        return details[0]
    return 0
