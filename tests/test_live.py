"""Live text outside Temporal (activities/deltas.py, activities/live_server.py, sessions/live_text.py): a
streamed session sends no signal or update, watched or not, by one follower or three; a
follower arriving mid-turn (`watch --json` in its own process, the service's SSE endpoint)
first gets one delta with the text so far, tagged with step and attempt, then the rest, then
the turn; when the worker writing is killed mid-stream, the retry's text comes under its own
attempt tag; a worker started with `--no-live` still shows the text, with the turn. The
workers and the followers are real processes, as a user runs them."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
import pytest_asyncio
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.converter import DataConverter

from activities.deltas import Deltas, LiveCalls
from activities.live_server import LiveServer, decode_line, live_url, with_live
from activities.wire import TextDelta
from devservers import processes
from devservers.fakemodel import FakeModelServer
from infra.connection import data_converter
from infra.keyring import parse_keys
from infra.live_auth import LiveKey, bearer
from tests.conftest import ROOT
from tests.support.api import ApiProcess, Sse, read_sse, serve_api
from tests.support.procs import ProcessHarness, holder, start_session, wait_for_model_request, wait_for_status
from tests.support.reliability import record
from tests.test_watch import EMAIL
from workflows.agent import AgentWorkflow
from workflows.contract import Decision

AREA = "Live text"
WORDS = [f"w{i:03d}" for i in range(80)]
TEXT = " ".join(WORDS)


def paced(words: int, pace: float, tool: bool) -> dict[str, Any]:
    turn: dict[str, Any] = {"text": " ".join(WORDS[:words]), "pace": pace}
    if tool:
        turn["tool_calls"] = [
            {"name": "get_time", "input": {"timezone_name": "UTC"}, "id": f"t{uuid.uuid4().hex[:6]}"}
        ]
    return turn


def cli_env(procs: ProcessHarness) -> dict[str, str]:
    import os

    return {**os.environ, "TEMPORAL_ADDRESS": procs.workers.address, "TEMPORAL_NAMESPACE": "default",
            "TEMPORAL_TASK_QUEUE": procs.workers.task_queue, "PYTHONUNBUFFERED": "1"}  # fmt: skip


class JsonWatch:
    """`python client.py watch ID --json` in its own process: each line with the time it was read."""

    def __init__(self, procs: ProcessHarness, session_id: str):
        self.process = subprocess.Popen(
            [sys.executable, "client.py", "watch", session_id, "--json"], cwd=ROOT, env=cli_env(procs),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        self.lines: list[tuple[float, dict[str, Any]]] = []
        self._reader = asyncio.create_task(asyncio.to_thread(self._read))

    def _read(self) -> None:
        assert self.process.stdout is not None  # stdout=PIPE
        for line in self.process.stdout:
            self.lines.append((time.time(), json.loads(line)))

    async def events(self, timeout: float = 90) -> list[dict[str, Any]]:
        """Every event it printed, once it has ended by itself (exit 0)."""
        code = await asyncio.wait_for(asyncio.to_thread(self.process.wait), timeout)
        await asyncio.wait_for(self._reader, 10)
        assert self.process.stderr is not None
        assert code == 0, self.process.stderr.read().decode()
        return [event for _, event in self.lines]

    def stop(self) -> None:
        processes.stop(self.process, grace=5)


def history_counts(events: Sequence[HistoryEvent]) -> dict[str, int]:
    kinds = [EventType.Name(e.event_type).removeprefix("EVENT_TYPE_") for e in events]
    return {
        "signals": kinds.count("WORKFLOW_EXECUTION_SIGNALED"),
        "updates": kinds.count("WORKFLOW_EXECUTION_UPDATE_ACCEPTED")
        + kinds.count("WORKFLOW_EXECUTION_UPDATE_REJECTED"),
    }


def check_deltas(events: list[dict[str, Any]], step: int, text: str) -> list[dict[str, Any]]:
    """The step's live deltas: no offset, one attempt, together the turn's text, all before
    the turn; the turn carries the text."""
    deltas = [e for e in events if e["type"] == "delta" and e["step"] == step]
    turn = next(i for i, e in enumerate(events) if e["type"] == "turn" and e["step"] == step)
    assert deltas, f"no live text for step {step}: {events}"
    assert all(d["offset"] is None and d["topic"] == "delta" and d["attempt"] == 1 for d in deltas)
    assert "".join(d["text"] for d in deltas) == text == events[turn]["text"]
    assert max(i for i, e in enumerate(events) if e["type"] == "delta" and e["step"] == step) < turn
    durable = [e for e in events if e["type"] != "delta"]
    assert [e["offset"] for e in durable] == list(range(len(durable)))
    return deltas


# ---- the worker's live server, in this process -----------------------------------------


class Credentials(httpx.Auth):
    """A live credential for the session each request names, as a follower mints it."""

    def __init__(self, key: LiveKey):
        self.key = key

    def auth_flow(self, request: httpx.Request):
        session_id = request.url.path.removeprefix("/live/")
        request.headers.update(bearer(self.key.mint(session_id)))
        yield request


async def test_the_live_server_sends_the_text_so_far_then_each_chunk_encrypted_with_payload_keys():
    keys = parse_keys("k1:" + "A" * 43 + "=")
    converter = data_converter(keys)
    calls = LiveCalls()
    key = LiveKey(b"k" * 32)
    async with (
        LiveServer(converter, calls=calls, key=key) as server,
        # A follower's credential opens one session's text (tests/security/test_live_text.py).
        httpx.AsyncClient(base_url=server.url or "", auth=Credentials(key)) as http,
    ):
        assert server.url is not None and live_url(with_live("1@here wf=abc", server.url)) == server.url
        assert (await http.get("/live/nobody", params={"attempt": "x"})).status_code == 400
        deltas = await Deltas("s1", 3, 2, calls).__aenter__()
        await deltas.on_text("first ")
        await deltas.on_text("second ")
        async with http.stream("GET", "/live/s1") as response:
            assert response.status_code == 200
            lines = response.aiter_lines()
            line = await anext(lines)
            assert "first" not in line  # encrypted as the session's payloads are
            assert await decode_line(converter, line) == TextDelta(step=3, attempt=2, text="first second ")
            await deltas.on_text("third")
            assert await decode_line(converter, await anext(lines)) == TextDelta(
                step=3, attempt=2, text="third"
            )
            # The call ends: its stream says how, and the worker keeps nothing of it.
            await deltas.__aexit__(None, None, None)
            assert await decode_line(converter, await anext(lines)) == "done"
        assert len(calls) == 0
        started = time.monotonic()
        assert (await http.get("/live/s1")).status_code == 404  # after waiting for a call that never begins
        assert time.monotonic() - started >= 2.5
        # Another converter (no keys) cannot read it.
        async with Deltas("s2", 1, 1, calls) as deltas:
            await deltas.on_text("secret")
            async with http.stream("GET", "/live/s2") as response:
                line = await anext(response.aiter_lines())
        with pytest.raises(KeyError, match="Unknown payload encoding binary/encrypted"):
            await decode_line(DataConverter.default, line)


# ---- real processes ----------------------------------------------------------------------


async def wait_for_line(watch: JsonWatch, kind: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not any(e["type"] == kind for _, e in watch.lines):
        assert watch.process.poll() is None, "the watch ended early"
        assert time.monotonic() < deadline, f"no {kind} event from the watch in {timeout:g} s"
        await asyncio.sleep(0.05)


@pytest.mark.process
async def test_streamed_sessions_signal_nothing_watched_by_none_one_or_three(procs: ProcessHarness):
    procs.workers.start()
    counts: dict[int, dict[str, int]] = {}
    for followers in (0, 1, 3):
        # An approval first (one update), decided once the followers have caught up; then
        # two streamed steps, the first asking for a tool.
        gate = {"text": "", "tool_calls": [{"name": "send_email", "input": EMAIL, "id": "e1"}]}
        turns = [gate, paced(30, 0.04, tool=True), paced(30, 0.04, tool=False)]
        handle = await start_session(procs.client, procs.fake_model, procs.workers.task_queue, turns)
        watches = [JsonWatch(procs, handle.id) for _ in range(followers)]
        try:
            await wait_for_status(handle, "waiting_approval")
            for watch in watches:
                await wait_for_line(watch, "approval")
            await handle.execute_update(AgentWorkflow.approve_call, Decision(tool_use_id="e1"))
            result = await asyncio.wait_for(handle.result(), 90)
            seen = [await w.events() for w in watches]
        finally:
            for w in watches:
                w.stop()
        assert result.status == "completed" and result.steps == 3
        assert all(
            r["body"].get("stream") for r in procs.fake_model.script.requests if r["session"] == handle.id
        )
        for events in seen:
            for step in (2, 3):
                check_deltas(events, step, " ".join(WORDS[:30]))  # each follower saw the text live
        counts[followers] = history_counts((await handle.fetch_history()).events)
    # No delta is a signal, and no follower an update: N followers cost what none do.
    assert counts[0] == counts[1] == counts[3] == {"signals": 0, "updates": 1}, counts
    record(AREA, "a streamed session (an approval, then 2 streamed steps), unwatched, then followed live by 1 and "
           "by 3 `watch --json` processes", "no signal; the approval's update only, however many follow",
           {str(k): v for k, v in counts.items()})  # fmt: skip


@pytest.mark.process
async def test_watch_json_arriving_mid_turn_gets_the_text_so_far_then_the_rest(procs: ProcessHarness):
    procs.workers.start()
    pace, words = 0.1, 80  # an 8 s turn: the watch arrives well inside it
    handle = await start_session(procs.client, procs.fake_model, procs.workers.task_queue,
                                 [paced(words, pace, tool=False)])  # fmt: skip
    [request] = await wait_for_model_request(procs.fake_model, handle.id, step=1)
    await asyncio.sleep(max(0.0, request["at"] + 1.5 - time.time()))
    watch = JsonWatch(procs, handle.id)
    try:
        events = await watch.events()
    finally:
        watch.stop()
    deltas = check_deltas(events, 1, TEXT)
    # The first is the text so far, several words at once; then a word at a time.
    assert len(deltas[0]["text"].split()) >= 2, deltas[0]
    assert all(len(d["text"].split()) <= 2 for d in deltas[-5:]), deltas[-5:]
    # Behind the model by: from the model server writing the last word (it then waits one
    # pace before it ends the answer) to the watch printing it.
    done = next(r["done"] for r in procs.fake_model.script.requests if r["session"] == handle.id)
    last = max(at for at, e in watch.lines if e["type"] == "delta")
    behind = last - (done - pace)
    assert behind < 1.0, f"the last word came {behind:.2f} s after the model wrote it"
    record(AREA, "`watch --json` started 1.5 s into an 8 s streamed turn",
           "one delta with the text so far (no offset), then a word at a time, then the turn; under 1 s behind",
           {"first_delta_words": len(deltas[0]["text"].split()), "deltas": len(deltas),
            "last_word_behind_s": round(behind, 3)})  # fmt: skip


@pytest.mark.process
async def test_no_live_worker_shows_the_text_with_the_turn(procs: ProcessHarness):
    worker = procs.workers.start("--no-live")
    handle = await start_session(procs.client, procs.fake_model, procs.workers.task_queue,
                                 [paced(30, 0.05, tool=True), paced(10, 0.05, tool=False)])  # fmt: skip
    await wait_for_model_request(procs.fake_model, handle.id, step=1)
    watch = JsonWatch(procs, handle.id)
    try:
        events = await watch.events()
    finally:
        watch.stop()
    assert "no live text" in worker.log()
    assert not [e for e in events if e["type"] == "delta"]
    turns = [e for e in events if e["type"] == "turn"]
    assert [t["text"] for t in turns] == [" ".join(WORDS[:30]), " ".join(WORDS[:10])]
    assert history_counts((await handle.fetch_history()).events) == {"signals": 0, "updates": 0}


@pytest.mark.process
async def test_a_kill_mid_stream_shows_the_retry_under_its_attempt_tag(procs: ProcessHarness):
    # Two workers that notice a dead one's call within 3 s; the one writing is killed mid-turn.
    workers = [procs.workers.start("--heartbeat-timeout", "3") for _ in range(2)]
    turn = paced(50, 0.06, tool=False)  # a 3 s turn
    handle = await start_session(procs.client, procs.fake_model, procs.workers.task_queue, [turn, turn])
    watch = JsonWatch(procs, handle.id)
    try:
        await wait_for_line(watch, "delta")
        victim = await holder(handle, workers)
        victim.kill()
        events = await watch.events()
    finally:
        watch.stop()
    text = " ".join(WORDS[:50])
    tags = [(e["step"], e["attempt"]) for e in events if e["type"] == "delta"]
    assert tags == sorted(tags) and {1} == {step for step, _ in tags} and {1, 2} <= {a for _, a in tags}, tags
    by_attempt = {
        a: "".join(e["text"] for e in events if e["type"] == "delta" and e["attempt"] == a) for _, a in tags
    }
    # The killed attempt's text, as far as it got; the retry's from its start, once.
    assert text.startswith(by_attempt[1]) and by_attempt[max(by_attempt)] == text
    turn_event = next(e for e in events if e["type"] == "turn")
    assert turn_event["attempt"] == max(by_attempt) and turn_event["text"] == text
    assert history_counts((await handle.fetch_history()).events) == {"signals": 0, "updates": 0}


# ---- the service's event stream ----------------------------------------------------------


@pytest_asyncio.fixture
async def api(client: Client, dev_server, fake_model: FakeModelServer, data_dir: Path, tmp_path_factory):
    async with serve_api(
        client, dev_server.address, fake_model, data_dir, tmp_path_factory.mktemp("live-api")
    ) as server:
        yield server


async def read_until_turn(response: httpx.Response, into: list[Sse], step: int) -> None:
    async for item in read_sse(response):
        if isinstance(item, Sse):
            into.append(item)
            if item.event in ("turn", "end") and (item.event == "end" or item.data["step"] == step):
                return


@pytest.mark.process
async def test_sse_arriving_or_reconnecting_mid_turn_gets_the_text_so_far(api: ApiProcess, fake_model: FakeModelServer,
                                                                       client: Client):  # fmt: skip
    session_id = f"live-{uuid.uuid4().hex[:8]}"
    fake_model.script.set(session_id, [paced(60, 0.1, tool=False)])  # a 6 s turn
    text = " ".join(WORDS[:60])
    async with api.client("alice") as alice:
        response = await alice.post("/v1/sessions", json={"goal": "count", "session_id": session_id})
        assert response.status_code == 201, response.text
        [request] = await wait_for_model_request(fake_model, session_id, step=1)
        await asyncio.sleep(max(0.0, request["at"] + 1.5 - time.time()))
        # Arriving mid-turn; cut after a few deltas; reconnecting from the last event id.
        first: list[Sse] = []
        async with alice.stream("GET", f"/v1/sessions/{session_id}/events") as response:
            async for item in read_sse(response):
                if isinstance(item, Sse):
                    first.append(item)
                    if sum(e.event == "delta" for e in first) == 4:
                        break
        last_id = max(e.id for e in first if e.id is not None)
        await asyncio.sleep(1.0)
        rest: list[Sse] = []
        async with alice.stream("GET", f"/v1/sessions/{session_id}/events",
                                headers={"Last-Event-ID": str(last_id)}) as response:  # fmt: skip
            await read_until_turn(response, rest, 1)
        handle = client.get_workflow_handle_for(AgentWorkflow.run, session_id)
        assert (await asyncio.wait_for(handle.result(), 60)).status == "completed"
    for events in (first, rest):
        deltas = [e for e in events if e.event == "delta"]
        assert all(e.id is None for e in deltas) and all(
            e.id is not None for e in events if e.event != "delta"
        )
        assert all((d.data["step"], d.data["attempt"]) == (1, 1) for d in deltas)
        # Each connection's first delta is the text so far: several words, from the start.
        assert text.startswith(deltas[0].data["text"]) and len(deltas[0].data["text"].split()) >= 2, deltas[0]
    # The reconnection's text so far covers what the first connection had, and then the
    # rest comes once: together the turn's text, which the turn then carries.
    shown = "".join(d.data["text"] for d in first if d.event == "delta")
    again = "".join(d.data["text"] for d in rest if d.event == "delta")
    assert again.startswith(shown) and again == text
    assert rest[-1].event == "turn" and rest[-1].data["text"] == text
    assert history_counts((await handle.fetch_history()).events)["signals"] == 0
