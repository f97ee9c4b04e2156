"""Fallback models: a step the first model cannot make goes to the next, on the real dev
server, from the fake Messages API to the fake Chat Completions API.

The Anthropic fake answers with the faults a real outage brings (529 overloaded, 429, a
refused key) or a request the API refuses (400), and the OpenAI-compatible fake makes the
step instead, or must never be asked. Each fake fails loudly when asked for a turn it was
not scripted with, so a model asked when it should not be fails the test.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
import pytest_asyncio
from temporalio.client import Client

from activities.model import ModelActivities
from activities.providers.anthropic import AnthropicProvider
from activities.providers.openai import OpenAIProvider
from activities.transcript import TranscriptStore
from devservers.fakemodel import FakeChatServer, FakeModelServer
from infra.definitions import Definitions
from infra.errors import BadRequest
from sessions import start_input
from sessions.pricing import PRICES
from tests.conftest import Harness, answer, tool_use
from tests.support.reliability import record
from tests.support.tools import TOOLS
from worker import build_worker
from workflows.contract import SessionHistory, SessionInput, SessionStatus, UserMessage

AREA = "Fallback models"
FIRST = "anthropic:claude-sonnet-4-6"
SECOND = "openai:gpt-4.1-mini"


@pytest.fixture(scope="module")
def fake_chat() -> Iterator[FakeChatServer]:
    server = FakeChatServer().start()
    yield server
    server.stop()


class Both(Harness):
    """Sessions on FIRST with SECOND as fallback; `first` and `second` script each fake."""

    def __init__(self, client: Client, fake_model: FakeModelServer, chat: FakeChatServer, queue: str):
        super().__init__(client, fake_model, queue)
        self.chat = chat

    async def begin(self, first: list[dict[str, Any]], second: list[dict[str, Any]], **fields: Any):
        session_id = f"test-{uuid.uuid4().hex[:10]}"
        self.chat.script.set(session_id, second)
        fields.setdefault("model", FIRST)
        fields.setdefault("fallback_models", [SECOND])
        fields.setdefault("fallback_prices", start_input.fallback_prices(fields["fallback_models"]))
        fields.setdefault("price", PRICES.get(fields["model"]))
        return await self.start(first, session_id=session_id, **fields)

    def asked(self, session_id: str) -> tuple[int, int]:
        """How many requests of the session each fake received: (first, second)."""
        second = [r for r in self.chat.script.requests if r["session"] == session_id]
        return len(self.requests(session_id)), len(second)


@pytest_asyncio.fixture
async def both(
    client: Client, fake_model: FakeModelServer, fake_chat: FakeChatServer, data_dir: Path
) -> AsyncIterator[Both]:
    providers = {
        "anthropic": AnthropicProvider(
            client=anthropic.AsyncAnthropic(base_url=fake_model.url, api_key="test-key", max_retries=0)
        ),
        "openai": OpenAIProvider(
            client=openai.AsyncOpenAI(base_url=fake_chat.base_url, api_key="test", max_retries=0)
        ),
    }
    model = ModelActivities(store=TranscriptStore(data_dir / "transcripts"), providers=providers)
    queue = f"test-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, TOOLS, queue=queue, model=model):
        yield Both(client, fake_model, fake_chat, queue)


async def until(handle, done: Callable[[SessionStatus], bool], timeout: float = 30) -> SessionStatus:
    deadline = asyncio.get_running_loop().time() + timeout
    while not done(status := await handle.query("status", result_type=SessionStatus)):
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"session {handle.id} is {status.status} after {status.steps} steps")
        await asyncio.sleep(0.1)
    return status


async def history_of(handle) -> SessionHistory:
    return await handle.query("history", result_type=SessionHistory)


async def test_overloaded_after_two_attempts_the_step_goes_to_the_fallback_model_and_stays_there(both: Both):
    """529 twice: the same step is made by the OpenAI-compatible model, which keeps the
    session through its tool loop (the Anthropic fake would answer if asked again)."""
    overloaded = {"status": 529, "message": "Overloaded", "times": 2}
    handle = await both.begin(
        [overloaded, answer("the first model, asked again in the tool loop")],
        [tool_use("get_time", {"timezone_name": "UTC"}, id="call_t1"), answer("It is noon.")],
    )
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed" and result.answer == "It is noon.", result.error
    assert result.model == FIRST and result.model_in_use == SECOND
    assert both.asked(handle.id) == (2, 2)
    trace = (await history_of(handle)).trace
    assert [t.model for t in trace] == ["gpt-4.1-mini", "gpt-4.1-mini"]
    assert [[f.model_dump() for f in t.fallback] for t in trace] == [
        [{"model": FIRST, "reason": "model 529: Overloaded (retries exhausted)"}],
        [],
    ]
    price = PRICES[SECOND]
    assert [t.cost_usd for t in trace] == [price.cost(t.usage) for t in trace]
    assert result.cost_usd == pytest.approx(sum(price.cost(t.usage) for t in trace))
    record(AREA, "the first model answers 529 (overloaded) twice",
           "the same step is made by the fallback model, which keeps the session through its tool loop; "
           "the trace turn names the model it fell back from and why",
           {"requests to the first model": 2, "fallback": trace[0].fallback[0].reason})  # fmt: skip


async def test_a_chat_goes_back_to_the_first_model_after_the_fallback_answered(both: Both):
    """Once the fallback model has answered without calling a tool, the next run tries the first again."""
    handle = await both.begin(
        [{"status": 503, "message": "unavailable", "times": 2}, answer("Back on the first model.")],
        [tool_use("get_time", {"timezone_name": "UTC"}, id="call_t1"), answer("It is noon.")],
        chat=True,
    )
    status = await until(handle, lambda s: s.status == "waiting_input")
    assert status.model_in_use == SECOND and status.steps == 2, status
    await handle.execute_update("send_message", UserMessage(text="and now?"), result_type=int)
    status = await until(handle, lambda s: s.status == "waiting_input" and s.steps == 3)
    assert status.answer == "Back on the first model." and status.model_in_use == FIRST
    assert both.asked(handle.id) == (3, 2)
    await handle.execute_update("close_session", result_type=str)
    await asyncio.wait_for(handle.result(), 30)


async def test_a_refused_key_falls_back_at_once(both: Both):
    handle = await both.begin(
        [{"status": 401, "message": "invalid x-api-key"}], [answer("Answered by the fallback.")]
    )
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed" and result.answer == "Answered by the fallback."
    assert both.asked(handle.id) == (1, 1)  # 401 is never retried
    trace = (await history_of(handle)).trace
    assert trace[0].fallback[0].model_dump() == {"model": FIRST, "reason": "model 401: invalid x-api-key"}
    record(AREA, "the first model refuses the key (401)",
           "the fallback model makes the step at once, with no retry of the first",
           {"requests to the first model": 1})  # fmt: skip


async def test_rate_limited_the_first_model_gets_its_retries_before_the_fallback(both: Both):
    limited = {"status": 429, "message": "rate limited", "headers": {"retry-after": "0.1"}, "times": 3}
    handle = await both.begin([limited], [answer("Answered by the fallback.")], limits={"model_attempts": 3})
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed" and result.answer == "Answered by the fallback."
    assert both.asked(handle.id) == (3, 1)  # every attempt the session allows, then the fallback


async def test_an_invalid_request_does_not_fall_back(both: Both):
    handle = await both.begin([{"status": 400, "message": "messages: roles must alternate"}], [])
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "failed" and result.error == "model 400: messages: roles must alternate"
    assert result.model_in_use == FIRST
    assert both.asked(handle.id) == (1, 0)  # the fallback model would be sent the same request
    record(AREA, "the first model refuses the request as invalid (400)",
           "the session fails with the provider's message; the fallback model is not asked",
           {"error": result.error})  # fmt: skip


async def test_the_last_model_failing_ends_the_session_with_its_error(both: Both):
    handle = await both.begin(
        [{"status": 401, "message": "invalid x-api-key"}],
        [{"status": 403, "message": "Country not supported"}],
    )
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "failed" and result.error == "model 403: Country not supported"
    assert both.asked(handle.id) == (1, 1)


# ---- at start --------------------------------------------------------------------------


def _definitions(**agent: Any) -> Definitions:
    return Definitions.model_validate({"agents": {"helper": {"model": FIRST, **agent}}})


def test_an_agent_definition_names_its_fallback_models():
    resolved = start_input.session_input(
        _definitions(fallback_models=[SECOND]), "helper", goal="g", limits={}, fields={}
    )
    assert resolved.model == FIRST and resolved.fallback_models == [SECOND]
    assert resolved.fallback_prices == {SECOND: PRICES[SECOND]}
    overridden = start_input.session_input(
        _definitions(fallback_models=[SECOND]), "helper", goal="g", limits={},
        fields={"fallback_models": ["openai:gpt-4o"]},
    )  # fmt: skip
    assert overridden.fallback_models == ["openai:gpt-4o"]


def test_a_cost_budget_needs_prices_for_every_fallback_model(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("AGENT_DEFINITIONS", str(tmp_path / "agents.toml"))
    (tmp_path / "agents.toml").write_text("")
    limits = {"cost_budget_usd": 1.0}
    fields = {"model": FIRST, "fallback_models": [SECOND, "openai:my-own-model"]}
    with pytest.raises(BadRequest) as refused:
        start_input.resolve(goal="g", agent=None, limits=limits, fields=fields)
    assert str(refused.value).startswith(
        "no prices for fallback model 'openai:my-own-model', so a cost budget cannot be kept; models with prices:"
    )
    assert "\n" not in str(refused.value)
    fields["fallback_models"] = [SECOND]
    assert start_input.resolve(goal="g", agent=None, limits=limits, fields=fields).fallback_models == [SECOND]
    with pytest.raises(BadRequest, match="unknown model provider 'nope'"):
        start_input.resolve(goal="g", agent=None, limits={}, fields={**fields, "fallback_models": ["nope:x"]})


def test_a_model_is_never_its_own_fallback():
    with pytest.raises(ValueError, match="is its own fallback model"):
        SessionInput(goal="g", model=FIRST, fallback_models=[FIRST])
    with pytest.raises(ValueError, match="named twice"):
        SessionInput(goal="g", model=FIRST, fallback_models=[SECOND, SECOND])
