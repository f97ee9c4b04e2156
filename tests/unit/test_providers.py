"""The provider seam without a server: choosing a provider by prefix, Anthropic's answers
normalised, its failures classified, Retry-After read, and the model activity driving a
scripted provider through the prompt-too-long refit."""

from __future__ import annotations

import email.utils
import time
from datetime import timedelta
from typing import Any

import anthropic
import httpx2 as httpx
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities import providers
from activities.model import ModelActivities
from activities.model_errors import (
    MODEL_AUTH,
    MODEL_RATE_LIMITED,
    MODEL_RETRYABLE,
    MODEL_TERMINAL,
    PROMPT_TOO_LONG,
    IncompleteResponse,
    retry_after,
    terminal,
)
from activities.providers import ModelTurn, ProviderCall
from activities.providers.anthropic import AnthropicProvider, build_params, stop_reason, to_turn
from activities.transcript import TranscriptStore
from activities.wire import Message, ModelRequest, TextBlock, ToolSpec, ToolUseBlock, Usage

# The provider's own classification (no client is built for it).
classify = AnthropicProvider().classify
URL = "https://api.anthropic.com/v1/messages"


# ---- choosing a provider -------------------------------------------------------------


@pytest.mark.parametrize(
    "model, expected",
    [
        ("claude-sonnet-4-5", ("anthropic", "claude-sonnet-4-5")),
        ("anthropic:claude-sonnet-4-5", ("anthropic", "claude-sonnet-4-5")),
        # A dot before the colon is a model id of its own, not a prefix.
        (
            "anthropic.claude-3-5-sonnet-20240620-v1:0",
            ("anthropic", "anthropic.claude-3-5-sonnet-20240620-v1:0"),
        ),
    ],
)
def test_the_prefix_names_the_provider(model, expected):
    assert providers.split(model) == expected


def test_an_unknown_prefix_is_terminal_and_names_the_known_ones():
    with pytest.raises(ApplicationError) as err:
        providers.resolve("foo:bar")
    assert err.value.non_retryable and err.value.type == MODEL_TERMINAL
    assert "'foo'" in err.value.message and "anthropic:" in err.value.message


def test_a_provider_is_built_once_per_process_and_an_injected_one_wins():
    first, bare = providers.resolve("anthropic:claude-x")
    again, _ = providers.resolve("claude-y")
    assert isinstance(first, AnthropicProvider) and first is again and bare == "claude-x"
    mine = AnthropicProvider(client=anthropic.AsyncAnthropic(api_key="k", max_retries=0))
    assert providers.resolve("claude-x", {"anthropic": mine}) == (mine, "claude-x")


# ---- Anthropic's answers, normalised --------------------------------------------------


@pytest.mark.parametrize(
    "raw, normalised",
    [
        ("end_turn", "end_turn"),
        ("stop_sequence", "end_turn"),
        ("tool_use", "tool_use"),
        ("max_tokens", "max_tokens"),
        ("model_context_window_exceeded", "max_tokens"),
        ("refusal", "refusal"),
        ("pause_turn", "pause_turn"),
        ("something_new", "other"),
        (None, "other"),
    ],
)
def test_stop_reasons_are_normalised(raw, normalised):
    assert stop_reason(raw) == normalised


def _message(**fields: Any) -> dict[str, Any]:
    """An answer of the Messages API, as JSON."""
    body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [
            {"type": "text", "text": "looking"},
            {"type": "tool_use", "id": "tu_1", "name": "get_time", "input": {}},
            {"type": "thinking", "thinking": "hm", "signature": "sig"},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 5, "cache_creation_input_tokens": None},
    }
    return {**body, **fields}


def test_a_message_becomes_a_turn_with_neutral_blocks_and_usage():
    turn = to_turn(_message())
    text, use, other = turn.message.content
    assert isinstance(text, TextBlock) and isinstance(use, ToolUseBlock) and other.type == "thinking"
    assert turn.stop_reason == "tool_use" and turn.model == "claude-sonnet-4-5-20250929"
    assert turn.usage == Usage(input_tokens=12, output_tokens=5)
    cached = to_turn(_message(usage={"input_tokens": 1, "output_tokens": 2, "cache_read_input_tokens": 30}))
    assert cached.usage.model_dump() == {
        "input_tokens": 1,
        "output_tokens": 2,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 30,
    }


def test_cache_breakpoints_go_on_tools_system_and_the_last_message():
    spec = ToolSpec(name="t", description="d", input_schema={"type": "object"})
    messages = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    call = ProviderCall(model="m", system="s", max_tokens=10, tools=[spec, spec], messages=messages)
    params = build_params(call)
    assert [("cache_control" in t) for t in params["tools"]] == [False, True]
    assert params["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert [("cache_control" in b) for b in params["messages"][0]["content"]] == [False, True]
    assert "cache_control" not in messages[0]["content"][1]  # the transcript is not changed
    one_off = build_params(
        ProviderCall(model="m", system="s", max_tokens=10, tools=[], messages=messages, cache=False)
    )
    assert "cache_control" not in str(one_off) and "tools" not in one_off


# ---- Anthropic's failures, classified -------------------------------------------------


def _status_error(
    status: int, message: str, headers: dict[str, str] | None = None
) -> anthropic.APIStatusError:
    response = httpx.Response(status, headers=headers or {}, request=httpx.Request("POST", URL))
    body = {"type": "error", "error": {"type": "some_error", "message": message}}
    return anthropic.APIStatusError(message, response=response, body=body)


@pytest.mark.parametrize(
    "status, message, kind",
    [
        (400, "prompt is too long: 210000 tokens > 200000 maximum", PROMPT_TOO_LONG),
        (400, "messages: roles must alternate", MODEL_TERMINAL),
        (401, "invalid x-api-key", MODEL_AUTH),
        (403, "forbidden", MODEL_AUTH),
        (404, "model: claude-nope", MODEL_TERMINAL),
        (413, "request too large", MODEL_TERMINAL),
        (408, "timeout", MODEL_RETRYABLE),
        (409, "conflict", MODEL_RETRYABLE),
        (429, "rate limited", MODEL_RATE_LIMITED),
        (500, "internal", MODEL_RETRYABLE),
        (503, "unavailable", MODEL_RETRYABLE),
        (529, "overloaded", MODEL_RETRYABLE),
    ],
)
def test_status_errors_are_classified_with_the_providers_message(status, message, kind):
    err = classify(_status_error(status, message))
    assert err.type == kind
    assert err.non_retryable == (kind not in (MODEL_RETRYABLE, MODEL_RATE_LIMITED))
    assert err.message == f"model {status}: {message}"


def test_a_retryable_status_honours_retry_after():
    assert classify(_status_error(429, "slow down", {"retry-after": "7"})).next_retry_delay == timedelta(
        seconds=7
    )
    assert classify(_status_error(529, "busy", {"retry-after-ms": "1500"})).next_retry_delay == timedelta(
        seconds=1.5
    )
    assert classify(_status_error(500, "oops")).next_retry_delay is None


def _request() -> httpx.Request:
    return httpx.Request("POST", URL)


@pytest.mark.parametrize(
    "err, says",
    [
        (anthropic.APITimeoutError(_request()), "timed out"),
        (httpx.ReadTimeout("slow"), "timed out"),
        (httpx.RemoteProtocolError("peer closed connection"), "connection error: RemoteProtocolError"),
        (anthropic.APIConnectionError(request=_request()), "connection error"),
        (IncompleteResponse("the stream ended before message_stop"), "incomplete"),
        (ValueError("Expecting value"), "cannot be read"),
        (RuntimeError("surprise"), "model call failed: RuntimeError"),
    ],
)
def test_transport_and_unreadable_failures_are_retryable(err, says):
    classified = classify(err)
    assert classified.type == MODEL_RETRYABLE and not classified.non_retryable
    assert says in classified.message


def test_an_error_already_decided_is_kept():
    decided = terminal("ANTHROPIC_API_KEY is not set")
    assert classify(decided) is decided


# ---- Retry-After ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers, seconds",
    [
        (None, None),
        ({}, None),
        ({"retry-after": "3"}, 3),
        ({"retry-after": "0"}, 0),
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),  # the precise one wins
        ({"retry-after-ms": "soon", "retry-after": "9"}, 9),
        ({"retry-after": "-4"}, None),
        ({"retry-after": "whenever"}, None),
        ({"retry-after": "3600"}, 300),  # capped at five minutes
    ],
)
def test_retry_after_is_read_from_either_header(headers, seconds):
    expected = None if seconds is None else timedelta(seconds=seconds)
    assert retry_after(headers) == expected


def test_retry_after_may_be_an_http_date():
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    delay = retry_after({"retry-after": date})
    assert delay is not None and timedelta(seconds=25) < delay <= timedelta(seconds=31)
    past = email.utils.formatdate(time.time() - 30, usegmt=True)
    assert retry_after({"retry-after": past}) is None


# ---- the activity over a scripted provider --------------------------------------------


class ScriptedProvider:
    """Answers with prompt-too-long while the prompt is over `limit` characters."""

    name = "anthropic"

    def __init__(self, limit: int):
        self.limit = limit
        self.calls: list[ProviderCall] = []

    async def complete(self, call: ProviderCall, on_text=None, on_thinking=None) -> ModelTurn:
        self.calls.append(call)
        if len(str(call.messages)) > self.limit:
            raise _status_error(400, "prompt is too long: 999999 tokens > 200000 maximum")
        message = Message(role="assistant", content=[TextBlock(text="done")])
        return ModelTurn(
            message=message, stop_reason="end_turn", usage=Usage(output_tokens=1), model="m-2025"
        )

    async def count_tokens(self, call: ProviderCall) -> int | None:
        return None

    def classify(self, err: BaseException) -> ApplicationError:
        return classify(err)


async def _request_with_history(store: TranscriptStore, turns: int) -> ModelRequest:
    history: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "the goal"}]}]
    for i in range(turns):
        history.append({"role": "assistant", "content": [{"type": "text", "text": f"step {i} " + "x" * 400}]})
        history.append({"role": "user", "content": [{"type": "text", "text": f"go on {i}"}]})
    ref = await store.extend(None, history, history)
    return ModelRequest(
        session_id="s-1", step=turns + 1, model="anthropic:claude-test", system="", max_tokens=100,
        tools=[], tools_ref="", transcript_ref=ref, stream=False, context_tokens=100_000,
        new_messages=[Message(role="assistant", content=[TextBlock(text="more")])],
    )  # fmt: skip


async def test_the_activity_fits_tighter_while_the_provider_says_too_long(tmp_path):
    store = TranscriptStore(tmp_path)
    provider = ScriptedProvider(limit=3000)
    model = ModelActivities(store=store, providers={"anthropic": provider})
    reply = await ActivityEnvironment().run(model.call_model, await _request_with_history(store, 20))
    assert len(provider.calls) > 1 and reply.context_dropped > 0
    assert {c.model for c in provider.calls} == {"claude-test"}
    assert provider.calls[0].headers == {"x-agent-session": "s-1", "x-agent-step": "21"}
    assert reply.stop_reason == "end_turn" and reply.model == "m-2025" and reply.message.text() == "done"
    assert (await store.load(reply.transcript_ref))[-1]["content"] == [{"type": "text", "text": "done"}]


async def test_a_prompt_that_never_fits_ends_as_prompt_too_long(tmp_path):
    store = TranscriptStore(tmp_path)
    model = ModelActivities(store=store, providers={"anthropic": ScriptedProvider(limit=10)})
    with pytest.raises(ApplicationError) as err:
        await ActivityEnvironment().run(model.call_model, await _request_with_history(store, 20))
    assert err.value.type == PROMPT_TOO_LONG and err.value.non_retryable


async def test_a_missing_transcript_is_reported_for_the_workflow_to_resend(tmp_path):
    store = TranscriptStore(tmp_path)
    request = (await _request_with_history(store, 1)).model_copy(update={"transcript_ref": "0" * 64})
    model = ModelActivities(
        store=TranscriptStore(tmp_path / "empty"), providers={"anthropic": ScriptedProvider(9999)}
    )
    with pytest.raises(ApplicationError) as err:
        await ActivityEnvironment().run(model.call_model, request)
    assert err.value.type == "TranscriptMissing" and err.value.non_retryable
