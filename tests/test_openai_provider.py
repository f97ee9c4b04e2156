"""Sessions on `openai:` models: the real `openai` client against the local Chat
Completions fake, through whole sessions on the real dev server.

The fake is scripted per session like the Messages API fake. Each test shows what the
session's history records (neutral blocks, normalised stop reasons, usage with cached
tokens counted once) and what the fake received (the wire format the provider sent).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import pytest_asyncio
from temporalio.client import Client, WorkflowHandle

from activities.model import ModelActivities
from activities.providers.openai import OpenAIProvider
from activities.transcript import TranscriptStore
from activities.wire import ToolResultBlock
from devservers.fakemodel import FakeChatServer
from tests.conftest import Harness, answer
from tests.support.reliability import record
from tests.support.tools import TOOLS
from tests.test_faults import gaps, model_activities
from worker import build_worker
from workflows.contract import SessionHistory, SessionStatus

AREA = "Chat Completions API (`openai:` models)"
MODEL = "openai:gpt-test"


class ChatHarness(Harness):
    """A harness whose sessions run on an `openai:` model by default."""

    async def start(self, turns: list[dict[str, Any]] | None, *args: Any, **fields: Any) -> WorkflowHandle:
        fields.setdefault("model", MODEL)
        return await super().start(turns, *args, **fields)


@pytest.fixture(scope="module")
def fake_chat() -> Iterator[FakeChatServer]:
    server = FakeChatServer().start()
    yield server
    server.stop()


@pytest_asyncio.fixture
async def chat(client: Client, fake_chat: FakeChatServer, data_dir: Path) -> AsyncIterator[ChatHarness]:
    provider = OpenAIProvider(
        client=openai.AsyncOpenAI(base_url=fake_chat.base_url, api_key="test", max_retries=0)
    )
    model = ModelActivities(store=TranscriptStore(data_dir / "transcripts"), providers={"openai": provider})
    queue = f"test-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, TOOLS, queue=queue, model=model):
        yield ChatHarness(client, fake_chat, queue)


def calls(*tool_calls: dict[str, Any], text: str = "") -> dict[str, Any]:
    """A scripted turn that asks for these tools, in this order."""
    return {"text": text, "tool_calls": list(tool_calls)}


def usage(prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


async def history_of(handle: WorkflowHandle) -> SessionHistory:
    return await handle.query("history", result_type=SessionHistory)


# ---- sessions that work ---------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False], ids=["streaming", "whole"])
async def test_a_session_calls_a_tool_then_answers(chat: ChatHarness, stream: bool):
    turns = [
        {**calls({"name": "get_time", "input": {"timezone_name": "UTC"}, "id": "call_t1"}, text="Checking."),
         "usage": usage(120, 9)},
        {**answer("It is noon."), "usage": usage(200, 4, cached=128)},
    ]  # fmt: skip
    handle = await chat.start(turns, stream=stream)
    result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "completed" and result.answer == "It is noon." and result.steps == 2

    history = await history_of(handle)
    assert [t.stop_reason for t in history.trace] == ["tool_use", "end_turn"]
    assert [t.model for t in history.trace] == ["gpt-test", "gpt-test"]
    # Cached prompt tokens are cache reads, not input: counted once.
    assert [t.usage.model_dump() for t in history.trace] == [
        {
            "input_tokens": 120,
            "output_tokens": 9,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
        {
            "input_tokens": 72,
            "output_tokens": 4,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 128,
        },
    ]
    assert result.usage.total() == 120 + 9 + 200 + 4
    reply = history.messages[1].model_dump(mode="json", exclude_none=True)
    assert reply["content"] == [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "call_t1", "name": "get_time", "input": {"timezone_name": "UTC"}},
    ]
    [tool_result] = history.messages[2].content
    assert isinstance(tool_result, ToolResultBlock) and tool_result.tool_use_id == "call_t1"

    first, second = [r["body"] for r in chat.requests(handle.id)]
    assert first["model"] == "gpt-test" and first["messages"][0]["role"] == "system"
    assert first.get("stream", False) == stream
    if stream:
        assert first["stream_options"] == {"include_usage": True}
    get_time = next(t for t in first["tools"] if t["function"]["name"] == "get_time")
    assert get_time["type"] == "function" and get_time["function"]["parameters"]["type"] == "object"
    assistant, tool = second["messages"][-2:]
    assert assistant["tool_calls"][0]["id"] == "call_t1" and assistant["content"] == "Checking."
    assert tool == {"role": "tool", "tool_call_id": "call_t1", "content": tool_result.content}
    assert tool_result.content and not tool_result.is_error
    record(
        AREA,
        f"a tool call, then an answer ({'streamed' if stream else 'whole'})",
        "completed; neutral blocks in history, finish reasons normalised, cached tokens as cache reads",
        {},
    )


async def test_parallel_tool_calls_run_and_answer_in_order(chat: ChatHarness):
    parallel = calls(
        {"name": "save_note", "input": {"title": "a", "text": "first"}, "id": "call_a"},
        {"name": "get_time", "input": {}, "id": "call_b"},
        {"name": "save_note", "arguments": '{"title": "c", "te', "id": "call_c"},  # cut-off JSON
    )
    handle = await chat.start([parallel, answer("all three seen")])
    result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "completed" and result.answer == "all three seen"

    history = await history_of(handle)
    uses = history.messages[1].tool_uses()
    assert [(u.id, u.name) for u in uses] == [
        ("call_a", "save_note"),
        ("call_b", "get_time"),
        ("call_c", "save_note"),
    ]
    assert uses[2].input == {"_raw_arguments": '{"title": "c", "te'}
    results = [r for r in history.messages[2].content if isinstance(r, ToolResultBlock)]
    assert len(results) == len(history.messages[2].content)
    assert [r.tool_use_id for r in results] == ["call_a", "call_b", "call_c"]
    assert [r.is_error for r in results] == [False, False, True]

    sent = chat.requests(handle.id)[1]["body"]["messages"]
    assistant = sent[-4]
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_a", "call_b", "call_c"]
    assert (
        assistant["tool_calls"][2]["function"]["arguments"] == '{"title": "c", "te'
    )  # as the model wrote it
    tools = sent[-3:]
    assert [(m["role"], m["tool_call_id"]) for m in tools] == [
        ("tool", "call_a"),
        ("tool", "call_b"),
        ("tool", "call_c"),
    ]
    assert tools[2]["content"].startswith("Error: ") and not tools[0]["content"].startswith("Error: ")
    record(
        AREA,
        "three parallel tool calls, one with cut-off argument JSON",
        "run and answered in order; the bad one is an error result the model sees, prefixed `Error: `",
        {},
    )


# ---- failures -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header, value, expected", [("retry-after", "2", 2.0), ("retry-after-ms", "1500", 1.5)], ids=["s", "ms"]
)
async def test_429_is_retried_after_the_delay_asked_for(
    chat: ChatHarness, header: str, value: str, expected: float
):
    fault = {
        "status": 429,
        "code": "rate_limit_exceeded",
        "message": "Rate limit reached",
        "headers": {header: value},
    }
    handle = await chat.start([fault, answer("fine")])
    result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "completed" and result.answer == "fine"
    [gap] = gaps(chat.requests(handle.id))
    assert expected - 0.05 <= gap < expected + 0.9, gap
    [model] = await model_activities(handle)
    assert (model.attempt, model.closed) == (2, "completed")
    assert (await history_of(handle)).trace[0].attempt == 2
    record(
        AREA,
        f"429 with `{header}: {value}`",
        "retried after the delay asked for; completed",
        {"retried after": f"{gap:.2f} s"},
    )


RETRYABLE = {
    "500 server error": {"status": 500, "message": "The server had an error while processing your request."},
    "stream cut before its finish_reason": {"cut_stream": True, "text": "a partial answer"},
    "connection reset mid-stream": {"drop_mid": True, "text": "half of an answer that never ends"},
    "connection closed before any answer": {"drop": True},
    "malformed JSON in the stream": {"malformed": True, "text": "x"},
}


@pytest.mark.parametrize("name", list(RETRYABLE), ids=lambda n: re.sub(r"\W+", "-", n).strip("-"))
async def test_a_retryable_fault_is_retried_and_each_step_recorded_once(chat: ChatHarness, name: str):
    note = calls({"name": "save_note", "input": {"title": "t", "text": "once"}, "id": "call_n"})
    handle = await chat.start([note, RETRYABLE[name], answer("done")])
    result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "completed" and result.answer == "done", result
    assert [r["step"] for r in chat.requests(handle.id)] == ["1", "2", "2"]
    history = await history_of(handle)
    assert [t.attempt for t in history.trace] == [1, 2]
    assert [m.role for m in history.messages] == ["user", "assistant", "user", "assistant"]
    assert "partial" not in history.model_dump_json() and "never ends" not in history.model_dump_json()
    record(AREA, name, "retried by Temporal; completed, one assistant message per step", {})


async def test_401_fails_the_session_at_once_with_the_providers_message(chat: ChatHarness):
    message = "Incorrect API key provided: test. You can find your API key at https://platform.openai.com."
    handle = await chat.start([{"status": 401, "code": "invalid_api_key", "message": message}])
    result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "failed" and result.error == f"model 401: {message}"
    assert len(chat.requests(handle.id)) == 1
    [model] = await model_activities(handle)
    assert (model.attempt, model.closed) == (1, "failed")
    record(
        AREA,
        "401 with the provider's error body",
        "failed on the first attempt; `error` is the provider's message",
        {"attempts": 1},
    )


async def test_a_context_length_error_is_answered_by_cutting_more(chat: ChatHarness):
    turns = [calls({"name": "big_output", "input": {"chars": 4000}, "id": f"call_p{i}"}) for i in range(4)]
    handle = await chat.start([*turns, {**answer("fits now"), "prompt_limit": 9000}])
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed" and result.answer == "fits now"
    last = (await history_of(handle)).trace[-1]
    assert last.context_dropped > 0 and last.stop_reason == "end_turn"
    sizes = [len(json.dumps(r["body"]["messages"])) for r in chat.requests(handle.id)[4:]]
    # Each retry sent less; none repeated the request that was too long.
    assert len(sizes) >= 2 and all(b < a for a, b in itertools.pairwise(sizes)) and sizes[-1] <= 9000
    record(
        AREA,
        "400 `context_length_exceeded`",
        "answered by leaving more of the context out; completed",
        {"requests for the last step": len(sizes)},
    )


async def test_the_assistant_agent_on_an_openai_model(chat: ChatHarness):
    """An agent from agents.toml run on an `openai:` model: its tools, its approval rule
    (send_email: always) and its sub-agent tool, through Chat Completions."""
    from infra.definitions import load_definitions
    from sessions import start_input

    turns = [
        calls(
            {
                "name": "send_email",
                "input": {"to": "team@example.com", "subject": "hi", "body": "x"},
                "id": "call_e1",
            }
        ),
        answer("Sent."),
    ]
    session_input = start_input.session_input(
        load_definitions(), "assistant", goal="email the team", limits={}, fields={"model": MODEL}
    )
    session_id = f"test-{uuid.uuid4().hex[:10]}"
    chat.script(session_id, turns)
    handle = await chat.client.start_workflow(
        "AgentWorkflow", session_input, id=session_id, task_queue=chat.task_queue, result_type=SessionStatus
    )
    for _ in range(200):
        if (await handle.query("status", result_type=SessionStatus)).status == "waiting_approval":
            break
        await asyncio.sleep(0.1)
    await handle.execute_update("approve_call", {"tool_use_id": "call_e1"}, result_type=str)
    result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "completed" and result.agent == "assistant" and result.model == MODEL
    sent = chat.requests(session_id)[0]["body"]
    assert [t["function"]["name"] for t in sent["tools"]] == [
        "get_time",
        "save_note",
        "send_email",
        "agent__researcher",
    ]
    call = (await history_of(handle)).tool_calls[0]
    assert call.status == "done" and call.approval == "required"
    record(
        AREA,
        "the `assistant` agent from agents.toml on an `openai:` model",
        "its tools and sub-agent tool sent as functions; its approval rule holds; completed",
        {},
    )
