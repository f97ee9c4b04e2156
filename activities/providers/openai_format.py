"""The Chat Completions wire format, converted to and from the project's neutral form.

Out: the transcript's content blocks (spelled as Anthropic's Messages API spells them)
become chat messages: the system prompt a system message, user text a user message,
an assistant's text and tool_use blocks one assistant message with `tool_calls`, each
tool_result a `role: "tool"` message. Back: a reply (assembled from a stream or read
whole) becomes neutral blocks, a normalised stop reason and usage.

A user message with images (attachments) becomes content parts: its text and each image
as an `image_url` data URL (`data:image/png;base64,...`). A PDF has no Chat Completions
spelling: it is refused, as the start input's resolution refuses it before a session
starts. Other blocks with no Chat Completions spelling (thinking, server tools) are left
out, so a transcript written through another provider can still be sent here.

Model settings: `temperature`, `top_p`, `stop`; `tool_choice` auto, any, none and a tool
name as "auto", "required", "none" and `{"type": "function", "function": {"name": ...}}`
(sent only with tools); `thinking_budget` as `reasoning_effort` (`REASONING_EFFORT`).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, cast

from activities.model_errors import terminal
from activities.providers.base import ModelTurn, ProviderCall
from activities.wire import Message, ModelSettings, StopReason, TextBlock, ToolUseBlock, Usage

ERROR_PREFIX = "Error: "
RAW_ARGUMENTS = "_raw_arguments"
STOP_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}

Chat = dict[str, Any]
# thinking_budget as reasoning_effort: budgets below each bound, and "adaptive".
REASONING_EFFORT: tuple[tuple[int, str], ...] = ((4096, "low"), (16384, "medium"))
REASONING_EFFORT_ABOVE = "high"
ADAPTIVE_EFFORT = "medium"
TOOL_CHOICE = {"auto": "auto", "any": "required", "none": "none"}


def build_params(call: ProviderCall) -> Chat:
    """The Chat Completions request for one call (streaming options are the caller's)."""
    messages: list[Chat] = [{"role": "system", "content": call.system}] if call.system else []
    for message in call.messages:
        messages += to_chat(message)
    params: Chat = {"model": call.model, "max_completion_tokens": call.max_tokens, "messages": messages}
    if call.tools:
        params["tools"] = [tool(spec.for_model()) for spec in call.tools]
    if call.settings is not None:
        params |= settings_params(call.settings, bool(call.tools))
    return params


def settings_params(settings: ModelSettings, has_tools: bool) -> Chat:
    params: Chat = {}
    if settings.thinking_budget is not None:
        params["reasoning_effort"] = reasoning_effort(settings.thinking_budget)
    if settings.temperature is not None:
        params["temperature"] = settings.temperature
    if settings.top_p is not None:
        params["top_p"] = settings.top_p
    if settings.stop_sequences:
        params["stop"] = list(settings.stop_sequences)
    choice = settings.tool_choice
    if choice is not None and has_tools:
        params["tool_choice"] = TOOL_CHOICE.get(choice) or {"type": "function", "function": {"name": choice}}
    return params


def reasoning_effort(budget: int | str) -> str:
    """The nearest `reasoning_effort` to a thinking budget."""
    if not isinstance(budget, int):
        return ADAPTIVE_EFFORT
    return next((effort for bound, effort in REASONING_EFFORT if budget < bound), REASONING_EFFORT_ABOVE)


def tool(spec: dict[str, Any]) -> Chat:
    return {
        "type": "function",
        "function": {
            "name": spec["name"],
            "description": spec["description"],
            "parameters": spec["input_schema"],
        },
    }


def to_chat(message: dict[str, Any]) -> list[Chat]:
    """One transcript message as the chat messages that say the same."""
    content = message["content"]
    if isinstance(content, str):
        return [{"role": message["role"], "content": content}]
    if message["role"] == "assistant":
        return [_assistant(content)]
    # Tool results first: they must follow the assistant message that asked for them.
    results = [_tool_result(b) for b in content if b.get("type") == "tool_result"]
    if any(b.get("type") in ("image", "document") for b in content):
        return [*results, {"role": "user", "content": _parts(content)}]
    text = _texts(content)
    return results + ([{"role": "user", "content": text}] if text or not results else [])


def _parts(blocks: list[dict[str, Any]]) -> list[Chat]:
    """A user message's text and images as content parts, in their order."""
    parts: list[Chat] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image":
            source = block["source"]
            url = f"data:{source['media_type']};base64,{source['data']}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif kind == "document":
            title = block.get("title") or "a PDF"
            raise terminal(
                f"the OpenAI-compatible provider cannot send PDF attachments ({title}); "
                "use an Anthropic model for PDFs"
            )
    return parts


def _assistant(blocks: list[dict[str, Any]]) -> Chat:
    calls = [
        {
            "id": b["id"],
            "type": "function",
            "function": {"name": b["name"], "arguments": _arguments(b.get("input") or {})},
        }
        for b in blocks
        if b.get("type") == "tool_use"
    ]
    text = _texts(blocks)
    chat: Chat = {"role": "assistant", "content": text or (None if calls else "")}
    if calls:
        chat["tool_calls"] = calls
    return chat


def _arguments(tool_input: dict[str, Any]) -> str:
    # Arguments that were not JSON go back as the model wrote them, not wrapped.
    if set(tool_input) == {RAW_ARGUMENTS} and isinstance(tool_input[RAW_ARGUMENTS], str):
        return tool_input[RAW_ARGUMENTS]
    return json.dumps(tool_input)


def _tool_result(block: dict[str, Any]) -> Chat:
    content = block.get("content", "")
    text = content if isinstance(content, str) else _texts(content)
    if block.get("is_error"):
        # Chat Completions has no error flag on a tool message: say it in the text.
        text = ERROR_PREFIX + text
    return {"role": "tool", "tool_call_id": block["tool_use_id"], "content": text}


def _texts(blocks: list[dict[str, Any]]) -> str:
    return "\n\n".join(b["text"] for b in blocks if b.get("type") == "text" and b.get("text"))


# ---- the reply ------------------------------------------------------------------------


@dataclass
class Reply:
    """A chat completion's one choice, whether it arrived whole or in chunks."""

    model: str = ""
    text: str = ""
    # By the index the server gave them: [id, name, arguments so far].
    tool_calls: dict[int, list[str]] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Any = None


def to_turn(reply: Reply) -> ModelTurn:
    """The reply as the project's normalised turn."""
    content: list[Any] = [TextBlock(text=reply.text)] if reply.text else []
    for index in sorted(reply.tool_calls):
        call_id, name, arguments = reply.tool_calls[index]
        content.append(ToolUseBlock(id=call_id or _new_id(), name=name, input=tool_input(arguments)))
    return ModelTurn(
        message=Message(role="assistant", content=content),
        stop_reason=stop_reason(reply.finish_reason, bool(reply.tool_calls)),
        usage=usage(reply.usage),
        model=reply.model,
    )


def tool_input(arguments: str) -> dict[str, Any]:
    """The parsed arguments; anything but a JSON object is kept for the tool to reject."""
    if not arguments.strip():
        return {}
    try:
        parsed = json.loads(arguments)
    except ValueError:
        parsed = None
    # The tool's schema validation turns this into an is_error result the model can fix.
    return cast("dict[str, Any]", parsed) if isinstance(parsed, dict) else {RAW_ARGUMENTS: arguments}


def stop_reason(finish_reason: str | None, has_tool_calls: bool = False) -> StopReason:
    if finish_reason == "stop" and has_tool_calls:
        # Some compatible servers say "stop" with tool calls; the calls must still run.
        return "tool_use"
    return STOP_REASONS.get(finish_reason or "", "other")


def usage(value: Any) -> Usage:
    """Chat usage in the neutral fields: cached prompt tokens counted once, as cache reads."""
    if value is None:
        return Usage()
    prompt = value.prompt_tokens or 0
    details = getattr(value, "prompt_tokens_details", None)
    cached = min(getattr(details, "cached_tokens", None) or 0, prompt)
    return Usage(
        input_tokens=prompt - cached,
        output_tokens=value.completion_tokens or 0,
        cache_read_input_tokens=cached,
    )


def _new_id() -> str:
    # A server that sends no id: the loop keys tool calls by id, so make one.
    return f"call_{uuid.uuid4().hex[:24]}"
