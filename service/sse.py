"""`GET /v1/sessions/{id}/events`: the session's events as Server-Sent Events.

`id:` is the event's offset in the session's stream, `event:` its type, `data:` its JSON
(the typed events of `workflows.events`, text deltas included). A client resumes after
`Last-Event-ID` (or `?after=N`) and loses and repeats no event. The model's text deltas,
read live from the worker writing them (sessions/live_text.py), are not in the stream and have
no `id:`: a client that connects or reconnects mid-call first gets one delta with the
text so far (tagged with step and attempt), then the rest; the turn that follows carries
the whole text. The stream ends after the `end` event; when nothing can follow the
client's offset, the answer is 204, which tells an EventSource to stop reconnecting.
A session that continued as new keeps only its last events in the stream
(workflows/archive.py): a client without an offset gets them from the first kept, and a
client resuming after an offset that is gone gets 410 with
`{"error": {"type": "gone", "first": N}}` (the whole story is in the session's history).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse, ServerSentEvent

from service.feeds import Feed, Feeds
from service.routes import ERRORS, Caller, Owned

router = APIRouter(prefix="/v1/sessions", tags=["events"])
KEEP_ALIVE_SECONDS = 10
FIRST_OFFSET_WAIT_SECONDS = 10.0


@router.get(
    "/{session_id}/events",
    responses={**ERRORS, 200: {"content": {"text/event-stream": {}}, "description": "the events"},
               204: {"description": "the session has ended and nothing follows this offset"},
               410: {"description": "the events after this offset are no longer in the stream: "
                                    '`{"error": {"type": "gone", "first": N}}`, N the first it holds'}},
)  # fmt: skip
async def events(
    request: Request,
    session_id: str,
    user: Caller,
    owned: Owned,
    after: Annotated[int | None, Query(ge=-1, description="resume after this event id")] = None,
    last_event_id: Annotated[
        int | None, Header(ge=-1, description="sent by EventSource on reconnect")
    ] = None,
) -> Response:
    """Follow the session's events from the start, or after the given offset."""
    await owned.check(user, session_id)
    offset = last_event_id if last_event_id is not None else after if after is not None else -1
    feeds: Feeds = request.app.state.feeds
    feed = feeds.join(session_id)
    if offset >= 0 and (first := await _first_offset(feed)) is not None and offset + 1 < first:
        feeds.leave(feed)
        return _gone(session_id, first)
    if feed.finished_after(offset):
        feeds.leave(feed)
        return Response(status_code=204)
    return EventSourceResponse(
        _relay(feeds, feed, offset), ping=KEEP_ALIVE_SECONDS, headers={"Cache-Control": "no-store"}
    )


async def _first_offset(feed: Feed) -> int | None:
    """The first offset the session's stream holds; None if not known soon (a stuck session
    is not read until it is fixed: its stream starts, and the check is skipped)."""
    try:
        return await asyncio.wait_for(feed.first_offset(), FIRST_OFFSET_WAIT_SECONDS)
    except TimeoutError:
        return None


def _gone(session_id: str, first: int) -> Response:
    message = (
        f"events before {first} are no longer in the stream of session {session_id}; "
        f"its whole history is at /v1/sessions/{session_id}/history"
    )
    return JSONResponse({"error": {"type": "gone", "message": message, "first": first}}, status_code=410)


async def _relay(feeds: Feeds, feed: Feed, offset: int) -> AsyncIterator[ServerSentEvent]:
    try:
        async for item in feed.follow(offset):
            event_id = None if item.offset is None else str(item.offset)  # live text has none
            yield ServerSentEvent(id=event_id, event=item.type, data=item.data)
    finally:
        feeds.leave(feed)
