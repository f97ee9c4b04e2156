"""Constant cost over any length: what a run hands to the next stays bounded.

At each continue-as-new a session keeps in its state only what its loop needs and puts
the rest in the store (workflows/archive.py); `history`, fork and the API join it back.
The carried input is measured as Temporal records it: the payload of each
ContinuedAsNew event, after the codec.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest

from sessions import control
from tests.conftest import Harness, answer, tool_use
from tests.measure_carried import carried_sizes
from tests.support.api import collect_events, serve_api
from tests.test_agents import cli
from workflows.contract import SessionHistory

LIMIT = 256 * 1024  # above it, Temporal's external storage would take the payload


async def long_session(
    harness: Harness, steps: int, every: int, chars: int, *, forget_requests: bool = False, **limits: int
) -> tuple[str, list[int]]:
    """A session of `steps` tool calls returning `chars` characters, continuing as new every
    `every` steps; its id and what each continue-as-new handed on. `forget_requests`: the
    fake model keeps no request bodies (thousands of steps would hold gigabytes)."""
    turns = [tool_use("big_output", {"chars": chars}, id=f"b{i}", text=f"step {i}") for i in range(steps)]
    handle = await harness.start(
        [*turns, answer("done")],
        limits={"max_steps": steps + 1, "token_budget": 10**12, "continue_as_new_after_steps": every,
                "timeout_seconds": 24 * 3600, **limits},
    )  # fmt: skip
    result_task = asyncio.ensure_future(handle.result())
    deadline = time.monotonic() + 60 + steps  # a second a step, under any load
    while not result_task.done():
        assert time.monotonic() < deadline, f"{steps} steps did not end in {60 + steps} s"
        await asyncio.wait([result_task], timeout=1.0)
        if forget_requests:
            with harness.fake_model.script.lock:
                harness.fake_model.script.requests.clear()
    result = result_task.result()
    assert result.status == "completed" and result.steps == steps + 1, result.error
    assert handle.first_execution_run_id is not None
    runs = await carried_sizes(harness.client, handle.id, handle.first_execution_run_id)
    return handle.id, [size for _, size in runs]


def assert_bounded_and_flat(sizes: list[int]) -> None:
    assert max(sizes) < LIMIT, sizes
    # It moves with where the context is cut, and does not grow: the second half of the
    # handovers carries no more than the first.
    half = len(sizes) // 2
    assert max(sizes[half:]) <= 1.05 * max(sizes[:half]), sizes


async def test_the_carried_state_is_bounded_and_flat_and_history_is_whole(harness: Harness):
    steps, every = 90, 10
    session_id, sizes = await long_session(harness, steps, every, chars=3000)
    assert len(sizes) == steps // every, sizes  # after steps 10, 20, ..., 90
    assert_bounded_and_flat(sizes)
    # Carried whole, 90 steps of 3 KB outputs (each in a message and a call record) pass 500 KB.
    assert sizes[-1] < 0.5 * steps * 2 * 3000, sizes
    # The running run holds only its part; the readers join the archived ones.
    handle = harness.client.get_workflow_handle(session_id)
    part = await handle.query("history", result_type=SessionHistory)
    assert part.archive_ref is not None and len(part.messages) < 2 * steps
    whole = await control.history(harness.client, session_id)
    assert whole.archive_ref is None
    assert len(whole.messages) == 2 * steps + 2
    assert [m.role for m in whole.messages] == ["user", "assistant"] * (steps + 1)
    assert [m.text() for m in whole.messages if m.role == "assistant"] == [
        *(f"step {i}" for i in range(steps)),
        "done",
    ]
    assert [c.tool_use_id for c in whole.tool_calls] == [f"b{i}" for i in range(steps)]
    assert all(c.status == "done" and (c.output or "").startswith("x" * 3000) for c in whole.tool_calls)
    assert [c.repeats for c in whole.tool_calls] == list(range(1, steps + 1))  # counted across runs
    assert [t.step for t in whole.trace] == list(range(1, steps + 2))
    assert sum(t.temporal_actions for t in whole.trace) == whole.temporal_actions
    # The model saw the whole conversation in the last run: the transcript crossed runs.
    assert len(harness.requests(session_id)[-1]["body"]["messages"]) == 2 * steps + 1
    # A fork after an early step starts from the archived part: the conversation through it.
    fork = f"{session_id}-fork"
    harness.script(fork, [answer("forked")])
    code, out, err = await cli(harness, "fork", session_id, "--at-step", "3", "--session", fork)
    assert code == 0 and out.strip() == fork, err
    forked = await asyncio.wait_for(harness.client.get_workflow_handle(fork).result(), 60)
    assert forked["status"] == "completed" and forked["steps"] == 4
    sent = harness.requests(fork)[0]["body"]["messages"]
    assert len(sent) == 7 and "step 2" in json.dumps(sent[5])


@pytest.mark.slow
async def test_the_carried_state_is_flat_over_3000_steps(harness: Harness):
    _, sizes = await long_session(
        harness, 3000, 100, chars=2000, forget_requests=True, context_tokens=20_000, max_tokens=1000
    )
    assert len(sizes) == 30  # after steps 100, 200, ..., 3,000
    assert_bounded_and_flat(sizes)


async def test_a_follower_behind_the_kept_events_is_told_where_they_are(
    harness: Harness, dev_server, data_dir, fake_model, tmp_path
):
    """The stream keeps its last events: SSE answers a resume from before them with 410,
    `watch` says the rest is in `history`, and `history` has them all."""
    steps = 40  # more events than the stream carries across continue-as-new (workflows/archive.py)
    session_id, sizes = await long_session(harness, steps, 10, chars=1500)
    assert sizes
    async with (
        serve_api(harness.client, dev_server.address, fake_model, data_dir, tmp_path) as api,
        api.client("olga") as olga,
    ):
        kept = await collect_events(olga, session_id)  # no offset: from the first event kept
        first = kept[0].id
        assert first is not None and first > 0 and kept[-1].event == "end"
        gone = await olga.get(f"/v1/sessions/{session_id}/events", params={"after": 3})
        assert gone.status_code == 410
        assert gone.json()["error"]["type"] == "gone" and gone.json()["error"]["first"] == first
        resumed = await olga.get(
            f"/v1/sessions/{session_id}/events", headers={"Last-Event-ID": str(first - 2)}
        )
        assert resumed.status_code == 410
        rest = await collect_events(olga, session_id, after=first - 1)  # the first kept follows
        assert [e.id for e in rest] == [e.id for e in kept]
        history = (await olga.get(f"/v1/sessions/{session_id}/history")).json()
        assert len(history["messages"]) == 2 * steps + 2 and len(history["tool_calls"]) == steps
    env = dict(os.environ, TEMPORAL_ADDRESS=dev_server.address, TEMPORAL_TASK_QUEUE=harness.task_queue,
               AGENT_DATA_DIR=str(data_dir))  # fmt: skip
    watched = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "client.py", "watch", session_id, "--json"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert watched.returncode == 0, watched.stderr
    events = [json.loads(line) for line in watched.stdout.splitlines()]
    first = events[0]["offset"]
    assert first > 0 and events[-1]["type"] == "end"
    assert f"events before {first} are no longer in the stream" in watched.stderr
    assert f"python client.py history {session_id}" in watched.stderr
    history = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "client.py", "history", session_id, "--json"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert history.returncode == 0, history.stderr
    document = json.loads(history.stdout)
    assert len(document["trace"]) == steps + 1 and len(document["tool_calls"]) == steps
    assert all(turn["tool_calls"] for turn in document["trace"][:steps])
