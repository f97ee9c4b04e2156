"""A worker's live text server answers only a follower that shows a credential for the
session (an HMAC of `session|expiry` with the deployment's live key), on a Host it is
reached at: no credential, a forged or an expired one is 401 with no text, a foreign Host
421. The followers mint it themselves, so none is in the worker's identity, the session's
history or a log; and they still get the text live."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from urllib.parse import urlsplit

import httpx2 as httpx
import pytest

from activities.live_server import live_url
from activities.wire import TextDelta
from infra.live_auth import LiveKey, bearer, follower_key
from sessions.live_text import session_events
from tests.conftest import Harness, history_text
from tests.support.procs import wait_until
from tests.test_live import WORDS, paced

pytestmark = pytest.mark.xdist_group("security-live")


async def live_address(harness: Harness, session_id: str) -> tuple[str, str]:
    """The live server's URL and the identity of the worker running the session's model call."""

    async def started() -> tuple[str, str] | None:
        described = await harness.client.get_workflow_handle(session_id).describe()
        for activity in described.raw_description.pending_activities:
            url = live_url(activity.last_worker_identity)
            if activity.activity_type.name == "call_model" and url:
                return url, activity.last_worker_identity
        return None

    return await wait_until(started, timeout=30, what="the model call to start on a live worker")


async def live_deltas(harness: Harness, session_id: str) -> str:
    """The text a follower got live (not with the turn), to the session's end."""
    got = []
    async for item in session_events(harness.client, session_id):
        if item.offset is None and isinstance(item.event, TextDelta):
            got.append(item.event.text)
    return "".join(got)


async def test_the_live_server_wants_a_credential_and_its_own_host(
    harness: Harness, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.DEBUG)
    session_id = f"live-{uuid.uuid4().hex[:10]}"
    text = " ".join(WORDS[:60])
    handle = await harness.start([paced(60, 0.1, tool=False)], session_id=session_id)
    url, identity = await live_address(harness, session_id)
    # A follower (what `watch`, the service's feeds, MCP and A2A read through) mints its own.
    followed = asyncio.create_task(live_deltas(harness, session_id))
    path = f"/live/{session_id}"
    key = follower_key()
    forged = LiveKey(b"not the deployment's key, but long enough to be one").mint(session_id)
    expired = key.mint(session_id, now=time.time() - 3600)
    for_another = key.mint(f"{session_id}-other")
    async with httpx.AsyncClient(base_url=url, timeout=30, trust_env=False) as http:
        for headers in ({}, bearer(forged), bearer(expired), bearer(for_another), {"Cookie": "x"}):
            refused = await http.get(path, headers=headers)
            assert refused.status_code == 401, (headers, refused.status_code, refused.text[:200])
            assert "w00" not in refused.text and "payload" not in refused.text
        credential = key.mint(session_id)
        port = urlsplit(url).port
        for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1.evil.example:{port}"):
            misdirected = await http.get(path, headers={**bearer(credential), "Host": host})
            assert misdirected.status_code == 421, (host, misdirected.status_code)
            assert "payload" not in misdirected.text
        async with http.stream("GET", path, headers=bearer(credential)) as allowed:
            assert allowed.status_code == 200
            assert "payload" in await anext(allowed.aiter_lines())
    assert await asyncio.wait_for(followed, 60) == text
    signature = credential.split(".")[1]
    assert signature not in identity
    assert signature not in history_text(await handle.fetch_history())
    assert signature not in caplog.text
