"""A local stand-in for Anthropic's Messages API, for tests, benchmarks and the keyless demo.

It speaks the real HTTP API (`POST /v1/messages`, JSON or server-sent events when
`"stream": true`), so the real `anthropic` client runs against it through
`ANTHROPIC_BASE_URL`. Every text it writes on its own starts with "[fake model]".

Turns are scripted per session (the model activity sends `x-agent-session`), or for
every session with the session "*". A turn is a JSON object:

    {"text": "...", "tool_calls": [{"name": "get_time", "input": {}}], "stop_reason": "...",
     "usage": {"input_tokens": 10, "output_tokens": 5}, "delay": 0.5, "chunk_delay": 0.1}

or a fault:

- `{"status": 429, "headers": {"retry-after": "2"}, "message": "..."}`: an error status with
  the provider's error body (`{"type": "error", "error": {"type": ..., "message": ...}}`);
- `{"drop": true}`: close the connection without an answer;
- `{"drop_mid": true}`: start the answer, then reset the connection in the middle of it;
- `{"stall": 30}`: send the response headers (and, streaming, `message_start`), then
  nothing for that many seconds, then the rest;
- `{"cut_stream": true}`: end a stream cleanly before `message_stop`;
- `{"malformed": true}`: a body (or, streaming, an event) that is not valid JSON;
- `{"raw": "not json"}`: this exact body with status 200;
- `{"content": [...raw blocks...]}`: these content blocks, unknown types included;

A request whose image or document blocks the real API would refuse (a wrong media
type, bytes of another type, invalid base64, an image over 5 MB as base64, a block in an
assistant message; `blocks.py`) gets the API's 400 without using a turn.
- `"prompt_limit": N` on any turn: 400 "prompt is too long" while the request's messages
  are longer than N characters of JSON; the turn waits for a request that fits.

Model settings are checked as the API checks them, and a request it would refuse gets its
400 (no turn is used): `thinking` (`{"type": "enabled", "budget_tokens": N}` with N at
least 1024 and below `max_tokens`, on models before Claude 4.7; `{"type": "adaptive"}` on
Claude 4.6 and later), `temperature` (0 to 1; only 1 with thinking), `top_p` (0 to 1; at
least 0.95 with thinking; not with `temperature` on Claude 4.5 and later), `tool_choice`
(auto, any, none or a tool the request has; only with tools; not any or a tool with
thinking), `stop_sequences`; Claude 4.7 and later take no `temperature` or `top_p`. Thinking blocks in the request must carry the signature this
server gave them (an altered block is refused), and with thinking on, a request that
continues a tool loop must send back the turn's first assistant message starting with its
thinking block. A turn with `"thinking": "..."` (or `"redacted_thinking": true`) answers
with a signed thinking (or redacted thinking) block first when the request has thinking
on, streamed as `thinking_delta` and `signature_delta` events; its tokens count as output.
A turn's text that contains one of the request's `stop_sequences` ends before it, with
`stop_reason` `stop_sequence`.

Usage emulates prompt caching: the longest prefix of a session's request that ended at a
`cache_control` breakpoint before is counted as cache read, the rest up to the last
breakpoint as cache write. `POST /v1/messages/count_tokens` answers an estimate.

`"pace": S` writes the turn's text at a model's pace, S seconds a word: streamed, one
delta a word, S apart; not streamed, the whole answer after S times its words.

`"times": N` plays a turn N times; `"repeat": true` forever. A fault can also be set for
every request of a session, in front of its turns: `POST /_fault {"session", "fault",
"times"}` (times null: until cleared with fault null).
A session whose script has run out gets a 400 error naming the session: a test that
asks for more turns than it scripted fails loudly. With no script at all, a small demo
planner answers (look up the time, save a note, ask to send an email, then answer).

Control endpoints, for tests: `POST /_script {"session", "turns"}`, `POST /_fault`,
`GET /_requests` (each with the time it arrived, `at`, when its answer ended, `done`, and,
if the client closed the connection before the answer's end, when this server saw it,
`closed`), `POST /_reset`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import socket
import struct
import threading
import time
import uuid
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlparse

from devservers.fakemodel.blocks import check_messages, compact
from infra.model_names import (
    refuses_sampling,
    refuses_temperature_with_top_p,
    takes_adaptive_thinking,
    takes_only_adaptive_thinking,
)

PREFIX = "[fake model] "
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    409: "conflict_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "api_error",
    529: "overloaded_error",
}


SIGNING_KEY = b"fake model thinking signatures"
THINKING_TYPES = ("thinking", "redacted_thinking")


def sign(text: str) -> str:
    """The signature of a thinking block's text (the real API's is opaque too)."""
    return base64.b64encode(hmac.new(SIGNING_KEY, text.encode(), hashlib.sha256).digest()).decode()


def redacted_data(text: str) -> str:
    """An opaque redacted-thinking payload that this server can check when it comes back."""
    payload = base64.b64encode(text.encode()).decode()
    return f"{payload}.{sign(payload)}"


def thinking_on(body: dict[str, Any]) -> bool:
    return (body.get("thinking") or {}).get("type") in ("enabled", "adaptive")


def refusal(body: dict[str, Any]) -> str | None:
    """Why the Messages API would refuse this request's settings or thinking blocks, if it would."""
    return settings_refusal(body) or thinking_blocks_refusal(body)


def settings_refusal(body: dict[str, Any]) -> str | None:
    model, max_tokens = str(body.get("model", "")), int(body.get("max_tokens") or 0)
    thinking = body.get("thinking")
    if thinking is not None:
        kind = thinking.get("type")
        if kind == "enabled":
            budget = thinking.get("budget_tokens")
            if takes_only_adaptive_thinking(model):
                return f"thinking.type.enabled is not supported for model {model}; use thinking.type.adaptive"
            if not isinstance(budget, int) or budget < 1024:
                return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
            if budget >= max_tokens:
                return "`max_tokens` must be greater than `thinking.budget_tokens`"
        elif kind == "adaptive":
            if "budget_tokens" in thinking:
                return "thinking.adaptive.budget_tokens: Extra inputs are not permitted"
            if not takes_adaptive_thinking(model):
                return f"thinking.type.adaptive is not supported for model {model}"
        elif kind != "disabled":
            return f"thinking.type: unknown type {kind!r}"
    on = thinking_on(body)
    temperature, top_p = body.get("temperature"), body.get("top_p")
    if (temperature is not None or top_p is not None) and refuses_sampling(model):
        return (
            "`temperature` is deprecated for this model."
            if temperature is not None
            else "`top_p` is deprecated for this model."
        )
    if temperature is not None and not 0 <= temperature <= 1:
        return "temperature: Input should be less than or equal to 1"
    if top_p is not None and not 0 <= top_p <= 1:
        return "top_p: Input should be less than or equal to 1"
    if on and temperature is not None and temperature != 1:
        return "`temperature` may only be set to 1 when thinking is enabled"
    if on and top_p is not None and top_p < 0.95:
        return "`top_p` must be greater than or equal to 0.95 or unset when thinking is enabled"
    if on and "top_k" in body:
        return "`top_k` must be unset when thinking is enabled"
    if temperature is not None and top_p is not None and refuses_temperature_with_top_p(model):
        return "`temperature` and `top_p` cannot both be specified for this model. Please use only one."
    stops = body.get("stop_sequences")
    if stops is not None and (
        not isinstance(stops, list) or not all(isinstance(x, str) and x.strip() for x in stops)
    ):
        return "stop_sequences: each must be a non-empty string"
    return tool_choice_refusal(body, on)


def tool_choice_refusal(body: dict[str, Any], thinking: bool) -> str | None:
    choice = body.get("tool_choice")
    if choice is None:
        return None
    kind = choice.get("type")
    names = [t.get("name") for t in body.get("tools") or []]
    if kind not in ("auto", "any", "none", "tool"):
        return f"tool_choice.type: unknown type {kind!r}"
    if not names:
        return "tool_choice may only be specified while providing tools"
    if kind == "tool" and choice.get("name") not in names:
        return f"tool_choice.name: tool {choice.get('name')!r} is not among the request's tools"
    if thinking and kind in ("any", "tool"):
        return "Thinking may not be enabled when tool_choice forces tool use."
    return None


def thinking_blocks_refusal(body: dict[str, Any]) -> str | None:
    """Altered thinking blocks; a tool loop continued without its turn's thinking."""
    messages = body.get("messages") or []
    for i, message in enumerate(messages):
        content = message.get("content")
        if message.get("role") != "assistant" or not isinstance(content, list):
            continue
        for j, block in enumerate(content):
            if block.get("type") == "thinking" and not hmac.compare_digest(
                str(block.get("signature", "")), sign(str(block.get("thinking", "")))
            ):
                return f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
            if block.get("type") == "redacted_thinking":
                payload, _, signature = str(block.get("data", "")).partition(".")
                if not hmac.compare_digest(signature, sign(payload)):
                    return f"messages.{i}.content.{j}: Invalid `data` in `redacted_thinking` block"
    if not thinking_on(body) or not messages or not _only_tool_results(messages[-1]):
        return None
    # A tool loop goes on: its turn began after the last message of a person.
    start = max(
        (i for i, m in enumerate(messages) if m.get("role") == "user" and not _only_tool_results(m)),
        default=-1,
    )
    first = next((i for i in range(start + 1, len(messages)) if messages[i].get("role") == "assistant"), None)
    if first is None:
        return None
    blocks = messages[first].get("content")
    found = blocks[0].get("type") if isinstance(blocks, list) and blocks else "text"
    if found not in THINKING_TYPES:
        return (
            f"messages.{first}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{found}`. "
            "When `thinking` is enabled, a final `assistant` message must start with a thinking block "
            "(preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include "
            "thinking blocks from previous turns. To avoid this requirement, disable `thinking`."
        )
    return None


def _only_tool_results(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return (
        message.get("role") == "user"
        and isinstance(content, list)
        and bool(content)
        and all(b.get("type") == "tool_result" for b in content)
    )


class Script:
    """Scripted turns per session, and a log of every request received."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.turns: dict[str, deque[dict[str, Any]]] = {}
        self.used: dict[str, int] = {}
        self.faults: dict[str, list[Any]] = {}  # session -> [fault, times left or None]
        self.requests: list[dict[str, Any]] = []
        # session -> step -> the turns for that step's successive requests (the last repeats)
        self.by_step: dict[str, dict[int, deque[dict[str, Any]]]] = {}

    def set(self, session: str, turns: list[dict[str, Any]]) -> None:
        expanded: list[dict[str, Any]] = []
        for turn in turns:
            times = int(turn.get("times", 1))
            expanded += [{k: v for k, v in turn.items() if k != "times"}] * times
        with self.lock:
            self.turns[session] = deque(expanded)
            self.used[session] = 0

    def set_by_step(self, session: str, steps: dict[int, list[dict[str, Any]]]) -> None:
        """Answer each step's requests (by their x-agent-step header) with its own turns, in
        order, the last one again for any further attempt: a retry nobody planned (a worker
        thought dead on a loaded machine) gets its step's answer, not the next step's."""
        with self.lock:
            self.by_step[session] = {step: deque(turns) for step, turns in steps.items()}
            self.used[session] = 0

    def set_fault(self, session: str, fault: dict[str, Any] | None, times: int | None = None) -> None:
        """Answer the session's next `times` requests (None: all) with `fault`; None clears it."""
        with self.lock:
            if fault is None:
                self.faults.pop(session, None)
            else:
                self.faults[session] = [fault, times]

    def next_turn(self, session: str, body: dict[str, Any], step: str | None = None) -> dict[str, Any]:
        with self.lock:
            fault = self.faults.get(session)
            if fault is not None:
                turn, left = fault
                if left is not None:
                    if left <= 1:
                        del self.faults[session]
                    else:
                        fault[1] = left - 1
                return turn
            steps = self.by_step.get(session)
            if steps is not None:
                turns = steps.get(int(step or 0))
                if not turns:
                    return {"status": 400, "message": f"fake model: no turn for step {step} of {session!r}"}
                self.used[session] += 1
                return turns.popleft() if len(turns) > 1 else turns[0]
            key = session if session in self.turns else "*" if "*" in self.turns else None
            if key is None:
                return self.demo(body)
            queue = self.turns[key]
            if not queue:
                return {
                    "status": 400,
                    "message": f"fake model: the script for session {session!r} has no turn left "
                    f"({self.used[key]} used)",
                }
            turn = queue[0]
            limit = turn.get("prompt_limit")
            if limit is not None and len(json.dumps(body.get("messages", []))) > limit:
                # Like the API's context check: the turn stays for a request that fits.
                return self.too_long(limit)
            self.used[key] += 1
            queue.popleft()
            if turn.get("repeat"):
                queue.appendleft(turn)
            return turn

    def too_long(self, limit: int) -> dict[str, Any]:
        """The fault a request over a turn's `prompt_limit` gets, as this API words it."""
        return {"status": 400, "message": f"prompt is too long: more than {limit} characters"}

    def demo(self, body: dict[str, Any]) -> dict[str, Any]:
        """The turn for a session with no script."""
        return demo_turn(body)

    def log(self, session: str, step: str | None, body: dict[str, Any]) -> dict[str, Any]:
        entry = {"session": session, "step": step, "body": body, "at": time.time(), "done": None}
        with self.lock:
            self.requests.append(entry)
        return entry


def demo_turn(body: dict[str, Any]) -> dict[str, Any]:
    """A deterministic little agent: time, note, email (needs approval), answer."""
    tools = {t["name"] for t in body.get("tools", [])}
    results: dict[str, dict[str, Any]] = {}
    names: dict[str, str] = {}
    for message in body.get("messages", []):
        for block in message.get("content", []) if isinstance(message.get("content"), list) else []:
            if block.get("type") == "tool_use":
                names[block["id"]] = block["name"]
            if block.get("type") == "tool_result":
                results[names.get(block["tool_use_id"], "?")] = block
    goal = _first_text(body)
    if "get_time" in tools and "get_time" not in results:
        return {
            "text": PREFIX + "I'll look up the time first.",
            "tool_calls": [{"name": "get_time", "input": {}}],
        }
    if "save_note" in tools and "save_note" not in results:
        return {
            "text": PREFIX + "Saving a note about the goal.",
            "tool_calls": [{"name": "save_note", "input": {"title": "Goal", "text": goal[:500]}}],
        }
    if "send_email" in tools and "send_email" not in results:
        return {
            "text": PREFIX + "Emailing a short summary; this needs your approval.",
            "tool_calls": [
                {
                    "name": "send_email",
                    "input": {"to": "team@example.com", "subject": "Summary", "body": f"Goal: {goal[:200]}"},
                }
            ],
        }
    email = results.get("send_email")
    outcome = ""
    if email is not None:
        outcome = (
            "The email was not sent: " + _text_of(email) if email.get("is_error") else "The email went out."
        )
    when = _text_of(results["get_time"]) if "get_time" in results else "unknown"
    noted = " I saved a note." if "save_note" in results else ""
    return {"text": f"{PREFIX}Done. The time was {when}.{noted} {outcome}".rstrip()}


def _first_text(body: dict[str, Any]) -> str:
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            return content
        for block in content or []:
            if block.get("type") == "text":
                return block["text"]
    return ""


def _text_of(block: dict[str, Any] | None) -> str:
    if not block:
        return ""
    content = block.get("content", "")
    return content if isinstance(content, str) else " ".join(c.get("text", "") for c in content)


class PromptCache:
    """Prompt caching as the API does it: the longest prefix that ended at a cache_control
    breakpoint before (for the same session) is read from the cache, the rest up to the
    last breakpoint is written, and only what follows is plain input."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: dict[str, set[str]] = {}

    def usage(self, session: str, body: dict[str, Any]) -> dict[str, int]:
        parts: list[tuple[str, bool]] = []
        system = body.get("system")
        blocks = [
            *body.get("tools", []),
            *([{"type": "text", "text": system}] if isinstance(system, str) else system or []),
        ]
        for message in compact(body.get("messages", [])):
            content = message.get("content")
            blocks += [{"type": "text", "text": content}] if isinstance(content, str) else content
        for block in blocks:
            clean = {k: v for k, v in block.items() if k != "cache_control"}
            parts.append((json.dumps(clean, sort_keys=True), "cache_control" in block))
        digest = hashlib.sha256()
        tokens = read = upto = 0
        with self.lock:
            seen = self.seen.setdefault(session, set())
            marks = []
            for text, breakpoint in parts:
                digest.update(text.encode())
                tokens += max(1, len(text) // 4)
                key = digest.hexdigest()
                if key in seen:
                    read = tokens
                if breakpoint:
                    upto = tokens
                    marks.append(key)
            seen.update(marks)
        read = min(read, upto)
        written = upto - read
        return {
            "input_tokens": max(1, tokens - read - written),
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": written,
        }


def build_message(
    turn: dict[str, Any], body: dict[str, Any], cached: dict[str, int] | None = None
) -> dict[str, Any]:
    content: list[dict[str, Any]] = list(turn.get("content", []))
    stopped: str | None = None
    if not content:
        if thinking_on(body) and turn.get("thinking"):
            content.append(
                {"type": "thinking", "thinking": turn["thinking"], "signature": sign(turn["thinking"])}
            )
        if thinking_on(body) and turn.get("redacted_thinking"):
            content.append(
                {"type": "redacted_thinking", "data": redacted_data(str(turn["redacted_thinking"]))}
            )
        text = turn.get("text") or ""
        stopped = next((s for s in body.get("stop_sequences") or [] if s in text), None)
        if stopped is not None:
            text = text[: text.index(stopped)]
        if text:
            content.append({"type": "text", "text": text})
        for call in [] if stopped is not None else turn.get("tool_calls", []):
            content.append(
                {
                    "type": "tool_use",
                    "id": call.get("id") or f"toolu_{uuid.uuid4().hex[:20]}",
                    "name": call["name"],
                    "input": call.get("input", {}),
                }
            )
    has_tools = any(b.get("type") == "tool_use" for b in content)
    stop = turn.get("stop_reason") or (
        "stop_sequence" if stopped else "tool_use" if has_tools else "end_turn"
    )
    usage = {
        "input_tokens": max(1, len(json.dumps(compact(body.get("messages", [])))) // 4),
        "output_tokens": max(1, len(json.dumps(content)) // 4),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        **(cached or {}),
    }
    usage.update(turn.get("usage", {}))
    return {
        "id": f"msg_fake_{uuid.uuid4().hex[:16]}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "fake-model"),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": stopped,
        "usage": usage,
    }


class Handler(BaseHTTPRequestHandler):
    server: FakeModelHTTPServer  # pyright: ignore[reportIncompatibleVariableOverride]: only that server runs it
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", f"req_fake_{uuid.uuid4().hex[:12]}")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("content-length") or 0)
        return json.loads(self.rfile.read(length) or b"{}")

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path == "/_requests":
            session = parse_qs(url.query).get("session", [None])[0]
            with self.server.script.lock:
                found = [r for r in self.server.script.requests if session is None or r["session"] == session]
            self._json(200, found)
        else:
            self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "not found"}})

    def do_POST(self) -> None:
        url = urlparse(self.path)
        if url.path == "/_script":
            body = self._body()
            self.server.script.set(body["session"], body["turns"])
            self._json(200, {"ok": True})
        elif url.path == "/_fault":
            body = self._body()
            self.server.script.set_fault(body["session"], body.get("fault"), body.get("times"))
            self._json(200, {"ok": True})
        elif url.path == "/_reset":
            self.server.script.__init__()
            self._json(200, {"ok": True})
        else:
            self._api(url.path)

    def _api(self, path: str) -> None:
        if path == "/v1/messages":
            self._scripted_call()
        elif path == "/v1/messages/count_tokens":
            body = self._body()
            count = max(
                1,
                len(json.dumps(compact([body.get("system"), body.get("tools"), body.get("messages")]))) // 4,
            )
            self._json(200, {"input_tokens": count})
        else:
            self._body()  # read it, or the next request on this connection starts inside it
            self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "not found"}})

    def _scripted_call(self) -> None:
        """Log the request and answer it with the session's next turn."""
        body = self._body()
        session = self.headers.get("x-agent-session", "")
        step = self.headers.get("x-agent-step")
        entry = self.server.script.log(session, step, body)
        try:
            self._answer(session, body)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            # The client gave up (a timeout, a cancelled activity): nothing to answer.
            entry["closed"] = time.time()
            self.close_connection = True
        finally:
            entry["done"] = time.time()

    def _answer(self, session: str, body: dict[str, Any]) -> None:
        expected_key = self.server.api_key
        bearer = (self.headers.get("authorization") or "").removeprefix("Bearer ")
        if expected_key and expected_key not in (self.headers.get("x-api-key"), bearer):
            self._json(401, _error(401, "invalid x-api-key"))
            return
        problem = self._refusal(body)
        if problem is not None:
            self._json(400, self._error_body({"status": 400, "message": problem}))
            return
        if self.headers.get("x-agent-purpose") == "summary":
            # A summary of what no longer fits the context: answered without using a turn.
            excerpt = self._summary_request_text(body)
            turn: dict[str, Any] = {
                "text": f"{PREFIX}summary of {excerpt.count('tool_use_id')} tool results and what led to them."
            }
        elif (refused := self.check_request(body)) is not None:
            # Refused as the real API refuses it, before a scripted turn is used.
            turn = {"status": refused[0], "message": refused[1]}
        else:
            turn = self.server.script.next_turn(session, body, self.headers.get("x-agent-step"))
        if turn.get("delay"):
            time.sleep(float(turn["delay"]))
        if turn.get("drop"):
            self.close_connection = True
            self.connection.close()
            return
        if "status" in turn:
            self._json(int(turn["status"]), self._error_body(turn), turn.get("headers"))
            return
        if "raw" in turn:
            self._raw(turn["raw"].encode())
            return
        self._reply(session, turn, body)

    def check_request(self, body: dict[str, Any]) -> tuple[int, str] | None:
        """What the real API refuses of the request's blocks (devservers/fakemodel/blocks.py)."""
        return check_messages(body)

    def _refusal(self, body: dict[str, Any]) -> str | None:
        """Why the real API would refuse this request before any model ran, if it would."""
        return refusal(body)

    def _summary_request_text(self, body: dict[str, Any]) -> str:
        return body["messages"][0]["content"][0]["text"]

    def _error_body(self, turn: dict[str, Any]) -> dict[str, Any]:
        return _error(int(turn["status"]), turn.get("message"))

    def _reply(self, session: str, turn: dict[str, Any], body: dict[str, Any]) -> None:
        """A scripted turn answered: JSON, or server-sent events when the request streams."""
        message = build_message(turn, body, self.server.cache.usage(session, body))
        if turn.get("malformed") and not body.get("stream"):
            self._raw(json.dumps(message).encode()[:-20])
            return
        if body.get("stream"):
            self._stream(message, turn)
            return
        data = json.dumps(message).encode()
        if turn.get("pace"):
            time.sleep(float(turn["pace"]) * sum(len(_words(b.get("text", ""))) for b in message["content"]))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", f"req_fake_{uuid.uuid4().hex[:12]}")
        self.end_headers()
        if turn.get("stall"):
            self.wfile.flush()
            time.sleep(float(turn["stall"]))
        if turn.get("drop_mid"):
            self.wfile.write(data[: len(data) // 2])
            self._reset_connection()
            return
        self.wfile.write(data)

    def _raw(self, data: bytes) -> None:
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _reset_connection(self) -> None:
        """Abort the connection (TCP RST), as a crashed proxy or a network fault does."""
        self.wfile.flush()
        self.close_connection = True
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()

    def _stream(self, message: dict[str, Any], turn: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        chunk_delay = float(turn.get("chunk_delay", 0))
        pace = float(turn.get("pace", 0))
        start = {
            **message,
            "content": [],
            "stop_reason": None,
            "usage": {**message["usage"], "output_tokens": 1},
        }
        self._event("message_start", {"type": "message_start", "message": start})
        if turn.get("stall"):
            time.sleep(float(turn["stall"]))
        if turn.get("malformed"):
            self.wfile.write(
                b'event: content_block_start\ndata: {"type": "content_block_start", "index": 0,\n\n'
            )
            self.wfile.flush()
            return
        for index, block in enumerate(message["content"]):
            if block["type"] == "text":
                self._event("content_block_start", _block_start(index, {"type": "text", "text": ""}))
                for piece in _words(block["text"]) if pace else _chunks(block["text"]):
                    self._event("content_block_delta", _delta(index, {"type": "text_delta", "text": piece}))
                    if chunk_delay or pace:
                        time.sleep(pace or chunk_delay)
            elif block["type"] == "thinking":
                self._event(
                    "content_block_start",
                    _block_start(index, {"type": "thinking", "thinking": "", "signature": ""}),
                )
                for piece in _chunks(block["thinking"]):
                    self._event(
                        "content_block_delta", _delta(index, {"type": "thinking_delta", "thinking": piece})
                    )
                    if chunk_delay:
                        time.sleep(chunk_delay)
                self._event(
                    "content_block_delta",
                    _delta(index, {"type": "signature_delta", "signature": block["signature"]}),
                )
            elif block["type"] == "tool_use":
                self._event("content_block_start", _block_start(index, {**block, "input": {}}))
                self._event(
                    "content_block_delta",
                    _delta(index, {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}),
                )
            else:
                self._event("content_block_start", _block_start(index, block))
            self._event("content_block_stop", {"type": "content_block_stop", "index": index})
            if turn.get("cut_stream"):
                self.wfile.flush()
                return
            if turn.get("drop_mid"):
                self._reset_connection()
                return
        self._event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]},
                "usage": {"output_tokens": message["usage"]["output_tokens"]},
            },
        )
        self._event("message_stop", {"type": "message_stop"})

    def _event(self, name: str, payload: dict[str, Any]) -> None:
        self.wfile.write(f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode())
        self.wfile.flush()


def _error(status: int, message: str | None) -> dict[str, Any]:
    kind = ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message or f"fake model: {kind}"}}


def _block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def _delta(index: int, delta: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def _words(text: str) -> list[str]:
    """The text in words, each with the spaces after it."""
    return re.findall(r"\S+\s*|\s+", text)


def _chunks(text: str, size: int = 24) -> list[str]:
    size = max(size, len(text) // 500)  # a long text in at most ~500 deltas
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


class FakeModelHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    handler: type[Handler] = Handler

    def __init__(self, address: tuple[str, int], api_key: str | None = None):
        super().__init__(address, self.handler)
        self.script = Script()
        self.cache = PromptCache()
        self.api_key = api_key


class FakeModelServer:
    """The server in a background thread of this process, on 127.0.0.1."""

    http_server: type[FakeModelHTTPServer] = FakeModelHTTPServer

    def __init__(self, port: int = 0, api_key: str | None = None):
        self.httpd = self.http_server(("127.0.0.1", port), api_key=api_key)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def script(self) -> Script:
        return self.httpd.script

    def start(self) -> Self:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
