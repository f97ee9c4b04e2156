"""Streamed model text, published to the session's event stream while a call runs.

A call shorter than `STREAM_DELTAS_AFTER_S` publishes nothing: the finished turn is
published anyway, and every publish is a signal, which is one more workflow task. Past
it, the text that arrived so far goes out as one delta, then each chunk as it comes,
batched by the stream client. Deltas carry the attempt, so a reader can drop the text of
an attempt that failed.
"""

from __future__ import annotations

import time
from datetime import timedelta
from types import TracebackType

from temporalio.contrib.workflow_streams import WorkflowStreamClient

from activities.wire import TextDelta

STREAM_DELTAS_AFTER_S = 0.5
DELTA_TOPIC = "delta"
BATCH_EVERY = timedelta(milliseconds=300)


class Deltas:
    """The text deltas of one model call (an async context: leaving it flushes them)."""

    def __init__(self, step: int, attempt: int, started: float):
        self._step, self._attempt, self._started = step, attempt, started
        self._backlog: list[str] = []
        self._publisher: WorkflowStreamClient | None = None

    async def on_text(self, text: str) -> None:
        """Take one chunk of the answer's text."""
        self._backlog.append(text)
        if self._publisher is None:
            if time.monotonic() - self._started < STREAM_DELTAS_AFTER_S:
                return
            self._publisher = WorkflowStreamClient.from_within_activity(batch_interval=BATCH_EVERY)
            await self._publisher.__aenter__()
        delta = TextDelta(step=self._step, attempt=self._attempt, text="".join(self._backlog))
        self._publisher.topic(DELTA_TOPIC).publish(delta)
        self._backlog.clear()

    async def __aenter__(self) -> Deltas:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._publisher is not None:
            await self._publisher.__aexit__(kind, err, tb)
