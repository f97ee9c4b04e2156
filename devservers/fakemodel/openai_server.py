"""A local stand-in for OpenAI's Chat Completions API, beside the Messages API fake.

It speaks the real HTTP API (`POST /v1/chat/completions`, JSON or server-sent events
`data: {...}` ending with `data: [DONE]` when `"stream": true`), so the real `openai`
client runs against it through `OPENAI_BASE_URL` (`<url>/v1`). It shares the Messages
API fake's script store, faults, request log and control endpoints (see
`devservers.fakemodel.server`); only the wire format differs. A scripted turn reads the same:

    {"text": "...", "tool_calls": [{"name": "get_time", "input": {}, "id": "call_1"}],
     "finish_reason": "stop", "usage": {"prompt_tokens": 10, "completion_tokens": 5,
     "prompt_tokens_details": {"cached_tokens": 4}}, "delay": 0.5, "chunk_delay": 0.1}

with `usage` and `finish_reason` in this API's own spelling, `"reasoning": "..."` streamed
first as `reasoning_content` deltas (as vLLM and DeepSeek stream their reasoning), and `"arguments": "..."` on
a tool call to send those argument characters as they are (malformed JSON included).
Faults are the same (`status` with `headers`, `code` and `message`; `drop`, `drop_mid`,
`stall`, `cut_stream` (the stream ends before its finish_reason and `[DONE]`),
`malformed`, `raw`, `prompt_limit`); an error body is `{"error": {"message", "type",
"param", "code"}}`, and `prompt_limit` answers with code `context_length_exceeded`.

Settings are checked as the API checks them (a 400 before any turn is used):
`reasoning_effort` (minimal, low, medium, high), `temperature` (0 to 2), `top_p` (0 to 1),
`stop` (at most 4 strings), `tool_choice` ("auto", "none", "required", or a function the
request has; only with tools).

Usage emulates automatic prefix caching: the longest prefix of a session's request
(tools, then each message) that was sent before counts as `cached_tokens`.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from typing import Any

from devservers.fakemodel.blocks import check_chat, compact
from devservers.fakemodel.server import (
    FakeModelHTTPServer,
    FakeModelServer,
    Handler,
    Script,
    _chunks,
    demo_turn,
)

COMPLETIONS = "/v1/chat/completions"


class ChatScript(Script):
    def too_long(self, limit: int) -> dict[str, Any]:
        return {
            "status": 400,
            "code": "context_length_exceeded",
            "message": f"This model's maximum context length is {limit} characters; your messages are longer.",
        }

    def demo(self, body: dict[str, Any]) -> dict[str, Any]:
        return demo_turn(as_messages_body(body))


def as_messages_body(body: dict[str, Any]) -> dict[str, Any]:
    """A chat request in the Messages API's shape, for the demo planner to read."""
    tools = [{"name": t["function"]["name"]} for t in body.get("tools", [])]
    messages: list[dict[str, Any]] = []
    for message in body.get("messages", []):
        role = message["role"]
        if role == "tool":
            text = message.get("content") or ""
            result = {"type": "tool_result", "tool_use_id": message["tool_call_id"], "content": text}
            messages.append({"role": "user", "content": [{**result, "is_error": text.startswith("Error: ")}]})
        elif role in ("user", "assistant"):
            blocks = [{"type": "text", "text": message["content"]}] if message.get("content") else []
            for call in message.get("tool_calls") or []:
                blocks.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"]})
            messages.append({"role": role, "content": blocks})
    return {"tools": tools, "messages": messages}


class PrefixCache:
    """Automatic prompt caching: what a session sent before, as a prefix, is cached."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: dict[str, set[str]] = {}

    def usage(self, session: str, body: dict[str, Any]) -> dict[str, Any]:
        parts = [json.dumps(body.get("tools", []), sort_keys=True)]
        parts += [json.dumps(m, sort_keys=True) for m in compact(body.get("messages", []))]
        digest = hashlib.sha256()
        tokens = cached = 0
        keys = []
        with self.lock:
            seen = self.seen.setdefault(session, set())
            for text in parts:
                digest.update(text.encode())
                tokens += max(1, len(text) // 4)
                keys.append(digest.hexdigest())
                if keys[-1] in seen:
                    cached = tokens
            seen.update(keys)
        return {"prompt_tokens": tokens, "prompt_tokens_details": {"cached_tokens": cached}}


def build_completion(turn: dict[str, Any], body: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
    """The chat completion a scripted turn stands for."""
    calls = [
        {
            "id": call.get("id") or f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {
                "name": call["name"],
                "arguments": call.get("arguments", json.dumps(call.get("input", {}))),
            },
        }
        for call in turn.get("tool_calls", [])
    ]
    message: dict[str, Any] = {"role": "assistant", "content": turn.get("text") or None}
    if calls:
        message["tool_calls"] = calls
    completion_tokens = max(1, len(json.dumps(message)) // 4)
    usage = {**usage, "completion_tokens": completion_tokens, **turn.get("usage", {})}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    return {
        "id": f"chatcmpl-fake{uuid.uuid4().hex[:16]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "fake-model"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": turn.get("finish_reason") or ("tool_calls" if calls else "stop"),
            }
        ],
        "usage": usage,
    }


REASONING_EFFORTS = ("minimal", "low", "medium", "high")


def chat_refusal(body: dict[str, Any]) -> str | None:
    """Why Chat Completions would refuse this request's settings, if it would."""
    effort = body.get("reasoning_effort")
    if effort is not None and effort not in REASONING_EFFORTS:
        return f"Invalid value for 'reasoning_effort': {effort!r}. Supported values are: {', '.join(REASONING_EFFORTS)}."
    temperature, top_p = body.get("temperature"), body.get("top_p")
    if temperature is not None and not 0 <= temperature <= 2:
        return f"Invalid 'temperature': {temperature}. Expected a value between 0 and 2."
    if top_p is not None and not 0 <= top_p <= 1:
        return f"Invalid 'top_p': {top_p}. Expected a value between 0 and 1."
    stop = body.get("stop")
    if isinstance(stop, list) and len(stop) > 4:
        return "Invalid 'stop': array too long. Expected an array with maximum length 4."
    choice = body.get("tool_choice")
    if choice is None:
        return None
    names = [t["function"]["name"] for t in body.get("tools") or []]
    if not names:
        return "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified."
    if isinstance(choice, str):
        return (
            None
            if choice in ("auto", "none", "required")
            else f"Invalid value for 'tool_choice': {choice!r}."
        )
    name = (choice.get("function") or {}).get("name")
    if choice.get("type") != "function" or name not in names:
        return f"Invalid 'tool_choice': no function named {name!r} in 'tools'."
    return None


class ChatHandler(Handler):
    server: FakeChatHTTPServer  # pyright: ignore[reportIncompatibleVariableOverride]: only that server runs it

    def _refusal(self, body: dict[str, Any]) -> str | None:
        return chat_refusal(body)

    def _api(self, path: str) -> None:
        if path == COMPLETIONS:
            self._scripted_call()
        else:
            self._body()  # read it, or the next request on this connection starts inside it
            self._json(404, {"error": {"message": f"no route {path}", "type": "invalid_request_error"}})

    def _error_body(self, turn: dict[str, Any]) -> dict[str, Any]:
        status = int(turn["status"])
        kind = "server_error" if status >= 500 else "invalid_request_error"
        message = turn.get("message") or f"fake model: {kind}"
        return {"error": {"message": message, "type": kind, "param": None, "code": turn.get("code")}}

    def check_request(self, body: dict[str, Any]) -> tuple[int, str] | None:
        return check_chat(body)

    def _summary_request_text(self, body: dict[str, Any]) -> str:
        return next(m["content"] for m in body["messages"] if m["role"] == "user")

    def _reply(self, session: str, turn: dict[str, Any], body: dict[str, Any]) -> None:
        completion = build_completion(turn, body, self.server.cache.usage(session, body))
        if body.get("stream"):
            self._stream_chunks(
                completion, turn, bool((body.get("stream_options") or {}).get("include_usage"))
            )
            return
        data = json.dumps(completion).encode()
        if turn.get("malformed"):
            data = data[:-20]
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        if turn.get("stall"):
            self.wfile.flush()
            time.sleep(float(turn["stall"]))
        if turn.get("drop_mid"):
            self.wfile.write(data[: len(data) // 2])
            self._reset_connection()
            return
        self.wfile.write(data)

    def _stream_chunks(self, completion: dict[str, Any], turn: dict[str, Any], include_usage: bool) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        [choice] = completion["choices"]
        message = choice["message"]
        self._chunk(completion, {"role": "assistant", "content": ""})
        if turn.get("stall"):
            time.sleep(float(turn["stall"]))
        if turn.get("malformed"):
            self.wfile.write(b'data: {"id": "chatcmpl-x", "choices": [\n\n')
            self.wfile.flush()
            return
        for piece in _chunks(turn["reasoning"]) if turn.get("reasoning") else []:
            self._chunk(completion, {"reasoning_content": piece})  # as vLLM and DeepSeek stream it
        for piece in _chunks(message["content"] or "") if message["content"] else []:
            self._chunk(completion, {"content": piece})
            if turn.get("chunk_delay"):
                time.sleep(float(turn["chunk_delay"]))
        if turn.get("drop_mid"):
            self._reset_connection()
            return
        for index, call in enumerate(message.get("tool_calls", [])):
            # As the API does: the id and name first, then the arguments in pieces.
            head = {**call, "function": {"name": call["function"]["name"], "arguments": ""}}
            self._chunk(completion, {"tool_calls": [{"index": index, **head}]})
            for piece in _chunks(call["function"]["arguments"], size=8):
                self._chunk(completion, {"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        if turn.get("cut_stream"):
            self.wfile.flush()
            return
        self._chunk(completion, {}, finish_reason=choice["finish_reason"])
        if include_usage:
            self._data({**_chunk_base(completion), "choices": [], "usage": completion["usage"]})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _chunk(
        self, completion: dict[str, Any], delta: dict[str, Any], finish_reason: str | None = None
    ) -> None:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        self._data({**_chunk_base(completion), "choices": [choice], "usage": None})

    def _data(self, payload: dict[str, Any]) -> None:
        self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
        self.wfile.flush()


def _chunk_base(completion: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": completion["id"],
        "object": "chat.completion.chunk",
        "created": completion["created"],
        "model": completion["model"],
    }


class FakeChatHTTPServer(FakeModelHTTPServer):
    handler = ChatHandler

    def __init__(self, address: tuple[str, int], api_key: str | None = None):
        super().__init__(address, api_key=api_key)
        self.script = ChatScript()
        self.cache = PrefixCache()  # type: ignore[assignment]  # same usage() call


class FakeChatServer(FakeModelServer):
    """The Chat Completions fake in a background thread of this process, on 127.0.0.1."""

    http_server = FakeChatHTTPServer

    @property
    def base_url(self) -> str:
        """What `OPENAI_BASE_URL` is set to for this server."""
        return f"{self.url}/v1"
