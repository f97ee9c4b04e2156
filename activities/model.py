"""The model activity: one call to a model provider with the session's transcript.

The provider is chosen by the model's prefix (`activities.providers`); it owns the wire
format and decides which of its failures Temporal retries. What is the same for every
provider lives here: the transcript arrives by reference and is read from the transcript
store, the context is fitted to the window (and fitted tighter when the provider says
the prompt is too long), the reply is recorded in the store, and the streamed text is kept
in this process for followers while the call runs (activities/deltas.py), never sent to
Temporal.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.attempt_telemetry import model_call_telemetry
from activities.context import Fitted, estimate_tokens, fit, summary_request
from activities.deltas import Deltas
from activities.heartbeat import Heartbeats
from activities.model_errors import PROMPT_TOO_LONG, TRANSCRIPT_MISSING, terminal
from activities.providers import ModelTurn, Provider, ProviderCall, resolve
from activities.transcript import TranscriptMissing, TranscriptStore, open_store
from activities.wire import ArchivePart, ArchiveReceipt, ModelReply, ModelRequest, ToolSpec, tool_specs_text

if TYPE_CHECKING:  # the SDKs are imported where a provider is built (activities.providers)
    import anthropic

SIZES_KEPT = 1024  # transcripts whose token estimates are kept, like the store's own cache
PROMPT_TOO_LONG_REFITS = 3
REFIT_SHRINK = 0.7  # of the estimate that was too long: the estimate was off by this much
COUNT_ABOVE = 0.85  # of the budget: ask the provider to count
SUMMARY_MAX_TOKENS = 1024

Messages = list[dict[str, Any]]


class ModelActivities:
    def __init__(
        self,
        store: TranscriptStore | None = None,
        client: anthropic.AsyncAnthropic | None = None,
        providers: Mapping[str, Provider] | None = None,
    ):
        """`providers` by name replace the worker's own (tests); `client` is Anthropic's."""
        self._store = store or open_store()
        self._providers = dict(providers or {})
        if client is not None:
            from activities.providers.anthropic import AnthropicProvider

            self._providers.setdefault("anthropic", AnthropicProvider(client=client))
        self._specs: dict[str, list[ToolSpec]] = {}  # tool specs by their hash: read once
        # The token estimates of the latest transcripts' messages, by reference, so that
        # fitting a long transcript does not serialise every message again at each step.
        self._sizes: OrderedDict[str, list[int]] = OrderedDict()
        self._size_parents: dict[str, str | None] = {}  # a transcript keeps its latest two, as the store

    @activity.defn(name="call_model")
    @model_call_telemetry
    async def call_model(self, request: ModelRequest) -> ModelReply:
        """Call the model with the session's transcript plus the new messages."""
        provider, model = resolve(request.model, self._providers)
        request, base, new = await self._load(request)
        sizes = [*self._sizes_of(request.transcript_ref, base), *map(estimate_tokens, new)]
        attempt = activity.info().attempt
        started = time.monotonic()
        beats = Heartbeats()  # only with a heartbeat timeout (activities/heartbeat.py)
        try:
            async with beats, Deltas(request.session_id, request.step, attempt) as deltas:
                turn, fitted = await self._send(provider, model, request, base + new, sizes, deltas)
        except ApplicationError:
            raise
        except Exception as err:
            raise provider.classify(err) from err
        ref = await self._record(request, new, base + new, sizes, turn)
        return ModelReply(
            message=turn.message,
            stop_reason=turn.stop_reason,
            usage=turn.usage,
            model=turn.model,
            transcript_ref=ref,
            latency_ms=int((time.monotonic() - started) * 1000),
            attempt=attempt,
            context_dropped=len(fitted.dropped),
            heartbeats=beats.sent,
        )

    @activity.defn(name="archive_records")
    async def archive_records(self, part: ArchivePart) -> ArchiveReceipt:
        """Store what a run of a long session hands over instead of carrying it (once per
        continue-as-new, as a local activity: its input is not recorded in history)."""
        ref = await self._store.put_archive(part.model_dump(mode="json", exclude_none=True))
        return ArchiveReceipt(ref=ref, attempt=activity.info().attempt)

    async def _load(self, request: ModelRequest) -> tuple[ModelRequest, Messages, Messages]:
        """The request with its tool specs, the stored transcript, and the new messages."""
        try:
            base = await self._store.load(request.transcript_ref)
            new = [
                await self._store.resolve(m.model_dump(mode="json", exclude_none=True))
                for m in request.new_messages
            ]
            return await self._with_tools(request), base, new
        except TranscriptMissing as err:
            # The workflow answers this by sending the whole transcript once.
            raise ApplicationError(str(err), type=TRANSCRIPT_MISSING, non_retryable=True) from err

    async def _with_tools(self, request: ModelRequest) -> ModelRequest:
        """The request with its tool specs, stored the first time and read back after."""
        if request.tools is not None:
            await self._store.put_blob(tool_specs_text(request.tools)[0])
            return request
        specs = self._specs.get(request.tools_ref)
        if specs is None:
            specs = [
                ToolSpec.model_validate(t) for t in json.loads(await self._store.get_blob(request.tools_ref))
            ]
            if len(self._specs) >= 64:
                self._specs.clear()
            self._specs[request.tools_ref] = specs
        return request.model_copy(update={"tools": specs})

    def _sizes_of(self, ref: str | None, messages: Messages) -> list[int]:
        """`estimate_tokens` of each message of the transcript `ref`, remembered or worked out."""
        if ref is not None and len(known := self._sizes.get(ref, [])) == len(messages):
            self._sizes.move_to_end(ref)
            return known
        return [estimate_tokens(m) for m in messages]

    def _remember_sizes(self, ref: str, sizes: list[int], parent: str | None) -> None:
        self._sizes[ref] = sizes
        self._sizes.move_to_end(ref)
        self._size_parents[ref] = parent
        if parent is not None and (grand := self._size_parents.pop(parent, None)) is not None:
            self._sizes.pop(grand, None)
            self._size_parents.pop(grand, None)
        while len(self._sizes) > SIZES_KEPT:
            evicted, _ = self._sizes.popitem(last=False)
            self._size_parents.pop(evicted, None)

    async def _send(
        self,
        provider: Provider,
        model: str,
        request: ModelRequest,
        messages: Messages,
        sizes: list[int],
        deltas: Deltas,
    ) -> tuple[ModelTurn, Fitted]:
        """The provider's answer to the fitted messages, fitted tighter while it says too long."""
        budget = request.context_tokens - request.max_tokens
        sent: Messages | None = None
        # Replaced by the provider's own error at its first refusal, which the loop needs to
        # end: the first fit is always sent.
        too_long = ApplicationError("prompt is too long", type=PROMPT_TOO_LONG, non_retryable=True)
        for _ in range(PROMPT_TOO_LONG_REFITS + 1):
            fitted = await self._fit(provider, model, request, messages, sizes, budget)
            if fitted.messages == sent:
                break  # nothing more can be left out
            sent = fitted.messages
            outgoing = await self._with_attachments(sent)
            try:
                return await provider.complete(
                    _call(request, model, outgoing), deltas.on_text, deltas.on_thinking
                ), fitted
            except Exception as err:
                too_long = provider.classify(err)
                if too_long.type != PROMPT_TOO_LONG:
                    raise too_long from err
            # Answered by compacting, never by sending the same request again.
            budget = int(fitted.estimated_tokens * REFIT_SHRINK)
        raise too_long

    async def _with_attachments(self, messages: Messages) -> Messages:
        """The messages with their attachments' bytes, read from the store for this request only."""
        try:
            return await self._store.with_attachments(messages)
        except TranscriptMissing as err:
            raise terminal(
                f"{err}: every worker must share the object store (AGENT_STORE_URL, AGENT_DATA_DIR) "
                "with the process that started the session"
            ) from err

    async def _fit(
        self,
        provider: Provider,
        model: str,
        request: ModelRequest,
        messages: Messages,
        sizes: list[int],
        budget: int,
    ) -> Fitted:
        """The messages that fit the context window, with a summary of the rest if asked for."""
        fixed = estimate_tokens(request.system) + estimate_tokens(
            [t.for_model() for t in request.tools or []]
        )
        fitted = fit(messages, budget, fixed=fixed, sizes=sizes)
        if not fitted.dropped and fitted.estimated_tokens > budget * COUNT_ABOVE:
            # Close to the limit: ask the provider rather than trust the estimate.
            counted = await provider.count_tokens(
                _call(request, model, await self._with_attachments(messages))
            )
            if counted is not None and counted > budget:
                fitted = fit(
                    messages, int(budget * fitted.estimated_tokens / counted), fixed=fixed, sizes=sizes
                )
        if fitted.dropped and request.summarize_dropped:
            summary = await self._summary(provider, model, request, fitted.dropped, budget)
            fitted = fit(
                messages, budget, fixed=fixed + estimate_tokens(summary), summary=summary, sizes=sizes
            )
        return fitted

    async def _summary(
        self, provider: Provider, model: str, request: ModelRequest, dropped: Messages, budget: int
    ) -> str:
        """A summary of the messages left out, made once per distinct run of them."""
        key = hashlib.sha256(json.dumps(dropped, sort_keys=True).encode()).hexdigest()
        cached = await self._store.note(key)
        if cached is not None:
            return cached
        call = ProviderCall(
            model=model,
            system="",
            max_tokens=min(SUMMARY_MAX_TOKENS, request.max_tokens),
            tools=[],
            messages=summary_request(dropped, budget // 2),
            headers={**_session_headers(request), "x-agent-purpose": "summary"},
            cache=False,
        )
        text = (await provider.complete(call)).message.text().strip()
        await self._store.save_note(key, text)
        return text

    async def _record(
        self, request: ModelRequest, new: Messages, messages: Messages, sizes: list[int], turn: ModelTurn
    ) -> str:
        """The transcript's new reference: one segment per call, the new messages and the reply."""
        reply = turn.message.model_dump(mode="json", exclude_none=True)
        ref = await self._store.extend(request.transcript_ref, [*new, reply], [*messages, reply])
        self._remember_sizes(ref, [*sizes, estimate_tokens(reply)], request.transcript_ref)
        return ref


def _call(request: ModelRequest, model: str, messages: Messages) -> ProviderCall:
    return ProviderCall(
        model=model,
        system=request.system,
        max_tokens=request.max_tokens,
        tools=list(request.tools or []),
        messages=messages,
        stream=request.stream,
        headers=_session_headers(request),
        settings=request.settings,
    )


def _session_headers(request: ModelRequest) -> dict[str, str]:
    # Lets a local test server script turns per session; the real API ignores them.
    return {"x-agent-session": request.session_id, "x-agent-step": str(request.step)}
