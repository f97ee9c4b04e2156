"""OpenAI's Chat Completions API as a provider, and every server that speaks it.

`openai:gpt-4.1-mini` is OpenAI's model; with `OPENAI_BASE_URL` set the same provider
talks to vLLM, Ollama, LiteLLM or any other server with that API. `AsyncOpenAI(
max_retries=0)`: Temporal owns retries, and the shared `classify` decides which failures
it retries (`ERRORS` describes this SDK's failures to it). `OPENAI_API_KEY` and
`OPENAI_BASE_URL` are read here, in the worker process; they never enter a workflow
input. The transcript stays in the neutral form: `openai_format` converts at this edge,
both ways.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, cast

import httpx2 as httpx
import openai
from temporalio.exceptions import ApplicationError

from activities.model_errors import (
    MODEL_AUTH,
    PROMPT_TOO_LONG,
    IncompleteResponse,
    SdkErrors,
    classify,
    retryable,
    terminal,
)
from activities.providers.base import ModelTurn, OnText, ProviderCall
from activities.providers.openai_format import Reply, build_params, to_turn

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion

TIMEOUT_S = 110.0
CONTEXT_LENGTH_CODE = "context_length_exceeded"
# How OpenAI, vLLM and LiteLLM word it when the prompt does not fit.
CONTEXT_LENGTH_WORDS = ("maximum context length", "context length exceeded", "contextwindowexceeded")


class OpenAIProvider:
    name = "openai"

    def __init__(self, client: openai.AsyncOpenAI | None = None):
        self._client = client

    def client(self) -> openai.AsyncOpenAI:
        """The client, built on first use from the worker's environment."""
        if self._client is None:
            if not os.environ.get("OPENAI_API_KEY"):
                # No retry can fix this: fail the session with what to do.
                raise terminal(
                    "OPENAI_API_KEY is not set in the worker's environment; set it (any value for a local "
                    "server that takes none) and restart the worker",
                    MODEL_AUTH,
                )
            self._client = openai.AsyncOpenAI(
                base_url=os.environ.get("OPENAI_BASE_URL") or None, max_retries=0, timeout=TIMEOUT_S
            )
        return self._client

    async def complete(
        self, call: ProviderCall, on_text: OnText | None = None, on_thinking: OnText | None = None
    ) -> ModelTurn:
        """One Chat Completions call, streamed when the call asks for it."""
        params = build_params(call)
        if call.stream:
            reply = await self._stream(params, call.headers, on_text, on_thinking)
        else:
            # No `stream` in params, so the SDK answers with a ChatCompletion (its overloads
            # cannot tell from a dict of parameters).
            completion = cast(
                "ChatCompletion",
                await self.client().chat.completions.create(**params, extra_headers=call.headers),
            )
            reply = from_completion(completion)
        return to_turn(reply)

    async def _stream(
        self,
        params: dict[str, Any],
        headers: dict[str, str],
        on_text: OnText | None,
        on_thinking: OnText | None,
    ) -> Reply:
        stream = await self.client().chat.completions.create(
            **params, stream=True, stream_options={"include_usage": True}, extra_headers=headers
        )
        reply = Reply()
        async with stream:
            async for chunk in stream:
                text = add_chunk(reply, chunk)
                if text and on_text is not None:
                    await on_text(text)
                thought = reasoning_text(chunk)
                if thought and on_thinking is not None:
                    await on_thinking(thought)
        if reply.finish_reason is None:
            # The SDK ends quietly when the connection closes; without a finish the answer is partial.
            raise IncompleteResponse("the stream ended before a finish_reason")
        return reply

    async def count_tokens(self, call: ProviderCall) -> int | None:
        """None: Chat Completions has no counting endpoint, so the estimate stands."""
        return None

    def classify(self, err: BaseException) -> ApplicationError:
        """Turn a failure of a Chat Completions call into the error Temporal should see."""
        return classify(err, ERRORS)


def add_chunk(reply: Reply, chunk: Any) -> str:
    """Fold one streamed chunk into the reply; the new text, for the session's stream."""
    reply.model = chunk.model or reply.model
    if chunk.usage is not None:  # the last chunk, with no choices, when usage is asked for
        reply.usage = chunk.usage
    if not chunk.choices:
        return ""
    choice = chunk.choices[0]
    text = choice.delta.content or ""
    reply.text += text
    for position, delta in enumerate(choice.delta.tool_calls or []):
        # Arguments arrive in pieces under the call's index (some servers send no index).
        index = delta.index if delta.index is not None else position
        call = reply.tool_calls.setdefault(index, ["", "", ""])
        function = delta.function
        call[0] = delta.id or call[0]
        call[1] = (function.name if function else None) or call[1]
        call[2] += (function.arguments if function else None) or ""
    reply.finish_reason = choice.finish_reason or reply.finish_reason
    return text


def reasoning_text(chunk: Any) -> str:
    """The reasoning some compatible servers stream (`reasoning_content`, `reasoning`):
    shown to followers as thinking, never kept (it carries no signature to send back)."""
    if not chunk.choices:
        return ""
    delta = chunk.choices[0].delta
    value = getattr(delta, "reasoning_content", None) or getattr(delta, "reasoning", None)
    return value if isinstance(value, str) else ""


def from_completion(completion: Any) -> Reply:
    """A whole (non-streamed) completion as the reply a stream would have built."""
    reply = Reply(model=completion.model or "", usage=completion.usage)
    if not completion.choices:
        raise IncompleteResponse("the completion has no choices")
    choice = completion.choices[0]
    reply.text = choice.message.content or choice.message.refusal or ""
    for index, call in enumerate(choice.message.tool_calls or []):
        function = getattr(call, "function", None)
        if function is not None:
            reply.tool_calls[index] = [call.id or "", function.name or "", function.arguments or ""]
    reply.finish_reason = choice.finish_reason
    return reply


def provider_message(err: openai.APIError) -> str:
    """The message of the error body (the SDK keeps `{"error": {...}}`'s inside)."""
    body = err.body
    if isinstance(body, dict):
        fields = cast("dict[str, Any]", body)
        if fields.get("message"):
            return str(fields["message"])
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    response = getattr(err, "response", None)
    return err.message or (response.reason_phrase if response is not None else "")


def too_long(err: openai.APIError, message: str) -> bool:
    """Whether the server says the prompt does not fit its context window."""
    return err.code == CONTEXT_LENGTH_CODE or any(words in message.lower() for words in CONTEXT_LENGTH_WORDS)


def read_error(err: openai.APIStatusError) -> tuple[str, bool]:
    """The error answer's message, and whether it says the prompt does not fit."""
    message = provider_message(err)
    return message, too_long(err, message)


def stream_error(err: BaseException) -> ApplicationError | None:
    """An error event inside a 200 stream: no status to go by."""
    if not isinstance(err, openai.APIError):
        return None
    message = provider_message(err)
    if too_long(err, message):
        return terminal(f"model: {message}", PROMPT_TOO_LONG)
    return retryable(f"model stream error: {message}")


ERRORS = SdkErrors(
    status=openai.APIStatusError,
    timeout=(openai.APITimeoutError, httpx.TimeoutException),
    transport=httpx.TransportError,
    connection=openai.APIConnectionError,
    unreadable=openai.APIResponseValidationError,
    read=read_error,
    own=stream_error,
)
