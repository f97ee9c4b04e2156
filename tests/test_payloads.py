"""Big and odd payloads: a 5 MB tool output, a model response near the payload limit,
binary output, a huge goal. The session never sticks on Temporal's 2 MB payload limit and
never fails a workflow task (which Temporal would retry forever)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated

import pytest
import pytest_asyncio
from pydantic import Field
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from activities.tools import tool
from devservers.fakemodel import FakeModelServer
from tests.conftest import Harness, answer, model_activities, tool_use
from tests.support.reliability import record
from tests.support.tools import TOOLS
from worker import build_worker
from workflows.contract import SessionHistory

AREA = "Payloads"
MB = 1024 * 1024


@tool(policy="read_only")
def binary_blob(size: Annotated[int, Field(ge=0, le=10_000_000)]) -> bytes:
    """Return `size` bytes of binary data."""
    return bytes(range(256)) * (size // 256)


@tool(policy="read_only")
def undecodable_text() -> str:
    """Return text decoded from bytes that are not UTF-8 (as os.listdir or a subprocess can)."""
    return b"name-\xff\xfe-\x00-end".decode("utf-8", "surrogateescape")


@pytest_asyncio.fixture
async def payload_harness(
    client: Client, fake_model: FakeModelServer, data_dir: Path
) -> AsyncIterator[Harness]:
    queue = f"test-{uuid.uuid4().hex[:8]}"
    tools = [*TOOLS, binary_blob, undecodable_text]
    async with build_worker(client, tools, queue=queue, model=model_activities(fake_model, data_dir)):
        yield Harness(client, fake_model, queue)


async def workflow_task_failures(handle) -> list[str]:
    found = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            found.append(event.workflow_task_failed_event_attributes.failure.message)
    return found


async def history_bytes(handle) -> tuple[int, int]:
    """The history's total size and its largest event, in bytes."""
    sizes = [e.ByteSize() async for e in handle.fetch_history_events()]
    return sum(sizes), max(sizes)


async def finish(handle, timeout: float = 60):
    result = await asyncio.wait_for(handle.result(), timeout)
    assert await workflow_task_failures(handle) == []
    return result


async def test_five_megabyte_tool_output_is_cut_and_the_session_completes(payload_harness: Harness):
    h = payload_harness
    handle = await h.start([tool_use("big_output", {"chars": 5 * MB}, id="b1"), answer("done")])
    result = await finish(handle)
    assert result.status == "completed"
    sent = h.requests(handle.id)[1]["body"]["messages"][-1]["content"][0]["content"]
    assert sent.startswith("x" * 8000) and f"[truncated {5 * MB - 8000} of {5 * MB} characters" in sent
    _total, largest = await history_bytes(handle)
    assert largest < 100_000
    record(
        AREA,
        "a tool returns 5 MB of text (default `max_tool_output` 8,000)",
        "cut to 8,000 characters with a note to the model; completed",
        {"largest history event": f"{largest:,} B"},
    )


async def test_two_one_megabyte_results_at_the_largest_output_limit(payload_harness: Harness):
    # max_tool_output at its maximum: two results of 1,000,000 characters go to the model
    # in one request, more than Temporal's 2 MB payload limit together.
    h = payload_harness
    turn = {
        "tool_calls": [{"name": "big_output", "input": {"chars": 5 * MB}, "id": f"b{i}"} for i in range(2)]
    }
    handle = await h.start([turn, answer("done")], limits={"max_tool_output": 1_000_000})
    result = await finish(handle)
    assert result.status == "completed"
    results = h.requests(handle.id)[1]["body"]["messages"][-1]["content"]
    assert [len(r["content"]) > 1_000_000 for r in results] == [True, True]
    history = await handle.query("history", result_type=SessionHistory)
    assert [c.status for c in history.tool_calls] == ["done", "done"]
    total, largest = await history_bytes(handle)
    assert largest < 2 * MB
    record(
        AREA,
        "two tool results of 1,000,000 characters in one step (`max_tool_output` at its maximum)",
        "completed: payloads above 256 KB go to external storage, history keeps references",
        {"history": f"{total:,} B", "largest event": f"{largest:,} B"},
    )


async def test_model_response_near_the_payload_limit(payload_harness: Harness):
    h = payload_harness
    text = "y" * (2 * MB - 50_000)
    handle = await h.start([answer(text)], limits={"max_tokens": 128_000})
    result = await finish(handle)
    assert result.status == "completed" and result.answer == text
    total, largest = await history_bytes(handle)
    assert largest < 2 * MB
    record(
        AREA,
        "a model response of 2 MB minus 50 KB",
        "completed; the answer is whole",
        {"history": f"{total:,} B", "largest event": f"{largest:,} B"},
    )


async def test_binary_output_is_described_not_sent(payload_harness: Harness):
    h = payload_harness
    handle = await h.start([tool_use("binary_blob", {"size": 3 * MB}), answer("ok")])
    result = await finish(handle)
    assert result.status == "completed"
    sent = h.requests(handle.id)[1]["body"]["messages"][-1]["content"][0]
    assert sent["content"] == f"[binary output, {3 * MB} bytes, not shown]" and not sent.get("is_error")
    record(
        AREA,
        "a tool returns 3 MB of bytes",
        'the model gets "[binary output, N bytes, not shown]"; completed',
        {},
    )


async def test_text_that_is_not_valid_unicode_is_escaped(payload_harness: Harness):
    h = payload_harness
    handle = await h.start([tool_use("undecodable_text", id="u1"), answer("ok")])
    result = await finish(handle, timeout=30)
    assert result.status == "completed"
    sent = h.requests(handle.id)[1]["body"]["messages"][-1]["content"][0]
    assert not sent.get("is_error"), sent
    assert sent["content"] == "name-\\udcff\\udcfe-\x00-end"
    history = await handle.query("history", result_type=SessionHistory)
    assert history.tool_calls[0].status == "done"
    record(
        AREA,
        "a tool returns text with undecodable bytes (lone surrogates) and NUL",
        "escaped (`\\udcff`), sent once; completed",
        {},
    )


async def test_huge_goal_at_the_limit(payload_harness: Harness):
    h = payload_harness
    goal = "\U0001f600" * 200_000  # the most characters a goal may have, 4 bytes each in UTF-8
    handle = await h.start([answer("read it")], goal=goal)
    result = await finish(handle)
    assert result.status == "completed"
    sent = h.requests(handle.id)[0]["body"]["messages"][0]["content"][0]["text"]
    assert sent == goal
    _total, largest = await history_bytes(handle)
    record(
        AREA,
        "a goal of 200,000 characters (800 KB of UTF-8), the most a goal may have",
        "completed; the model got the goal whole",
        {"largest event": f"{largest:,} B"},
    )


def test_a_bigger_goal_is_refused_before_it_starts():
    from pydantic import ValidationError

    from workflows.contract import SessionInput

    with pytest.raises(ValidationError) as caught:
        SessionInput(goal="x" * 200_001)
    assert "at most 200000 characters" in str(caught.value)
    # The client turns this into one line on stderr: tests/test_bad_input.py.
