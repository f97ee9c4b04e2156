"""One subscription per session, fanned out to every watcher.

A session's events are read from its history and replayed here (sessions/follow.py), which
costs CPU in proportion to the run's length, so the server never reads once per watcher: a
`Feed` reads for all of them and keeps what it read
in a buffer. A watcher (or a reconnecting one) reads the buffer after its offset, then
waits for more. With nobody watching, the feed stops polling after a grace period (a
reconnect within it costs nothing) and forgets its buffer later.

The model's text comes live from the worker writing it (sessions/live_text.py), once per feed
too. It is not buffered as events are: the feed keeps the text of the call in progress,
and a watcher that joins (or reconnects) mid-call first gets it as one delta, then each
new piece; those deltas have no offset (no SSE `id:`). The model's thinking is kept and
sent the same way, as `thinking_delta` events, before the text.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from temporalio.client import Client

from sessions.live_text import session_events
from workflows import events as ev

log = logging.getLogger("service.feeds")
STOP_POLLING_AFTER = 30.0  # seconds with no watcher
FORGET_AFTER = 600.0


@dataclass(frozen=True)
class Item:
    offset: int | None  # None: live text, which has no place in the stream
    type: str
    data: str  # the event as JSON


class Feed:
    """A session's events: the buffer so far and the one subscription that extends it."""

    def __init__(self, client: Client, session_id: str):
        self.client = client
        self.session_id = session_id
        self.items: list[Item] = []
        self.offsets: list[int] = []
        self.ended = False  # the `end` event was read, or the stream finished
        # The text and the thinking of the model call in progress so far, by delta type.
        self.live: dict[str, ev.TextDelta | ev.ThinkingDelta] = {}
        self.watchers = 0
        self._grew = asyncio.Event()
        self._pump: asyncio.Task | None = None
        self._idle: asyncio.Task | None = None

    def ensure_polling(self) -> None:
        if not self.ended and (self._pump is None or self._pump.done()):
            self._pump = asyncio.create_task(self._poll(), name=f"feed {self.session_id}")

    async def _poll(self) -> None:
        start = self.offsets[-1] + 1 if self.offsets else 0
        self.live = {}  # a new reader sends the call's text so far again
        try:
            async for item in session_events(self.client, self.session_id, start):
                if item.offset is None:
                    self._add_text(item.event)
                elif self._add(item.offset, item.event):
                    break
            self.ended = True
        except asyncio.CancelledError:
            raise
        except Exception:
            # The watchers see the stream end; a reconnect starts a new poll from here.
            log.exception("stream of session %s failed", self.session_id)
        finally:
            self._wake()

    def _add(self, offset: int, event: ev.SessionEvent) -> bool:
        """Buffer one item; True when it is the session's `end`."""
        self.items.append(Item(offset, event.type, json.dumps(event.model_dump(mode="json"))))
        self.offsets.append(offset)
        if isinstance(event, ev.SessionEnded):
            self.live = {}
        elif isinstance(event, ev.TurnRecorded):
            # The turn carries the whole text.
            self.live = {k: d for k, d in self.live.items() if d.step > event.step}
        self._wake()
        return event.type == "end"

    def _add_text(self, delta: ev.SessionEvent) -> None:
        """Extend the live text of the call in progress (a new step or attempt replaces it)."""
        if not isinstance(delta, (ev.TextDelta, ev.ThinkingDelta)):
            return
        live = self.live.get(delta.type)
        if live is not None and (live.step, live.attempt) == (delta.step, delta.attempt):
            self.live[delta.type] = live.model_copy(update={"text": live.text + delta.text})
        else:
            self.live[delta.type] = delta
        self._wake()

    def _wake(self) -> None:
        self._grew.set()
        self._grew = asyncio.Event()

    async def first_offset(self) -> int | None:
        """The first offset the buffer holds, once the feed has read one; None if it never
        will. A continued-as-new session's stream keeps only its last events
        (workflows/archive.py): the buffer starts where the stream did when the feed began."""
        while not self.offsets:
            if self.ended or self._pump is None or self._pump.done():
                return None
            grew = self._grew
            await grew.wait()
        return self.offsets[0]

    def finished_after(self, after: int) -> bool:
        """Whether nothing will ever come after this offset."""
        return self.ended and (not self.offsets or self.offsets[-1] <= after)

    async def follow(self, after: int) -> AsyncIterator[Item]:
        """The items after offset `after`, as they arrive, until the session's end; and the
        live text: first what the call in progress has written so far, then each new piece."""
        index = bisect.bisect_right(self.offsets, after)
        # By delta type: the (step, attempt) of the live text sent, and its characters sent.
        shown: dict[str, tuple[int, int]] = {}
        sent: dict[str, int] = {}
        while True:
            if index < len(self.items):
                yield self.items[index]
                index += 1
                continue
            piece = self._next_piece(shown, sent)
            if piece is not None:
                yield Item(None, piece.type, json.dumps(piece.model_dump(mode="json")))
                continue
            if self.ended or self._pump is None or self._pump.done():
                return
            grew = self._grew
            await grew.wait()

    def _next_piece(
        self, shown: dict[str, tuple[int, int]], sent: dict[str, int]
    ) -> ev.TextDelta | ev.ThinkingDelta | None:
        """What a watcher has not had of the live thinking, then of the live text."""
        for kind in ("thinking_delta", "delta"):
            live = self.live.get(kind)
            if live is None:
                continue
            if (live.step, live.attempt) != shown.get(kind):
                shown[kind], sent[kind] = (live.step, live.attempt), 0
            if len(live.text) > sent[kind]:
                piece = live.model_copy(update={"text": live.text[sent[kind] :]})
                sent[kind] = len(live.text)
                return piece
        return None

    def stop(self) -> None:
        for task in (self._pump, self._idle):
            if task is not None and not task.done():
                task.cancel()


class Feeds:
    """The feeds of the sessions being watched, by session id."""

    def __init__(self, client: Client):
        self.client = client
        self.feeds: dict[str, Feed] = {}

    def join(self, session_id: str) -> Feed:
        feed = self.feeds.get(session_id)
        if feed is None:
            feed = self.feeds[session_id] = Feed(self.client, session_id)
        if feed._idle is not None:
            feed._idle.cancel()
            feed._idle = None
        feed.watchers += 1
        feed.ensure_polling()
        return feed

    def leave(self, feed: Feed) -> None:
        feed.watchers -= 1
        if feed.watchers == 0:
            feed._idle = asyncio.create_task(self._retire(feed))

    async def _retire(self, feed: Feed) -> None:
        await asyncio.sleep(STOP_POLLING_AFTER)
        if feed._pump is not None:
            feed._pump.cancel()
        await asyncio.sleep(FORGET_AFTER)
        if self.feeds.get(feed.session_id) is feed:
            del self.feeds[feed.session_id]

    def close(self) -> None:
        for feed in self.feeds.values():
            feed.stop()
        self.feeds.clear()
