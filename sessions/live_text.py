"""A session's events as its followers see them: the durable ones, and the model's text live.

The durable events (status, turn, tool calls, ...) come at their offsets from the
session's history (sessions/follow.py). The text the model is writing never enters
Temporal: the worker running the call serves it over HTTP (activities/live_server.py), and a follower
reads it there. To find that worker it describes the session (DescribeWorkflowExecution is
not a billable action) when a model call may have begun: when it starts following, and
after each durable event that the next call follows (`running`, a tool's result, a
decision, a user's message, continue-as-new); the pending `call_model` activity names its
attempt and its worker, whose identity carries the live URL. While the attempt waits to
start, or its worker cannot be reached, it looks again with a growing delay (at most
`MAX_RETRY_S`), until the call has ended.

Live text comes as `TextDelta` events with no offset: the first of a call is the text so
far (tagged with step and attempt), then each chunk. A follower never gets the same text
of one attempt twice (a reconnection to the worker sends only what it had not read), and
no live text of a step whose turn it has already read. The model's thinking comes the
same way, as `ThinkingDelta` events (type `thinking_delta`), never as answer text. When the live path is down (a
worker started with `--no-live`, or unreachable), the text comes with the turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import httpx2 as httpx
from pydantic import ValidationError
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from activities.live_server import decode_line, live_url
from infra.errors import ConfigError
from infra.live_auth import bearer, follower_key
from workflows import events as ev

log = logging.getLogger("sessions.live_text")
MODEL_ACTIVITY = "call_model"
FIRST_RETRY_S = 0.1
MAX_RETRY_S = 8.0
DUE_SLACK_S = 0.1  # after a retry's due time, for its worker to pick it up
CONNECT_TIMEOUT_S = 3.0
# The durable events after which the session calls the model next.
NEXT_CALL_AFTER = {"tool_result", "decision", "user_message", "continued"}
_STARTED = (PendingActivityState.PENDING_ACTIVITY_STATE_STARTED, PendingActivityState.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED)  # fmt: skip


@dataclass(frozen=True)
class Item:
    """One event for a follower: `offset` None for live text, which has no place in the stream."""

    offset: int | None
    topic: str
    event: ev.SessionEvent

    def as_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "offset": self.offset, **self.event.model_dump(mode="json")}


def calls_model_next(event: ev.SessionEvent) -> bool:
    """Whether a model call may begin after this durable event."""
    return event.type in NEXT_CALL_AFTER or (
        isinstance(event, ev.StatusChanged) and event.status == "running"
    )


async def session_events(
    client: Client,
    session_id: str,
    from_offset: int = 0,
    *,
    say: Callable[[str], None] | None = None,
) -> AsyncIterator[Item]:
    """The session's events from `from_offset`, and its model's text live, until its `end`."""
    from sessions.follow import follow

    queue: asyncio.Queue[Item | BaseException | None] = asyncio.Queue()
    text = LiveText(client, session_id, queue.put_nowait)

    async def durable() -> None:
        first = True
        try:
            async for raw in follow(client, session_id, from_offset, say=say):
                try:
                    event = ev.read_event(raw.topic, raw.data)
                except ValidationError:
                    log.warning(
                        "session %s: skipping an event this code does not know: %r", session_id, raw.data
                    )
                    continue
                queue.put_nowait(Item(raw.offset, raw.topic, event))
                if first or calls_model_next(event):
                    text.kick()  # after the item: the text comes after what came before it
                first = False
            queue.put_nowait(None)
        except Exception as err:
            queue.put_nowait(err)

    tasks = [
        asyncio.create_task(durable(), name=f"events {session_id}"),
        asyncio.create_task(text.run(), name=f"live text {session_id}"),
    ]
    try:
        while (got := await queue.get()) is not None:
            if isinstance(got, BaseException):
                raise got
            if isinstance(got.event, ev.TurnRecorded):
                text.turned(got.event.step)
            elif (
                isinstance(got.event, (ev.TextDelta, ev.ThinkingDelta))
                and got.offset is None
                and got.event.step <= text.last_turn
            ):
                continue  # its turn is already out, with the whole text
            yield got
            if isinstance(got.event, ev.SessionEnded):
                return
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task


class LiveText:
    """Finds the worker writing the session's model call and relays its text as it comes."""

    def __init__(self, client: Client, session_id: str, put: Callable[[Item], None]):
        self.client = client
        self.session_id = session_id
        self.put = put
        self.last_turn = 0  # the last step whose turn the follower has
        self.describes = 0  # DescribeWorkflowExecution calls made
        self._kicked = asyncio.Event()
        # Characters relayed, by (step, attempt, delta type).
        self._read: dict[tuple[int, int, str], int] = {}

    def kick(self) -> None:
        """A model call may have begun: look for it."""
        self._kicked.set()

    def turned(self, step: int) -> None:
        self.last_turn = max(self.last_turn, step)

    async def run(self) -> None:
        try:
            follower_key()
        except ConfigError as err:  # the text comes with each turn
            log.warning("no live text: %s", err)
            return
        timeout = httpx.Timeout(CONNECT_TIMEOUT_S, read=None)
        async with httpx.AsyncClient(timeout=timeout, trust_env=False) as http:
            while True:
                await self._kicked.wait()
                self._kicked.clear()
                try:
                    await self._relay_call(http)
                except (RPCError, httpx.HTTPError, ValueError) as err:
                    log.debug("session %s: no live text: %s", self.session_id, err)

    async def _relay_call(self, http: httpx.AsyncClient) -> None:
        """The text of the session's model call in progress, if any, until it is done."""
        delay = FIRST_RETRY_S
        while True:
            pending = await self._pending_call()
            if pending is None:
                return  # no model call in progress: the next durable event says when to look
            attempt, url, wait = pending
            if url == "":
                return  # its worker serves no live text: the turn brings it
            if url is not None:
                ended = await self._read_from(http, url, attempt)
                if ended == "done":
                    return  # the turn follows in the durable events
                if ended == "failed":
                    delay = FIRST_RETRY_S  # the next attempt begins after the retry's backoff
            # Look again when the next attempt is due, or after `delay`, or at once when a
            # durable event comes.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kicked.wait(), delay if wait is None else min(wait, MAX_RETRY_S))
            self._kicked.clear()
            delay = FIRST_RETRY_S if wait is not None else min(delay * 2, MAX_RETRY_S)

    async def _pending_call(self) -> tuple[int, str | None, float | None] | None:
        """(attempt, live URL, seconds until the attempt is due) of the session's model call:
        the URL None while the attempt has not started, "" when its worker serves no live
        text; the seconds None unless a retry's backoff says; None when no call is pending."""
        self.describes += 1
        described = await self.client.get_workflow_handle(self.session_id).describe()
        if described.status != WorkflowExecutionStatus.RUNNING:
            return None
        for activity in described.raw_description.pending_activities:
            if activity.activity_type.name != MODEL_ACTIVITY:
                continue
            if activity.state in _STARTED:
                return activity.attempt, live_url(activity.last_worker_identity) or "", None
            due = None
            if activity.HasField("next_attempt_schedule_time"):
                now = datetime.now(UTC)
                due = (
                    max(0.0, (activity.next_attempt_schedule_time.ToDatetime(UTC) - now).total_seconds())
                    + DUE_SLACK_S
                )
            return activity.attempt, None, due
        return None

    async def _read_from(self, http: httpx.AsyncClient, url: str, attempt: int) -> str:
        """Relay the call's text from its worker; how it ended ("done", "failed"), or
        "lost" (not there, or the connection broke)."""
        read: dict[str, int] = {}  # characters of each type this connection has read
        try:
            # A credential of its own for each request (infra/live_auth.py): never logged, never sent on.
            credential = follower_key().mint(self.session_id)
            async with http.stream("GET", f"{url}/live/{quote(self.session_id, safe='')}",
                                   params={"attempt": attempt, "thinking": 1},
                                   headers=bearer(credential)) as response:  # fmt: skip
                if response.status_code != 200:
                    return "lost"
                async for line in response.aiter_lines():
                    if not line.strip():
                        continue
                    got = await decode_line(self.client.data_converter, line)
                    if isinstance(got, str):
                        return got
                    at = read.get(got.type, 0)
                    read[got.type] = at + len(got.text)
                    self._relay(got, at)
        except (httpx.HTTPError, json.JSONDecodeError, KeyError) as err:
            log.debug("session %s: live text from %s: %s", self.session_id, url, err)
        return "lost"

    def _relay(self, delta: ev.TextDelta | ev.ThinkingDelta, at: int) -> None:
        """Pass on what the follower has not had of this attempt's text (or thinking): the
        delta holds its characters from `at` on (a connection starts again from 0), of
        which those before the ones already relayed are left out."""
        key = (delta.step, delta.attempt, delta.type)
        done = self._read.get(key, 0)
        text = delta.text[max(0, done - at) :]
        if text:
            self._read[key] = max(done, at) + len(text)
            self.put(Item(None, ev.DELTA_TOPIC, delta.model_copy(update={"text": text})))
