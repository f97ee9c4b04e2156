"""One subscription per session, fanned out to every watcher.

Each poll of a session's stream is an update recorded in the session's history, so the
server never polls once per watcher: a `Feed` polls for all of them and keeps what it read
in a buffer. A watcher (or a reconnecting one) reads the buffer after its offset, then
waits for more. With nobody watching, the feed stops polling after a grace period (a
reconnect within it costs nothing) and forgets its buffer later.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta

from pydantic import ValidationError
from temporalio.client import Client
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from workflows.events import TOPICS, read_event

log = logging.getLogger("service.feeds")
POLL_COOLDOWN = timedelta(milliseconds=200)
STOP_POLLING_AFTER = 30.0  # seconds with no watcher
FORGET_AFTER = 600.0


@dataclass(frozen=True)
class Item:
    offset: int
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
        self.watchers = 0
        self._grew = asyncio.Event()
        self._pump: asyncio.Task | None = None
        self._idle: asyncio.Task | None = None

    def ensure_polling(self) -> None:
        if not self.ended and (self._pump is None or self._pump.done()):
            self._pump = asyncio.create_task(self._poll(), name=f"feed {self.session_id}")

    async def _poll(self) -> None:
        start = self.offsets[-1] + 1 if self.offsets else 0
        stream = WorkflowStreamClient.create(self.client, self.session_id)
        try:
            async for raw in stream.subscribe(TOPICS, from_offset=start, poll_cooldown=POLL_COOLDOWN):
                if self._add(raw.offset, raw.topic, raw.data):
                    break
            self.ended = True
        except asyncio.CancelledError:
            raise
        except Exception:
            # The watchers see the stream end; a reconnect starts a new poll from here.
            log.exception("stream of session %s failed", self.session_id)
        finally:
            self._wake()

    def _add(self, offset: int, topic: str, data: object) -> bool:
        """Buffer one item; True when it is the session's `end`."""
        try:
            event = read_event(topic, data)
        except ValidationError:
            log.warning("session %s: skipping an event this server does not know: %r", self.session_id, data)
            return False
        self.items.append(Item(offset, event.type, json.dumps(event.model_dump(mode="json"))))
        self.offsets.append(offset)
        self._wake()
        return event.type == "end"

    def _wake(self) -> None:
        self._grew.set()
        self._grew = asyncio.Event()

    def finished_after(self, after: int) -> bool:
        """Whether nothing will ever come after this offset."""
        return self.ended and (not self.offsets or self.offsets[-1] <= after)

    async def follow(self, after: int) -> AsyncIterator[Item]:
        """The items after offset `after`, as they arrive, until the session's end."""
        index = bisect.bisect_right(self.offsets, after)
        while True:
            while index < len(self.items):
                yield self.items[index]
                index += 1
            if self.ended or self._pump is None or self._pump.done():
                return
            grew = self._grew
            await grew.wait()

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
