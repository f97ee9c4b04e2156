"""Anthropic's Messages API as a provider.

`AsyncAnthropic(max_retries=0)`: Temporal owns retries, and the shared `classify`
decides which failures it retries (`ERRORS` describes this SDK's failures to it). The
API key is read here, in the worker process, from the environment (`ANTHROPIC_API_KEY`
or `ANTHROPIC_AUTH_TOKEN`, and `ANTHROPIC_BASE_URL`); it never enters a workflow input.
The transcript store already holds Anthropic's content blocks, so messages go out as
they are, with prompt-cache breakpoints added: thinking blocks (and their signatures)
go back exactly as they came, in place.

Model settings: `thinking_budget` N is `{"type": "enabled", "budget_tokens": N}`, or
`{"type": "adaptive"}` on models that take only adaptive thinking (Claude 4.7 and later);
`temperature` and `top_p` go in the body (this SDK has no keyword for them);
"adaptive" is `{"type": "adaptive"}` on models that take it (Claude 4.6 and later), and on
older ones a budget of half of `max_tokens` (at least 1024). `tool_choice` is sent only
with tools (the API refuses it without).
"""

from __future__ import annotations

import os
from typing import Any, cast

import anthropic
import httpx2 as httpx
from temporalio.exceptions import ApplicationError

from activities.model_errors import MODEL_AUTH, SdkErrors, classify, terminal
from activities.providers import anthropic_wire
from activities.providers.base import ModelTurn, OnText, ProviderCall
from activities.wire import MIN_THINKING_BUDGET, TOOL_CHOICE_WORDS, Message, ModelSettings, StopReason, Usage
from infra.model_names import takes_adaptive_thinking, takes_only_adaptive_thinking

TIMEOUT_S = 110.0
CACHE = {"type": "ephemeral"}
STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "refusal": "refusal",
    "pause_turn": "pause_turn",
}


class AnthropicProvider:
    name = "anthropic"

    def __init__(self, client: anthropic.AsyncAnthropic | None = None):
        self._client = client

    def client(self) -> anthropic.AsyncAnthropic:
        """The client, built on first use from the worker's environment."""
        if self._client is None:
            if not (os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")):
                # No retry can fix this: fail the session with what to do.
                raise terminal(
                    "ANTHROPIC_API_KEY is not set in the worker's environment; set it and restart the worker",
                    MODEL_AUTH,
                )
            self._client = anthropic.AsyncAnthropic(max_retries=0, timeout=TIMEOUT_S)
        return self._client

    async def complete(
        self, call: ProviderCall, on_text: OnText | None = None, on_thinking: OnText | None = None
    ) -> ModelTurn:
        """One Messages API call, streamed when the call asks for it."""
        params = build_params(call)
        if call.stream:
            final = await anthropic_wire.stream(self.client(), params, call.headers, on_text, on_thinking)
        else:
            final = await anthropic_wire.create(self.client(), params, call.headers)
        return to_turn(final)

    async def count_tokens(self, call: ProviderCall) -> int | None:
        """The prompt's size as the API counts it, or None if it cannot say."""
        try:
            params = build_params(call)
            for unknown in ("max_tokens", "stop_sequences", "extra_body"):  # not the counting endpoint's
                params.pop(unknown, None)
            counted = await self.client().messages.count_tokens(**params, extra_headers=call.headers)
            return counted.input_tokens
        except Exception:  # counting is an optimisation; the estimate stands
            return None

    def classify(self, err: BaseException) -> ApplicationError:
        """Turn a failure of a Messages API call into the error Temporal should see."""
        return classify(err, ERRORS)


def build_params(call: ProviderCall) -> dict[str, Any]:
    """The Messages API request, with cache breakpoints on tools, system and history."""
    tools = [spec.for_model() for spec in call.tools]
    if tools and call.cache:
        tools[-1] = {**tools[-1], "cache_control": CACHE}
    params: dict[str, Any] = {
        "model": call.model,
        "max_tokens": call.max_tokens,
        "messages": _with_history_breakpoint(call.messages) if call.cache else call.messages,
    }
    if call.system:
        system: dict[str, Any] = {"type": "text", "text": call.system}
        params["system"] = [{**system, "cache_control": CACHE} if call.cache else system]
    if tools:
        params["tools"] = tools
    if call.settings is not None:
        params |= settings_params(call.settings, call.model, call.max_tokens, bool(tools))
    return params


def settings_params(settings: ModelSettings, model: str, max_tokens: int, has_tools: bool) -> dict[str, Any]:
    """The Messages API's parameters for the session's model settings."""
    params: dict[str, Any] = {}
    if settings.thinking_budget is not None:
        params["thinking"] = thinking(settings.thinking_budget, model, max_tokens)
    # The SDK (1.0 on) has no keyword for them; the API takes them in the body.
    sampling = {"temperature": settings.temperature, "top_p": settings.top_p}
    if sampling := {k: v for k, v in sampling.items() if v is not None}:
        params["extra_body"] = sampling
    if settings.stop_sequences:
        params["stop_sequences"] = list(settings.stop_sequences)
    choice = settings.tool_choice
    if choice is not None and has_tools:
        params["tool_choice"] = (
            {"type": choice} if choice in TOOL_CHOICE_WORDS else {"type": "tool", "name": choice}
        )
    return params


def thinking(budget: int | str, model: str, max_tokens: int) -> dict[str, Any]:
    """The `thinking` parameter for a budget of tokens or "adaptive"."""
    if takes_only_adaptive_thinking(model) or (budget == "adaptive" and takes_adaptive_thinking(model)):
        return {"type": "adaptive"}
    if not isinstance(budget, int):
        budget = adaptive_budget(max_tokens)
    return {"type": "enabled", "budget_tokens": budget}


def adaptive_budget(max_tokens: int) -> int:
    """ "adaptive" on a model that takes only a budget: half of max_tokens, at least 1024."""
    return max(MIN_THINKING_BUDGET, max_tokens // 2)


def _with_history_breakpoint(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not messages or not messages[-1]["content"]:
        return messages
    last = messages[-1]
    blocks = list(last["content"])
    blocks[-1] = {**blocks[-1], "cache_control": CACHE}
    return [*messages[:-1], {**last, "content": blocks}]


def to_turn(final: dict[str, Any]) -> ModelTurn:
    """The Messages API's answer (as JSON) as the project's normalised turn."""
    return ModelTurn(
        message=Message.model_validate({"role": "assistant", "content": final.get("content") or []}),
        stop_reason=stop_reason(final.get("stop_reason")),
        usage=usage(final.get("usage") or {}),
        model=str(final.get("model") or ""),
    )


def stop_reason(value: str | None) -> StopReason:
    return STOP_REASONS.get(value or "", "other")


def usage(value: dict[str, Any]) -> Usage:
    return Usage(
        input_tokens=value.get("input_tokens") or 0,
        output_tokens=value.get("output_tokens") or 0,
        cache_creation_input_tokens=value.get("cache_creation_input_tokens") or 0,
        cache_read_input_tokens=value.get("cache_read_input_tokens") or 0,
    )


def provider_message(err: anthropic.APIStatusError) -> str:
    """The message of Anthropic's error body (`{"error": {"message": ...}}`)."""
    body = err.body
    if isinstance(body, dict):
        fields = cast("dict[str, Any]", body)
        inner = fields.get("error")
        if isinstance(inner, dict):
            error = cast("dict[str, Any]", inner)
            if error.get("message"):
                return str(error["message"])
        if fields.get("message"):
            return str(fields["message"])
    return err.message or err.response.reason_phrase


def read_error(err: anthropic.APIStatusError) -> tuple[str, bool]:
    """The error answer's message, and whether it says the prompt is too long."""
    message = provider_message(err)
    return message, "prompt is too long" in message.lower()


ERRORS = SdkErrors(
    status=anthropic.APIStatusError,
    timeout=(anthropic.APITimeoutError, httpx.TimeoutException),
    transport=httpx.TransportError,
    connection=anthropic.APIConnectionError,
    unreadable=anthropic.APIResponseValidationError,
    read=read_error,
)
