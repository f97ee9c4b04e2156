"""The model activity over a long session: it keeps in memory only the tail of the
transcript that its context budget can send, sends what a fit over the whole transcript
sends, and a worker that starts afresh on the same store sends the same request."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from activities.context import estimate_tokens, fit
from activities.model import ModelActivities
from activities.providers import ModelTurn, ProviderCall
from activities.transcript import TranscriptStore
from activities.wire import (
    Message,
    ModelRequest,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from tests.unit.test_providers import classify

CONTEXT_TOKENS = 3000
OURS = ("model", "transcript", "context")  # the modules whose allocations count as the session's
MAX_TOKENS = 200
OUTPUT_CHARS = 1000


class LoopProvider:
    """Asks for one tool call a step (thinking at every third), and summarises when asked."""

    name = "anthropic"

    def __init__(self) -> None:
        self.calls = 0
        self.summaries = 0
        self.last: ProviderCall | None = None  # the latest call of the loop (not a summary)

    async def complete(self, call: ProviderCall, on_text=None, on_thinking=None) -> ModelTurn:
        self.calls += 1
        if call.headers.get("x-agent-purpose") == "summary":
            self.summaries += 1
            message = Message(
                role="assistant", content=[TextBlock(text=f"summary of {len(str(call.messages))}")]
            )
            return ModelTurn(message=message, stop_reason="end_turn", usage=Usage(output_tokens=1), model="m")
        self.last = call
        step = call.headers["x-agent-step"]
        blocks: list[Any] = (
            [ThinkingBlock(thinking=f"think {step}", signature="s")] if int(step) % 3 == 0 else []
        )
        blocks.append(ToolUseBlock(id=f"t{step}", name="get_time", input={}))
        message = Message(role="assistant", content=blocks)
        return ModelTurn(message=message, stop_reason="tool_use", usage=Usage(output_tokens=1), model="m")

    async def count_tokens(self, call: ProviderCall) -> int | None:
        return None

    def classify(self, err: BaseException):
        return classify(err)


def _request(step: int, ref: str | None, summarize: bool) -> ModelRequest:
    if ref is None:
        new = [Message(role="user", content=[TextBlock(text="the goal")])]
    else:
        result = ToolResultBlock(tool_use_id=f"t{step - 1}", content=f"{step} " + "y" * OUTPUT_CHARS)
        new = [Message(role="user", content=[result])]
    return ModelRequest(
        session_id="s-long", step=step, model="anthropic:claude-test", system="be brief",
        max_tokens=MAX_TOKENS, tools=[], tools_ref="", transcript_ref=ref, new_messages=new,
        stream=False, context_tokens=CONTEXT_TOKENS, summarize_dropped=summarize,
    )  # fmt: skip


async def _sent_as_the_whole_transcript(
    store: TranscriptStore, request: ModelRequest, provider: LoopProvider, dropped: int
) -> None:
    """What a fit over the whole stored transcript sends, byte for byte."""
    whole = [
        *(await store.load(request.transcript_ref)),
        *(m.model_dump(mode="json", exclude_none=True) for m in request.new_messages),
    ]
    expected = fit(
        whole, CONTEXT_TOKENS - MAX_TOKENS, fixed=estimate_tokens("be brief") + estimate_tokens([])
    )
    assert provider.last is not None and provider.last.messages == expected.messages
    assert dropped == len(expected.dropped) > 0


def _retained() -> int:
    """Bytes still held that were allocated with the model activity or its store on the
    stack: the process's other threads (a test run's servers and workers) left out."""
    gc.collect()
    ours = [tracemalloc.Filter(True, f"*/activities/{name}.py", all_frames=True) for name in OURS]
    return sum(stat.size for stat in tracemalloc.take_snapshot().filter_traces(ours).statistics("filename"))


@pytest.mark.parametrize("summarize", [False, True])
async def test_a_long_session_keeps_its_tail_and_sends_what_the_whole_transcript_would(tmp_path, summarize):
    store = TranscriptStore(tmp_path)
    provider = LoopProvider()
    model = ModelActivities(store=store, providers={"anthropic": provider})
    env = ActivityEnvironment()
    ref: str | None = None
    retained: dict[int, int] = {}
    try:
        for step in range(1, 301):
            request = _request(step, ref, summarize)
            before = provider.calls
            reply = await env.run(model.call_model, request)
            if not summarize and step % 25 == 0:
                await _sent_as_the_whole_transcript(store, request, provider, reply.context_dropped)
            assert provider.calls - before <= 2  # a summary is made once per cut, not per call
            ref = reply.transcript_ref
            if step == 100:  # what the next 200 steps allocate and still hold is traced
                tracemalloc.start(12)
            if step in (100, 300):
                retained[step] = _retained()
    finally:
        tracemalloc.stop()
    # The memory held for the session stays the size of its context budget: 200 more steps
    # of 1 KB results would hold over 200 KB more with the whole transcript in memory.
    assert retained[300] - retained[100] < 60_000, retained
    assert ref is not None
    held = store.cached(ref)
    assert held is not None and held.count == 2 * 300 and not held.whole
    assert len(held.messages) <= 2 * CONTEXT_TOKENS * 3.5 / OUTPUT_CHARS + 4
    assert held.messages[0]["content"][0]["text"] == "the goal"

    # A worker that starts afresh on the same store (a restart, another host) sends the
    # same request for the next step, from the store alone.
    fresh = LoopProvider()
    again = ModelActivities(store=TranscriptStore(tmp_path), providers={"anthropic": fresh})
    request = _request(301, ref, summarize)
    first = await env.run(model.call_model, request)
    second = await env.run(again.call_model, request)
    assert fresh.last == provider.last
    assert (first.transcript_ref, first.context_dropped) == (second.transcript_ref, second.context_dropped)
    assert fresh.summaries == 0  # the summary was read from the store, not made again


async def test_a_streamed_call_leaves_no_class_to_collect():
    """A streamed model call builds no pydantic class per call (the SDK's own stream helper
    named a generic one at every call, which pydantic built again and left to collect)."""
    import anthropic
    import pydantic

    from activities.providers.anthropic import AnthropicProvider
    from devservers.fakemodel import FakeModelServer

    fake = FakeModelServer().start()
    client = anthropic.AsyncAnthropic(base_url=fake.url, api_key="test-key", max_retries=0)
    provider = AnthropicProvider(client=client)

    async def call() -> None:
        messages: Any = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
        await provider.complete(
            ProviderCall(model="claude-x", system="", max_tokens=10, tools=[], messages=messages, stream=True)
        )

    try:
        await call()
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            await call()
            gc.collect()
            # Models only: the process's other threads (a test run's workers) may drop
            # classes of their own meanwhile, such as a stopped live server's.
            classes = [o for o in gc.garbage if isinstance(o, type) and issubclass(o, pydantic.BaseModel)]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
    finally:
        fake.stop()
    assert classes == []
