"""A session that stops mid-call stops the call where it runs, without activity heartbeats.

A worker with its defaults (no heartbeat timeout: its activities send none) runs a session
that is cancelled while the model streams a 30 s answer, or while a long read-only tool
runs: the session asks the call's worker once (the local activity `stop_calls`, one
action), the model's connection is closed and the tool is cancelled, seconds before they
would have ended. The seconds are printed and recorded, and asserted only against a
generous deadline. An at-most-once tool is never interrupted: the session records its
outcome, then ends `cancelled`. A session that nobody stops asks nothing.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx2 as httpx
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.converter import PayloadConverter

from activities.live_server import cancel_headers, cancel_path, live_url
from infra.datadir import read_effects
from infra.live_auth import LiveKey, bearer, follower_key
from tests.conftest import Harness, answer, tool_use
from tests.support.procs import wait_until
from tests.support.reliability import record
from tests.test_actions import Counters, counted
from workflows.contract import SessionHistory, SessionStatus

AREA = "Cancelling a session"
WORDS, PACE_S = 600, 0.05  # a 30 s answer, a word every 50 ms
STOPPED_WITHIN_S = 15.0  # generous: the goal is under a second on a quiet machine


def _stream_of_30_s() -> dict[str, Any]:
    return answer(" ".join(f"word{i}" for i in range(WORDS)), pace=PACE_S)


def _summaries(events: list[Any]) -> list[str]:
    return [
        PayloadConverter.default.from_payload(e.user_metadata.summary, str)
        for e in events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED and e.user_metadata.HasField("summary")
    ]


def _patches(events: list[Any]) -> list[str]:
    """The ids of the patches the session's history records."""
    found = []
    for e in events:
        details = e.marker_recorded_event_attributes.details
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED and "patch-data" in details:
            found.append(PayloadConverter.default.from_payload(details["patch-data"].payloads[0], dict)["id"])
    return found


async def _events(handle: WorkflowHandle) -> list[Any]:
    return [e async for e in handle.fetch_history_events()]


async def test_a_cancel_closes_the_model_request_at_once_without_heartbeats(harness: Harness, dev_server):
    counters = Counters(dev_server)
    handle = await harness.start([_stream_of_30_s()])
    [request] = await wait_until(lambda: harness.requests(handle.id), timeout=30, what="the model request")
    await asyncio.sleep(1.0)  # the model is writing
    cancelled_at = time.time()
    assert (
        await handle.execute_update("cancel_session", {"reason": "enough"}, result_type=str) == "cancelling"
    )
    closed = await wait_until(
        lambda: request.get("closed"), timeout=STOPPED_WITHIN_S, what="the model's connection closed"
    )
    result: SessionStatus = await asyncio.wait_for(handle.result(), 30)
    took = closed - cancelled_at
    print(
        f"cancel to the model's connection closed: {took:.2f} s (the stream had {WORDS * PACE_S:g} s to go)"
    )
    assert result.status == "cancelled" and result.error == "enough"
    assert request["done"] - request["at"] < WORDS * PACE_S / 2, "the model wrote its whole answer"
    heartbeats, _ = await counters.since()
    assert heartbeats == 0
    events = await _events(handle)
    assert "stop the calls in flight" in _summaries(events) and "stop-calls" in _patches(events)
    assert result.temporal_actions == (await counted(harness.client, handle.id)).total
    record(
        AREA,
        "`cancel` while the model streams a 30 s answer; a worker with its defaults (no heartbeats)",
        "the session asked the call's worker once (`stop_calls`, a local activity); the worker closed the "
        "model request, so the model stopped writing; no activity heartbeat was sent",
        {"cancel to the model's connection closed": f"{took:.2f} s"},
    )


async def test_a_cancel_stops_a_long_read_only_tool_async_or_in_a_thread(harness: Harness, data_dir: Path):
    handle = await harness.start([
        {"text": "", "tool_calls": [
            {"name": "long_read", "input": {"seconds": 60}, "id": "r1"},
            {"name": "long_scan", "input": {"seconds": 60}, "id": "s1"},
        ]},
        answer("never"),
    ])  # fmt: skip

    async def both_running() -> bool:
        history = await handle.query("history", result_type=SessionHistory)
        return [c.status for c in history.tool_calls] == ["running", "running"]

    await wait_until(both_running, timeout=30, what="both tools running")
    await asyncio.sleep(1.0)
    cancelled_at = time.time()
    await handle.signal("cancel")
    markers = [data_dir / "stopped-r1", data_dir / "stopped-s1"]
    await wait_until(
        lambda: all(m.exists() for m in markers), timeout=STOPPED_WITHIN_S, what="both tools stopped"
    )
    result: SessionStatus = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "cancelled"
    (async_at, async_saw), (thread_at, thread_saw) = (m.read_text().split() for m in markers)
    assert async_saw == "True" and thread_saw == "True"  # `ctx.cancelled` said so
    took = {"async": float(async_at) - cancelled_at, "thread": float(thread_at) - cancelled_at}
    print(f"cancel to the tool stopped: async {took['async']:.2f} s, in a thread {took['thread']:.2f} s")
    history = await handle.query("history", result_type=SessionHistory)
    assert [c.status for c in history.tool_calls] == ["cancelled", "cancelled"]
    record(
        AREA,
        "`cancel` while two read-only tools run (60 s each, no heartbeats): one `async`, one in a thread",
        "the worker cancelled the async tool at its `await` and the threaded one saw `ctx.cancelled` and "
        "returned; the session ended `cancelled`",
        {f"cancel to the {k} tool stopped": f"{v:.2f} s" for k, v in took.items()},
    )


async def test_an_at_most_once_tool_is_never_interrupted_and_its_outcome_is_recorded(harness: Harness):
    handle = await harness.start([
        {"text": "", "tool_calls": [
            {"name": "slow_charge", "input": {"amount": 5, "seconds": 3}, "id": "c1"},
            {"name": "long_read", "input": {"seconds": 60}, "id": "r1"},
        ]},
        answer("never"),
    ])  # fmt: skip
    await wait_until(
        lambda: [e for e in read_effects() if e["session_id"] == handle.id], timeout=30, what="the charge"
    )
    await handle.execute_update("cancel_session", {"reason": "stop"}, result_type=str)
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "cancelled" and result.error == "stop"
    history = await handle.query("history", result_type=SessionHistory)
    charge, read = history.tool_calls
    assert (charge.status, charge.output) == ("done", "charged 5")  # ran to its end, recorded
    assert read.status == "cancelled"
    assert [e["tool"] for e in read_effects() if e["session_id"] == handle.id] == ["slow_charge"]
    assert result.temporal_actions == (await counted(harness.client, handle.id)).total


async def test_a_session_nobody_stops_asks_nothing(harness: Harness):
    handle = await harness.start([tool_use("slow_upsert", {"key": "k", "seconds": 0}, id="u1"), answer("ok")])
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed"
    events = await _events(handle)
    assert "stop the calls in flight" not in _summaries(events)
    assert "stop-calls" not in _patches(events), _patches(events)


async def test_stopping_a_call_needs_a_credential_for_its_session_and_the_servers_host(harness: Harness):
    handle = await harness.start([_stream_of_30_s()])
    [request] = await wait_until(lambda: harness.requests(handle.id), timeout=30, what="the model request")

    async def running_call() -> tuple[str, str] | None:
        described = await handle.describe()
        for pending in described.raw_description.pending_activities:
            if pending.activity_type.name == "call_model" and (url := live_url(pending.last_worker_identity)):
                return url, pending.activity_id
        return None

    url, activity_id = await wait_until(running_call, timeout=30, what="the model call on a live worker")
    path = url + cancel_path(handle.id, activity_id)
    key = follower_key()
    async with httpx.AsyncClient(timeout=10) as http:
        refused = [
            (await http.post(path)).status_code,  # no credential
            (await http.post(path, headers=bearer(key.mint("another-session")))).status_code,
            (await http.post(path, headers=bearer(LiveKey(b"another key").mint(handle.id)))).status_code,
            (
                await http.post(path, headers={**bearer(key.mint(handle.id)), "Host": "evil.example"})
            ).status_code,
        ]
        assert refused == [401, 401, 401, 421]
        assert request.get("closed") is None, "a refused request stopped the call"
        other = await http.post(url + cancel_path(handle.id, "999"), headers=cancel_headers(handle.id))
        assert other.status_code == 404
        stopped = await http.post(path, headers=cancel_headers(handle.id))
        assert stopped.status_code == 200 and stopped.json() == {"stopped": True}
    await wait_until(
        lambda: request.get("closed"), timeout=STOPPED_WITHIN_S, what="the model's connection closed"
    )
    await handle.terminate("test over")
