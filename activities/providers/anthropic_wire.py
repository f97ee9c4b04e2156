"""The Messages API request and answer as plain JSON, through the `anthropic` client's own
connection (its key, base URL, headers, timeouts and errors).

The SDK's `messages.create` and `messages.stream` copy the whole request (the transcript)
while preparing it, and build a pydantic model of every streamed event and a snapshot of
the message after each one: with the model answering at once, about a fifth of a worker's
busy time (bench/analysis.md). The request here is encoded once, as it is, and the
answer's server-sent events (read with the SDK's own decoder) are folded into the
message's JSON as the SDK's stream helper folds them: text, thinking and signatures
appended in place, a tool's input parsed from its JSON when its block ends, usage and stop
reason from `message_delta`. Blocks come back exactly as the API sent them (a thinking
block's signature included), without their null fields.
"""

from __future__ import annotations

import json
from typing import Any, cast

import anthropic
import httpx2 as httpx
from anthropic import AsyncStream
from anthropic.lib._tracing import messages_create_request_attributes  # pyright: ignore[reportPrivateUsage]

from activities.model_errors import IncompleteResponse
from activities.providers.base import OnText

PATH = "/v1/messages"
# Usage fields a `message_delta` carries as running totals; a missing one keeps its value.
RUNNING_USAGE = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "server_tool_use")


def encode(params: dict[str, Any]) -> bytes:
    """The request body: the parameters, with `extra_body` merged in, as JSON."""
    extra: dict[str, Any] = params.get("extra_body") or {}
    body: dict[str, Any] = {k: v for k, v in params.items() if k != "extra_body"} | extra
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


async def create(
    client: anthropic.AsyncAnthropic, params: dict[str, Any], headers: dict[str, str]
) -> dict[str, Any]:
    """One unstreamed call: the message, as JSON."""
    response = await client.post(
        PATH, cast_to=httpx.Response, content=encode(params), options=_options(params, headers)
    )
    return _without_nulls(cast("dict[str, Any]", response.json()))


async def stream(
    client: anthropic.AsyncAnthropic,
    params: dict[str, Any],
    headers: dict[str, str],
    on_text: OnText | None = None,
    on_thinking: OnText | None = None,
) -> dict[str, Any]:
    """One streamed call: each chunk of text and thinking as it arrives, then the message."""
    body = encode({**params, "stream": True})
    # Asked for as an `httpx.Response`, the SDK hands it over unread, its status checked.
    response = await client.post(
        PATH, cast_to=httpx.Response, content=body, options=_options(params, headers), stream=True
    )
    try:
        message = await _fold(response, on_text, on_thinking)
    finally:
        await response.aclose()
    if message.get("stop_reason") is None:
        # What arrived, without message_stop's message_delta: the answer is partial.
        raise IncompleteResponse("the stream ended before message_stop")
    return _without_nulls(message)


async def _fold(
    response: httpx.Response, on_text: OnText | None, on_thinking: OnText | None
) -> dict[str, Any]:
    message: dict[str, Any] | None = None
    blocks: list[dict[str, Any]] = []
    inputs: dict[int, list[str]] = {}  # a tool block's input JSON so far, by index
    async for event in AsyncStream.raw_events(response):
        if event.event in (None, "ping"):
            continue
        if event.event == "error":
            raise _error_event(event.data, response)
        if not event.data:
            continue
        data: dict[str, Any] = event.json()
        kind = data["type"]
        if kind == "message_start":
            message = cast("dict[str, Any]", data["message"])
            blocks = []
            message["content"] = blocks
        elif message is None:
            raise ValueError(f'unexpected event order: {kind} before "message_start"')
        elif kind == "content_block_start":
            block: dict[str, Any] = data["content_block"]
            if "input" in block:
                inputs[data["index"]] = []
            blocks.append(block)
        elif kind == "content_block_delta":
            index: int = data["index"]
            await _delta(blocks[index], data["delta"], inputs.get(index), on_text, on_thinking)
        elif kind == "content_block_stop" and (parts := inputs.pop(data["index"], None)):
            blocks[data["index"]]["input"] = _tool_input("".join(parts))
        elif kind == "message_delta":
            _message_delta(message, data)
    return message or {}


async def _delta(
    block: dict[str, Any],
    delta: dict[str, Any],
    input_parts: list[str] | None,
    on_text: OnText | None,
    on_thinking: OnText | None,
) -> None:
    kind = delta["type"]
    if kind == "text_delta" and block.get("type") == "text":
        block["text"] += delta["text"]
        if on_text is not None:
            await on_text(delta["text"])
    elif kind == "thinking_delta" and block.get("type") == "thinking":
        block["thinking"] += delta["thinking"]
        if on_thinking is not None:
            await on_thinking(delta["thinking"])
    elif kind == "signature_delta" and block.get("type") == "thinking":
        block["signature"] = delta["signature"]
    elif kind == "input_json_delta" and input_parts is not None:
        input_parts.append(delta["partial_json"])
    elif kind == "citations_delta" and block.get("type") == "text":
        block["citations"] = [*(block.get("citations") or []), delta["citation"]]


def _tool_input(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as err:
        raise ValueError(f"Unable to parse tool parameter JSON from model: {err}. JSON: {text}") from err


def _message_delta(message: dict[str, Any], data: dict[str, Any]) -> None:
    delta: dict[str, Any] = data.get("delta") or {}
    usage: dict[str, Any] = data.get("usage") or {}
    for key in ("stop_reason", "stop_sequence", "stop_details"):
        message[key] = delta.get(key)
    if delta.get("container") is not None:
        message["container"] = delta["container"]
    totals: dict[str, Any] = message.setdefault("usage", {})
    totals["output_tokens"] = usage.get("output_tokens")
    for key in RUNNING_USAGE:
        if usage.get(key) is not None:
            totals[key] = usage[key]


def _error_event(data: str, response: httpx.Response) -> anthropic.APIStatusError:
    """An `error` event in the stream (an overloaded model, say), raised as the SDK raises it."""
    try:
        body: Any = json.loads(data)
        message = f"{body}"
    except ValueError:
        body, message = data, data or f"Error code: {response.status_code}"
    return anthropic.APIStatusError(message, response=response, body=body)


def _options(params: dict[str, Any], headers: dict[str, str]) -> Any:
    """The request's options: its headers, and the span the client traces its call under
    (named and described as the SDK's `messages.create` names and describes it; metadata only)."""
    return {
        "headers": {"content-type": "application/json", **headers},
        "span_name": "anthropic.messages.create",
        "span_route": PATH,
        "span_attributes": messages_create_request_attributes(params),
    }


def _without_nulls(message: dict[str, Any]) -> dict[str, Any]:
    """The message with its blocks' null fields left out, as the SDK's `exclude_none` dump left
    them (a tool's input is kept as it is: a null there is the model's)."""
    content: list[dict[str, Any]] = message.get("content") or []
    blocks = [_fields(b) for b in content]
    for block in blocks:
        citations: Any = block.get("citations")
        if isinstance(citations, list):
            block["citations"] = [
                _fields(cast("dict[str, Any]", c)) if isinstance(c, dict) else c
                for c in cast("list[Any]", citations)
            ]
    return {**message, "content": blocks}


def _fields(value: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if v is not None}
