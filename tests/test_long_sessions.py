"""Long sessions: multi-turn chat, continue-as-new, and history that grows linearly."""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid

import pytest
from temporalio.client import WorkflowUpdateFailedError

from sessions import control
from tests.conftest import Harness, answer, tool_use
from tests.test_loop import wait_for_status
from workflows.contract import Decision, SessionHistory, SessionStatus, UserMessage


async def test_chat_turns_queue_and_close(harness: Harness):
    handle = await harness.start(
        [{**answer("first answer"), "delay": 1}, answer("second answer"), answer("third answer")], chat=True
    )
    await asyncio.sleep(0.3)
    # Sent while the first run is in progress: queued, taken after it, in order.
    assert (
        await handle.execute_update("send_message", UserMessage(text="second question"), result_type=int) == 2
    )
    assert (
        await handle.execute_update("send_message", UserMessage(text="third question"), result_type=int) == 3
    )
    snapshot = await wait_for_status(handle, "waiting_input")
    while snapshot.user_turns < 3 or snapshot.answer != "third answer":
        await asyncio.sleep(0.1)
        snapshot = await handle.query("status", result_type=SessionStatus)
    assert snapshot.status == "waiting_input" and snapshot.queued_messages == 0
    history = await handle.query("history", result_type=SessionHistory)
    texts = [m.text() for m in history.messages]
    assert texts == [
        "do the thing",
        "first answer",
        "second question",
        "second answer",
        "third question",
        "third answer",
    ]
    assert await handle.execute_update("close_session", result_type=str) == "closed"
    result = await handle.result()
    assert result.status == "completed" and result.answer == "third answer" and result.user_turns == 3


async def test_chat_idle_timeout_ends_the_session(harness: Harness):
    result = await harness.run([answer("hello")], chat=True, idle_timeout_seconds=1)
    assert result.status == "completed" and result.stop_reason == "idle_timeout"


async def test_queued_messages_need_a_chat_session(harness: Harness):
    """A session that is not a chat takes steers (tests/test_steer.py), never a queued message."""
    handle = await harness.start([{**answer("done"), "delay": 1}])
    with pytest.raises(WorkflowUpdateFailedError) as err:
        await handle.execute_update("send_message", UserMessage(text="more", mode="queue"), result_type=int)
    assert "not a chat session" in str(err.value.cause)
    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update("close_session", result_type=str)
    assert (await handle.result()).status == "completed"


async def test_continue_as_new_keeps_the_whole_session(harness: Harness):
    turns = [tool_use("save_note", {"title": f"n{i}", "text": "x"}, id=f"s{i}") for i in range(5)]
    handle = await harness.start([*turns, answer("all saved")], limits={"continue_as_new_after_steps": 2})
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed" and result.answer == "all saved"
    assert result.steps == 6 and result.runs >= 3
    # The running run holds its part; the earlier runs' parts are in the store.
    history = await control.history(harness.client, handle.id)
    assert len(history.messages) == 12 and len(history.trace) == 6 and len(history.tool_calls) == 5
    keys = {c.tool_use_id for c in history.tool_calls}
    assert keys == {f"s{i}" for i in range(5)}
    # The model saw the whole conversation in every run: the transcript crossed runs.
    last_request = harness.requests(handle.id)[-1]["body"]["messages"]
    assert len(last_request) == 11


async def test_chat_survives_continue_as_new_with_a_pending_approval_and_a_queued_message(harness: Harness):
    email = {"to": "a@example.com", "subject": "s", "body": "b"}
    handle = await harness.start(
        [tool_use("send_email", email, id="e1"), answer("sent it"), answer("and the second answer")],
        chat=True,
        limits={"continue_as_new_after_steps": 1},
    )
    snapshot = await wait_for_status(handle, "waiting_approval")
    # The session continues as new while it waits: the approval stays pending.
    for _ in range(100):
        snapshot = await handle.query("status", result_type=SessionStatus)
        if snapshot.runs >= 2:
            break
        await asyncio.sleep(0.1)
    assert snapshot.runs >= 2 and [p.tool_use_id for p in snapshot.pending_approvals] == ["e1"]
    assert (
        await handle.execute_update("send_message", UserMessage(text="second question"), result_type=int) == 2
    )
    assert (await handle.query("status", result_type=SessionStatus)).queued_messages == 1
    await handle.execute_update("approve_call", Decision(tool_use_id="e1"), result_type=str)
    for _ in range(200):
        snapshot = await handle.query("status", result_type=SessionStatus)
        if snapshot.answer == "and the second answer":
            break
        await asyncio.sleep(0.1)
    assert snapshot.status == "waiting_input" and snapshot.user_turns == 2
    await handle.execute_update("close_session", result_type=str)
    result = await handle.result()
    assert result.status == "completed"
    history = await control.history(harness.client, handle.id)
    assert [m.role for m in history.messages] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert history.tool_calls[0].status == "done"


async def history_bytes(handle) -> int:
    """Bytes of every run's event history of a session, as JSON."""
    total = 0
    run_id = None
    async for execution in handle._client.list_workflows(f"WorkflowId = '{handle.id}'"):
        run_id = execution.run_id
        found = await handle._client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        total += len(found.to_json())
    return total


async def test_history_grows_linearly_over_50_steps(harness: Harness):
    await history_grows_linearly(harness, 50)


@pytest.mark.slow
async def test_history_grows_linearly_over_200_steps(harness: Harness):
    await history_grows_linearly(harness, 200)


async def history_grows_linearly(harness: Harness, steps: int) -> None:
    turns = [tool_use("big_output", {"chars": 5000}, id=f"b{i}") for i in range(steps)]
    handle = await harness.start(
        [*turns, answer("done")], limits={"max_steps": steps + 1, "token_budget": 10**12}
    )
    result = await asyncio.wait_for(handle.result(), 240)
    assert result.status == "completed" and result.steps == steps + 1, result.error
    history = await handle.fetch_history()
    events = history.events
    transcript = sum(
        len(json.dumps(m.model_dump(mode="json")))
        for m in (await handle.query("history", result_type=SessionHistory)).messages
    )
    # Temporal counts its history limit in stored (protobuf) bytes; `temporal workflow show
    # --output json` prints more (base64 payloads, indented field names): see docs/generated/long-sessions.md.
    total = sum(e.ByteSize() for e in events)
    # Bytes per step are flat: the second half of the session costs what the first did.
    starts = [i for i, e in enumerate(events) if e.HasField("activity_task_scheduled_event_attributes")
              and e.activity_task_scheduled_event_attributes.activity_type.name == "call_model"]  # fmt: skip
    half = starts[len(starts) // 2]
    first = sum(e.ByteSize() for e in events[:half])
    second = sum(e.ByteSize() for e in events[half:])
    assert second < first * 1.3, (first, second)
    assert total <= 3 * transcript, (total, transcript)


async def test_chat_from_the_command_line(harness: Harness, dev_server, data_dir):
    import os
    import subprocess
    import sys

    env = dict(os.environ, TEMPORAL_ADDRESS=dev_server.address, TEMPORAL_TASK_QUEUE=harness.task_queue,
               AGENT_DATA_DIR=str(data_dir))  # fmt: skip

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "client.py", *args], env=env, capture_output=True, text=True, timeout=60
        )

    session = "chat-cli-1"
    harness.script(session, [answer("hello there"), answer("second reply")])
    started = await asyncio.to_thread(cli, "start", "hi", "--session", session, "--chat")
    assert started.returncode == 0 and started.stdout.strip() == session
    handle = harness.client.get_workflow_handle(session)
    await wait_for_status(handle, "waiting_input")
    sent = await asyncio.to_thread(cli, "send", session, "and now?")
    assert sent.returncode == 0 and "message 2 queued" in sent.stdout
    for _ in range(100):
        if (await handle.query("status", result_type=SessionStatus)).answer == "second reply":
            break
        await asyncio.sleep(0.1)
    closed = await asyncio.to_thread(cli, "close", session)
    assert closed.returncode == 0, closed.stderr
    status = await asyncio.to_thread(cli, "status", session, "--json")
    snapshot = json.loads(status.stdout)
    assert (
        snapshot["status"] == "completed"
        and snapshot["user_turns"] == 2
        and snapshot["answer"] == "second reply"
    )
    again = await asyncio.to_thread(cli, "send", session, "too late")
    assert again.returncode == 1 and again.stderr.count("\n") == 1 and "Traceback" not in again.stderr
    empty = await asyncio.to_thread(cli, "send", session, "   ")
    assert empty.returncode == 1 and "empty" in empty.stderr


async def test_prompt_cache_is_read_across_steps(harness: Harness):
    from sessions.pricing import price_for

    price = price_for("claude-sonnet-4-6")
    assert price is not None
    turns = [tool_use("big_output", {"chars": 2000}, id=f"c{i}") for i in range(5)]
    handle = await harness.start([*turns, answer("ok")], price=price)
    result = await asyncio.wait_for(handle.result(), 60)
    trace = (await handle.query("history", result_type=SessionHistory)).trace
    assert trace[0].usage.cache_read_input_tokens == 0 and trace[0].usage.cache_creation_input_tokens > 0
    for before, turn in itertools.pairwise(trace):
        # Everything the previous call sent is read from the cache; only the new part is written.
        seen = before.usage.cache_read_input_tokens + before.usage.cache_creation_input_tokens
        assert turn.usage.cache_read_input_tokens >= seen
        assert 0 < turn.usage.cache_creation_input_tokens < turn.usage.cache_read_input_tokens
    assert result.usage.cache_read_input_tokens == sum(t.usage.cache_read_input_tokens for t in trace)
    assert result.cost_usd == pytest.approx(sum(price.cost(t.usage) for t in trace))


async def test_cut_context_still_hits_the_cache(harness: Harness):
    steps = 30
    turns = [tool_use("big_output", {"chars": 3000}, id=f"k{i}") for i in range(steps)]
    handle = await harness.start(
        [*turns, answer("ok")],
        limits={"max_steps": steps + 1, "context_tokens": 12_000, "max_tokens": 1000, "token_budget": 10**9},
    )
    result = await asyncio.wait_for(handle.result(), 120)
    assert result.status == "completed"
    trace = (await handle.query("history", result_type=SessionHistory)).trace
    cut = [t for t in trace if t.context_dropped]
    assert len(cut) > steps // 2  # the transcript outgrew the window
    requests = harness.requests(handle.id)
    assert all(len(json.dumps(r["body"]["messages"])) / 3.5 < 12_000 for r in requests)
    assert "left out to fit the context window" in json.dumps(requests[-1]["body"]["messages"][0])
    # The cut moves in jumps, so most calls after the first cut still read a cached prefix.
    hits = [t for t in cut if t.usage.cache_read_input_tokens > 0]
    assert len(hits) >= 0.6 * len(cut), [(t.context_dropped, t.usage.cache_read_input_tokens) for t in cut]


async def test_prompt_too_long_is_answered_by_compacting(harness: Harness):
    turns = [tool_use("big_output", {"chars": 4000}, id=f"p{i}") for i in range(4)]
    handle = await harness.start([*turns, {**answer("fits now"), "prompt_limit": 9000}])
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed" and result.answer == "fits now"
    last = (await handle.query("history", result_type=SessionHistory)).trace[-1]
    assert last.context_dropped > 0
    sizes = [len(json.dumps(r["body"]["messages"])) for r in harness.requests(handle.id)[4:]]
    # Each retry sent less; none repeated the request that was too long.
    assert len(sizes) >= 2 and all(b < a for a, b in itertools.pairwise(sizes)) and sizes[-1] <= 9000


async def test_dropped_messages_can_be_summarised(harness: Harness):
    steps = 8
    turns = [tool_use("big_output", {"chars": 3000}, id=f"m{i}") for i in range(steps)]
    handle = await harness.start(
        [*turns, answer("ok")],
        summarize_dropped=True,
        limits={"max_steps": steps + 1, "context_tokens": 6000, "max_tokens": 1000},
    )
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed"
    requests = harness.requests(handle.id)
    summaries = [
        r for r in requests if "Summarise the conversation excerpt" in json.dumps(r["body"]["messages"])
    ]
    assert summaries, "no summary call was made"
    first = json.dumps(requests[-1]["body"]["messages"][0])
    assert "Summary of them: [fake model] summary of" in first
    # One summary per cut, reused by the calls that keep the same cut.
    cuts = {
        t.context_dropped
        for t in (await handle.query("history", result_type=SessionHistory)).trace
        if t.context_dropped
    }
    assert len(summaries) <= len(cuts)


async def test_a_lost_transcript_is_sent_whole_once_and_counted(client, fake_model, tmp_path):
    """A store that loses its transcripts (another host's store, a wiped folder) costs one
    whole resend per lost call, counted on the trace turn and in the status."""
    import shutil

    import anthropic

    from activities.model import ModelActivities
    from activities.transcript import TranscriptStore
    from tests.support.tools import TOOLS
    from worker import build_worker

    root = tmp_path / "transcripts"
    model = ModelActivities(
        store=TranscriptStore(root, cache_size=0),  # nothing kept in memory: every call reads the store
        client=anthropic.AsyncAnthropic(base_url=fake_model.url, api_key="test-key", max_retries=0),
    )
    harness = Harness(client, fake_model, f"test-{uuid.uuid4().hex[:8]}")
    async with build_worker(client, TOOLS, queue=harness.task_queue, model=model):
        handle = await harness.start(
            [tool_use("get_time", id="t1"), {**tool_use("get_time", id="t2"), "delay": 1.5}, answer("done")]
        )
        await _until_requests(harness, handle.id, 2)
        shutil.rmtree(root)  # while step 2 runs: step 3 finds no transcript
        result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
        trace = (await handle.query("history", result_type=SessionHistory)).trace
    assert result.status == "completed" and result.transcript_resends == 1
    assert [t.transcript_resends for t in trace] == [0, 0, 1]
    whole = harness.requests(handle.id)[-1]["body"]["messages"]
    assert len(whole) == 5  # the goal, two calls and their results: the whole conversation


async def _until_requests(harness: Harness, session_id: str, count: int) -> None:
    for _ in range(300):
        if len(harness.requests(session_id)) >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{session_id} never made {count} model requests")
