"""Streamed model text, kept in this worker process while a call runs; never sent to Temporal.

The model activity writes each chunk of the answer's text into `LIVE`, the process's calls
in progress, keyed by session, step and attempt. The worker's live server (activities/live_server.py)
reads them out to followers over HTTP: the text so far, then each chunk as it comes, until
the call ends. The model's thinking, where it streams any, travels the same way as
`ThinkingDelta`s, never mixed into the answer's text. Nothing here is a signal, an update or a heartbeat: a step costs the same
in Temporal whether anyone follows it or not, and the finished turn (in history) carries
the whole text.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import TracebackType

from activities.wire import TextDelta, ThinkingDelta

TEXT, THINKING = "text", "thinking"


class LiveCall:
    """The text of one model call attempt so far, and whether (and how) it has ended."""

    def __init__(self, session_id: str, step: int, attempt: int):
        self.session_id, self.step, self.attempt = session_id, step, attempt
        self.chunks: list[tuple[str, str]] = []  # (TEXT or THINKING, the chunk)
        self.ended: str | None = None  # "done" or "failed" once the call has ended
        self._grew = asyncio.Event()

    def write(self, text: str, kind: str = TEXT) -> None:
        if text:
            self.chunks.append((kind, text))
            self._wake()

    def end(self, how: str) -> None:
        self.ended = how
        self._wake()

    def _wake(self) -> None:
        self._grew.set()
        self._grew = asyncio.Event()

    async def follow(self, thinking: bool = False) -> AsyncIterator[TextDelta | ThinkingDelta]:
        """The text so far as one delta (if any), then what arrives, until the call ends;
        with `thinking`, the thinking too, as deltas of its own.

        Chunks of one kind that arrived while the reader was busy come out joined, as one delta."""
        sent = 0
        while True:
            grew = self._grew
            if len(self.chunks) > sent:
                new = self.chunks[sent:]
                sent = len(self.chunks)
                for kind, text in _runs(new):
                    if kind == TEXT:
                        yield TextDelta(step=self.step, attempt=self.attempt, text=text)
                    elif thinking:
                        yield ThinkingDelta(step=self.step, attempt=self.attempt, text=text)
                continue
            if self.ended is not None:
                return
            await grew.wait()


def _runs(chunks: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Consecutive chunks of one kind joined."""
    runs: list[tuple[str, str]] = []
    for kind, text in chunks:
        if runs and runs[-1][0] == kind:
            runs[-1] = (kind, runs[-1][1] + text)
        else:
            runs.append((kind, text))
    return runs


class LiveCalls:
    """The model calls in progress in this process, by session."""

    def __init__(self) -> None:
        self._calls: dict[str, list[LiveCall]] = {}
        self._opened = asyncio.Event()

    def open(self, session_id: str, step: int, attempt: int) -> LiveCall:
        call = LiveCall(session_id, step, attempt)
        self._calls.setdefault(session_id, []).append(call)
        self._opened.set()
        self._opened = asyncio.Event()
        return call

    def close(self, call: LiveCall, how: str) -> None:
        call.end(how)
        calls = self._calls.get(call.session_id, [])
        if call in calls:
            calls.remove(call)
        if not calls:
            self._calls.pop(call.session_id, None)

    def current(self, session_id: str, attempt: int = 0) -> LiveCall | None:
        """The session's latest call in progress here (of at least that attempt), if any."""
        calls = [c for c in self._calls.get(session_id, []) if c.attempt >= attempt]
        return max(calls, key=lambda c: (c.step, c.attempt), default=None)

    async def wait_for(self, session_id: str, attempt: int, timeout: float) -> LiveCall | None:
        """`current`, waiting up to `timeout` seconds for the call to begin."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (call := self.current(session_id, attempt)) is None:
            left = deadline - loop.time()
            if left <= 0:
                return None
            opened = self._opened
            try:
                await asyncio.wait_for(opened.wait(), left)
            except TimeoutError:
                return None
        return call

    def __len__(self) -> int:
        return sum(len(calls) for calls in self._calls.values())


LIVE = LiveCalls()  # this process's; the worker's live server serves them


class Deltas:
    """The text deltas of one model call (an async context: leaving it ends the call's text)."""

    def __init__(self, session_id: str, step: int, attempt: int, calls: LiveCalls = LIVE):
        self._key = (session_id, step, attempt)
        self._calls = calls
        self._call: LiveCall | None = None

    async def on_text(self, text: str) -> None:
        """Take one chunk of the answer's text."""
        if self._call is not None:
            self._call.write(text)

    async def on_thinking(self, text: str) -> None:
        """Take one chunk of the model's thinking."""
        if self._call is not None:
            self._call.write(text, THINKING)

    async def __aenter__(self) -> Deltas:
        self._call = self._calls.open(*self._key)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._call is not None:
            self._calls.close(self._call, "done" if kind is None else "failed")
