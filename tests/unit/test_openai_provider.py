"""The OpenAI provider without a server: the neutral transcript converted to Chat
Completions and the reply back, stop reasons and usage normalised, chunks assembled,
and the failures of the real `openai` client's own exception classes classified."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import httpx2 as httpx
import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.completion_usage import CompletionUsage
from temporalio.exceptions import ApplicationError

from activities import providers
from activities.model_errors import (
    MODEL_AUTH,
    MODEL_RATE_LIMITED,
    MODEL_RETRYABLE,
    MODEL_TERMINAL,
    PROMPT_TOO_LONG,
    IncompleteResponse,
    terminal,
)
from activities.providers import ProviderCall
from activities.providers.openai import OpenAIProvider, add_chunk, from_completion
from activities.providers.openai_format import Reply, build_params, stop_reason, to_turn, tool_input, usage
from activities.wire import TextBlock, ToolSpec, ToolUseBlock, Usage

# The provider's own classification (no client is built for it).
classify = OpenAIProvider().classify
URL = "https://api.openai.com/v1/chat/completions"


def test_the_openai_prefix_names_the_provider():
    assert providers.split("openai:gpt-4.1-mini") == ("openai", "gpt-4.1-mini")
    assert providers.split("openai:llama3.1:8b") == ("openai", "llama3.1:8b")  # an Ollama tag keeps its colon


async def test_a_missing_key_is_terminal_and_says_what_to_do(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ApplicationError) as err:
        OpenAIProvider().client()
    assert (
        err.value.non_retryable and "OPENAI_API_KEY" in err.value.message and "restart" in err.value.message
    )


async def test_counting_is_left_to_the_estimate():
    call = ProviderCall(model="m", system="", max_tokens=1, tools=[], messages=[])
    assert await OpenAIProvider(client=openai.AsyncOpenAI(api_key="k")).count_tokens(call) is None


# ---- the transcript, out --------------------------------------------------------------

TRANSCRIPT: list[dict[str, Any]] = [
    {"role": "user", "content": [{"type": "text", "text": "what time is it, and the weather?"}]},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "hm", "signature": "s"},  # another provider's block
            {"type": "text", "text": "checking both"},
            {"type": "tool_use", "id": "call_a", "name": "get_time", "input": {"tz": "UTC"}},
            {"type": "tool_use", "id": "call_b", "name": "weather", "input": {}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "call_a", "content": "12:00"},
            {"type": "tool_result", "tool_use_id": "call_b", "content": [{"type": "text", "text": "no such city"}],
             "is_error": True},
            {"type": "text", "text": "also: be brief"},
        ],
    },
]  # fmt: skip


def test_the_transcript_becomes_chat_messages():
    spec = ToolSpec(name="get_time", description="The time.", input_schema={"type": "object"})
    call = ProviderCall(model="gpt-x", system="be useful", max_tokens=50, tools=[spec], messages=TRANSCRIPT)
    params = build_params(call)
    assert params["model"] == "gpt-x" and params["max_completion_tokens"] == 50
    assert params["tools"] == [
        {"type": "function", "function": {"name": "get_time", "description": "The time.",
                                          "parameters": {"type": "object"}}}
    ]  # fmt: skip
    assert params["messages"] == [
        {"role": "system", "content": "be useful"},
        {"role": "user", "content": "what time is it, and the weather?"},
        {
            "role": "assistant",
            "content": "checking both",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": '{"tz": "UTC"}'},
                },
                {"id": "call_b", "type": "function", "function": {"name": "weather", "arguments": "{}"}},
            ],
        },
        # The tool messages come first: they must follow the assistant's tool calls.
        {"role": "tool", "tool_call_id": "call_a", "content": "12:00"},
        {"role": "tool", "tool_call_id": "call_b", "content": "Error: no such city"},
        {"role": "user", "content": "also: be brief"},
    ]


def test_an_assistant_message_of_tool_calls_alone_has_no_content_and_no_tools_means_no_tools_key():
    only_calls = [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c", "name": "t", "input": {}}]}
    ]
    params = build_params(ProviderCall(model="m", system="", max_tokens=1, tools=[], messages=only_calls))
    assert params["messages"] == [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c", "type": "function", "function": {"name": "t", "arguments": "{}"}}]}
    ]  # fmt: skip
    assert "tools" not in params


def test_arguments_that_were_not_json_round_trip_as_written():
    kept = tool_input('{"city": "Par')
    assert kept == {"_raw_arguments": '{"city": "Par'}
    assert tool_input("[1, 2]") == {"_raw_arguments": "[1, 2]"}  # JSON, but not an object
    assert tool_input("") == {}
    back = [{"role": "assistant", "content": [{"type": "tool_use", "id": "c", "name": "t", "input": kept}]}]
    params = build_params(ProviderCall(model="m", system="", max_tokens=1, tools=[], messages=back))
    assert params["messages"][0]["tool_calls"][0]["function"]["arguments"] == '{"city": "Par'


# ---- the reply, back ------------------------------------------------------------------


def _completion(
    message: dict[str, Any], finish_reason: str, usage: dict[str, Any] | None = None
) -> ChatCompletion:
    return ChatCompletion.model_validate({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-x-2025",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish_reason}],
        "usage": usage,
    })  # fmt: skip


def test_a_completion_with_parallel_tool_calls_becomes_a_turn_in_order():
    calls = [
        {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": '{"tz": "UTC"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "weather", "arguments": "{oops"}},
    ]
    usage_body = {"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107,
                  "prompt_tokens_details": {"cached_tokens": 64}}  # fmt: skip
    turn = to_turn(
        from_completion(_completion({"content": "both", "tool_calls": calls}, "tool_calls", usage_body))
    )
    text, first, second = turn.message.content
    assert text == TextBlock(text="both")
    assert first == ToolUseBlock(id="call_1", name="get_time", input={"tz": "UTC"})
    assert second == ToolUseBlock(id="call_2", name="weather", input={"_raw_arguments": "{oops"})
    assert turn.stop_reason == "tool_use" and turn.model == "gpt-x-2025"
    # Cached prompt tokens are counted once, as cache reads: totals and cost stay right.
    assert turn.usage == Usage(input_tokens=36, output_tokens=7, cache_read_input_tokens=64)


def _chunk(
    delta: dict[str, Any] | None, finish_reason: str | None = None, usage: Any = None
) -> ChatCompletionChunk:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
    return ChatCompletionChunk.model_validate({
        "id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-x", "choices": choices,
        "usage": usage,
    })  # fmt: skip


def test_streamed_chunks_assemble_text_and_interleaved_tool_calls():
    reply = Reply()
    chunks = [
        _chunk({"role": "assistant", "content": "Let me "}),
        _chunk({"content": "look."}),
        _chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                "function": {"name": "get_time", "arguments": ""}}]}),
        _chunk({"tool_calls": [{"index": 1, "id": "call_2", "type": "function",
                                "function": {"name": "weather", "arguments": '{"ci'}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"tz": "UTC"}'}}]}),
        _chunk({"tool_calls": [{"index": 1, "function": {"arguments": 'ty": "Oslo"}'}}]}),
        _chunk({}, finish_reason="tool_calls"),
        _chunk(None, usage={"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}),
    ]  # fmt: skip
    texts = [add_chunk(reply, chunk) for chunk in chunks]
    assert "".join(texts) == "Let me look."
    turn = to_turn(reply)
    assert [b.model_dump() for b in turn.message.tool_uses()] == [
        {"type": "tool_use", "id": "call_1", "name": "get_time", "input": {"tz": "UTC"}},
        {"type": "tool_use", "id": "call_2", "name": "weather", "input": {"city": "Oslo"}},
    ]
    assert turn.stop_reason == "tool_use" and turn.usage == Usage(input_tokens=10, output_tokens=4)


def test_a_tool_call_without_an_id_gets_one():
    reply = Reply(tool_calls={0: ["", "get_time", "{}"]}, finish_reason="tool_calls")
    [use] = to_turn(reply).message.tool_uses()
    assert use.id.startswith("call_") and len(use.id) > 10


@pytest.mark.parametrize(
    "finish_reason, has_calls, normalised",
    [
        ("stop", False, "end_turn"),
        ("tool_calls", True, "tool_use"),
        ("length", False, "max_tokens"),
        ("content_filter", False, "refusal"),
        ("function_call", True, "tool_use"),
        ("stop", True, "tool_use"),  # a compatible server that says stop with tool calls
        ("something_new", False, "other"),
        (None, False, "other"),
    ],
)
def test_finish_reasons_are_normalised(finish_reason, has_calls, normalised):
    assert stop_reason(finish_reason, has_calls) == normalised


def test_missing_usage_is_zero_and_cached_never_exceeds_the_prompt():
    assert usage(None) == Usage()
    odd = CompletionUsage.model_validate({"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6,
                                          "prompt_tokens_details": {"cached_tokens": 9}})  # fmt: skip
    assert usage(odd) == Usage(input_tokens=0, output_tokens=1, cache_read_input_tokens=5)


# ---- failures, classified -------------------------------------------------------------


def _status_error(status: int, message: str, headers: dict[str, str] | None = None, code: str | None = None):
    """What the openai client raises for an error answer (its own `_make_status_error`)."""
    response = httpx.Response(
        status, headers=headers or {}, request=httpx.Request("POST", URL),
        json={"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}},
    )  # fmt: skip
    client = openai.AsyncOpenAI(api_key="k", base_url="https://api.openai.com/v1")
    return client._make_status_error_from_response(response)


@pytest.mark.parametrize(
    "status, message, code, kind",
    [
        (400, "This model's maximum context length is 128000 tokens.", "context_length_exceeded", PROMPT_TOO_LONG),
        (400, "This model's maximum context length is 8192 tokens. However, you requested 9000", None,
         PROMPT_TOO_LONG),  # vLLM: no code, the words
        (400, "Invalid 'messages[2].tool_call_id'", None, MODEL_TERMINAL),
        (401, "Incorrect API key provided: sk-...", "invalid_api_key", MODEL_AUTH),
        (403, "Country not supported", None, MODEL_AUTH),
        (404, "The model `gpt-nope` does not exist", "model_not_found", MODEL_TERMINAL),
        (422, "unprocessable", None, MODEL_TERMINAL),
        (408, "timeout", None, MODEL_RETRYABLE),
        (409, "conflict", None, MODEL_RETRYABLE),
        (429, "Rate limit reached for gpt-4.1-mini", "rate_limit_exceeded", MODEL_RATE_LIMITED),
        (500, "The server had an error", None, MODEL_RETRYABLE),
        (503, "overloaded", None, MODEL_RETRYABLE),
    ],
)  # fmt: skip
def test_status_errors_are_classified_with_the_providers_message(status, message, code, kind):
    err = _status_error(status, message, code=code)
    assert isinstance(err, openai.APIStatusError)
    classified = classify(err)
    assert classified.type == kind
    assert classified.non_retryable == (kind not in (MODEL_RETRYABLE, MODEL_RATE_LIMITED))
    assert classified.message == f"model {status}: {message}"


def test_a_retryable_status_honours_retry_after():
    assert classify(_status_error(429, "slow", {"retry-after": "7"})).next_retry_delay == timedelta(seconds=7)
    assert classify(_status_error(429, "slow", {"retry-after-ms": "1500"})).next_retry_delay == timedelta(
        seconds=1.5
    )
    assert classify(_status_error(500, "oops")).next_retry_delay is None


def test_a_body_that_is_not_json_is_the_message():
    response = httpx.Response(502, text="Bad Gateway from the proxy", request=httpx.Request("POST", URL))
    err = openai.AsyncOpenAI(api_key="k")._make_status_error_from_response(response)
    assert classify(err).message == "model 502: Bad Gateway from the proxy"


def _request() -> httpx.Request:
    return httpx.Request("POST", URL)


@pytest.mark.parametrize(
    "err, says",
    [
        (openai.APITimeoutError(_request()), "timed out"),
        (httpx.ReadTimeout("slow"), "timed out"),
        (httpx.RemoteProtocolError("peer closed connection"), "connection error: RemoteProtocolError"),
        (openai.APIConnectionError(request=_request()), "connection error"),
        (IncompleteResponse("the stream ended before a finish_reason"), "incomplete"),
        (json.JSONDecodeError("Expecting value", "{", 1), "cannot be read"),
        (openai.APIError("The server had an error while streaming", _request(), body={"message": "busy"}),
         "stream error: busy"),
        (RuntimeError("surprise"), "model call failed: RuntimeError"),
    ],
)  # fmt: skip
def test_transport_and_unreadable_failures_are_retryable(err, says):
    classified = classify(err)
    assert classified.type == MODEL_RETRYABLE and not classified.non_retryable
    assert says in classified.message


def test_a_context_length_error_inside_a_stream_is_prompt_too_long():
    body = {"message": "maximum context length exceeded", "code": "context_length_exceeded"}
    classified = classify(openai.APIError("error", _request(), body=body))
    assert classified.type == PROMPT_TOO_LONG and classified.non_retryable


def test_an_error_already_decided_is_kept():
    decided = terminal("OPENAI_API_KEY is not set")
    assert classify(decided) is decided
