"""The model activity: one call to Anthropic's Messages API.

`AsyncAnthropic(max_retries=0)`: Temporal owns retries, and `errors.classify` decides
which failures it retries. The API key is read here, in the worker process, from the
environment (`ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL`); it never enters a workflow input.
The transcript arrives by reference and is read from the transcript store. Text is
streamed; when a call runs long enough for a person to be waiting, its text deltas are
published to the session's event stream, tagged with the attempt.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from datetime import timedelta
from typing import Any

import anthropic
from temporalio import activity
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.exceptions import ApplicationError

from activities.context import Fitted, estimate_tokens, fit, summary_request
from activities.errors import MODEL_TERMINAL, PROMPT_TOO_LONG, TRANSCRIPT_MISSING, IncompleteResponse, classify
from activities.transcript import TranscriptMissing, TranscriptStore, open_store
from activities.types import Message, ModelReply, ModelRequest, ToolSpec, Usage, tool_specs_text

HEARTBEAT_EVERY_S = 1.0
# A call shorter than this publishes no deltas: the finished turn is published anyway,
# and every publish is a signal, which is one more workflow task.
STREAM_DELTAS_AFTER_S = 0.5
DELTA_TOPIC = "delta"
PROMPT_TOO_LONG_REFITS = 3
COUNT_ABOVE = 0.85  # of the budget: ask the provider to count
CACHE = {"type": "ephemeral"}


def build_params(request: ModelRequest, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The Messages API request, with cache breakpoints on tools, system and history."""
    tools = [spec.for_model() for spec in request.tools]
    if tools:
        tools[-1] = {**tools[-1], "cache_control": CACHE}
    params: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": _with_history_breakpoint(messages),
    }
    if request.system:
        params["system"] = [{"type": "text", "text": request.system, "cache_control": CACHE}]
    if tools:
        params["tools"] = tools
    return params


def _with_history_breakpoint(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not messages or not messages[-1]["content"]:
        return messages
    last = messages[-1]
    blocks = list(last["content"])
    blocks[-1] = {**blocks[-1], "cache_control": CACHE}
    return [*messages[:-1], {**last, "content": blocks}]


class ModelActivities:
    def __init__(self, store: TranscriptStore | None = None, client: anthropic.AsyncAnthropic | None = None):
        self._store = store or open_store()
        self._client = client
        self._specs: dict[str, list[ToolSpec]] = {}  # tool specs by their hash: read once

    def _anthropic(self) -> anthropic.AsyncAnthropic:
        if self._client is None:
            if not (os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")):
                # No retry can fix this: fail the session with what to do.
                raise ApplicationError(
                    "ANTHROPIC_API_KEY is not set in the worker's environment; set it and restart the worker",
                    type=MODEL_TERMINAL,
                    non_retryable=True,
                )
            self._client = anthropic.AsyncAnthropic(max_retries=0, timeout=httpx_timeout())
        return self._client

    @activity.defn(name="call_model")
    async def call_model(self, request: ModelRequest) -> ModelReply:
        """Call the model with the session's transcript plus the new messages."""
        try:
            base = await self._store.load(request.transcript_ref)
        except TranscriptMissing as err:
            raise ApplicationError(str(err), type=TRANSCRIPT_MISSING, non_retryable=True) from err
        try:
            new = [await self._store.resolve(m.model_dump(mode="json", exclude_none=True)) for m in request.new_messages]
            request = await self._with_tools(request)
        except TranscriptMissing as err:
            raise ApplicationError(str(err), type=TRANSCRIPT_MISSING, non_retryable=True) from err
        messages = base + new
        attempt = activity.info().attempt
        started = time.monotonic()
        beat = asyncio.create_task(_heartbeat_forever())
        budget = request.context_tokens - request.max_tokens
        final = None
        too_long: ApplicationError | None = None
        try:
            sent: list[dict[str, Any]] | None = None
            for _ in range(PROMPT_TOO_LONG_REFITS + 1):
                fitted = await self._fit(request, messages, budget)
                if fitted.messages == sent:
                    break  # nothing more can be left out
                sent = fitted.messages
                try:
                    final = await self._send(build_params(request, sent), request, attempt, started)
                    break
                except anthropic.BadRequestError as err:
                    too_long = classify(err)
                    if too_long.type != PROMPT_TOO_LONG:
                        raise
                    # Answered by compacting, never by sending the same request again.
                    budget = int(fitted.estimated_tokens * 0.7)
            else:
                raise too_long
            if final is None:
                raise too_long
        except asyncio.CancelledError:
            raise
        except ApplicationError:
            raise
        except Exception as err:
            raise classify(err) from err
        finally:
            beat.cancel()
        latency_ms = int((time.monotonic() - started) * 1000)
        message = Message.model_validate(
            {"role": "assistant", "content": [b.model_dump(mode="json", exclude_none=True) for b in final.content]}
        )
        dumped = message.model_dump(mode="json", exclude_none=True)
        # One segment per call: the new messages and the reply (one file, one cache entry).
        ref = await self._store.extend(request.transcript_ref, [*new, dumped], messages + [dumped])
        return ModelReply(
            message=message,
            stop_reason=final.stop_reason,
            usage=_usage(final.usage),
            model=final.model,
            transcript_ref=ref,
            latency_ms=latency_ms,
            attempt=attempt,
            context_dropped=len(fitted.dropped),
        )

    async def _with_tools(self, request: ModelRequest) -> ModelRequest:
        """The request with its tool specs, stored the first time and read back after."""
        if request.tools is not None:
            await self._store.put_blob(tool_specs_text(request.tools)[0])
            return request
        specs = self._specs.get(request.tools_ref)
        if specs is None:
            specs = [ToolSpec.model_validate(t) for t in json.loads(await self._store.get_blob(request.tools_ref))]
            if len(self._specs) >= 64:
                self._specs.clear()
            self._specs[request.tools_ref] = specs
        return request.model_copy(update={"tools": specs})

    async def _send(self, params: dict[str, Any], request: ModelRequest, attempt: int, started: float):
        if request.stream:
            return await self._stream(params, request, attempt, started)
        return await self._anthropic().messages.create(**params, extra_headers=_session_headers(request))

    async def _fit(self, request: ModelRequest, messages: list[dict[str, Any]], budget: int) -> Fitted:
        """The messages that fit the context window, with a summary of the rest if asked for."""
        fixed = estimate_tokens(request.system) + estimate_tokens([t.for_model() for t in request.tools])
        fitted = fit(messages, budget, fixed=fixed)
        if not fitted.dropped and fitted.estimated_tokens > budget * COUNT_ABOVE:
            # Close to the limit: ask the provider rather than trust the estimate.
            counted = await self._count_tokens(request, messages)
            if counted is not None and counted > budget:
                fitted = fit(messages, int(budget * fitted.estimated_tokens / counted), fixed=fixed)
        if fitted.dropped and request.summarize_dropped:
            summary = await self._summary(request, fitted.dropped, budget)
            fitted = fit(messages, budget, fixed=fixed + estimate_tokens(summary), summary=summary)
        return fitted

    async def _count_tokens(self, request: ModelRequest, messages: list[dict[str, Any]]) -> int | None:
        try:
            params = build_params(request, messages)
            params.pop("max_tokens", None)
            counted = await self._anthropic().messages.count_tokens(**params, extra_headers=_session_headers(request))
            return counted.input_tokens
        except Exception:  # counting is an optimisation; the estimate stands
            return None

    async def _summary(self, request: ModelRequest, dropped: list[dict[str, Any]], budget: int) -> str:
        key = hashlib.sha256(json.dumps(dropped, sort_keys=True).encode()).hexdigest()
        cached = await self._store.note(key)
        if cached is not None:
            return cached
        reply = await self._anthropic().messages.create(
            model=request.model,
            max_tokens=min(1024, request.max_tokens),
            messages=summary_request(dropped, budget // 2),
            extra_headers={**_session_headers(request), "x-agent-purpose": "summary"},
        )
        text = "".join(b.text for b in reply.content if b.type == "text").strip()
        await self._store.save_note(key, text)
        return text

    async def _stream(self, params: dict[str, Any], request: ModelRequest, attempt: int, started: float):
        publisher: WorkflowStreamClient | None = None
        backlog: list[str] = []
        try:
            async with self._anthropic().messages.stream(
                **params, extra_headers=_session_headers(request)
            ) as stream:
                async for text in stream.text_stream:
                    backlog.append(text)
                    if publisher is None and time.monotonic() - started >= STREAM_DELTAS_AFTER_S:
                        publisher = WorkflowStreamClient.from_within_activity(
                            batch_interval=timedelta(milliseconds=300)
                        )
                        await publisher.__aenter__()
                    if publisher is not None:
                        publisher.topic(DELTA_TOPIC).publish(
                            {"step": request.step, "attempt": attempt, "text": "".join(backlog)}
                        )
                        backlog.clear()
                final = await stream.get_final_message()
            if final.stop_reason is None:
                # The SDK returns what arrived; without message_stop the answer is partial.
                raise IncompleteResponse("the stream ended before message_stop")
            return final
        finally:
            if publisher is not None:
                await publisher.__aexit__(None, None, None)


def httpx_timeout() -> float:
    return 110.0


def _session_headers(request: ModelRequest) -> dict[str, str]:
    # Lets a local test server script turns per session; the real API ignores them.
    return {"x-agent-session": request.session_id, "x-agent-step": str(request.step)}


def _usage(usage: Any) -> Usage:
    return Usage(
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cache_creation_input_tokens=getattr(usage, "cache_creation_input_tokens", None) or 0,
        cache_read_input_tokens=getattr(usage, "cache_read_input_tokens", None) or 0,
    )


async def _heartbeat_forever() -> None:
    # The first beat after one interval, not at the start: a call that answers within
    # it costs the server no heartbeat at all (cancellation still arrives within about
    # two intervals, and the heartbeat timeout is ten times longer).
    while True:
        await asyncio.sleep(HEARTBEAT_EVERY_S)
        activity.heartbeat()
