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
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.attempt_telemetry import model_call_telemetry
from activities.context import Cut, Tail, estimate_tokens, summary_request
from activities.deltas import Deltas
from activities.heartbeat import Heartbeats
from activities.model_errors import PROMPT_TOO_LONG, TRANSCRIPT_MISSING, terminal
from activities.providers import ModelTurn, Provider, ProviderCall, resolve
from activities.stopping import stoppable
from activities.transcript import TranscriptMissing, TranscriptStore, open_store
from activities.wire import ArchivePart, ArchiveReceipt, ModelReply, ModelRequest, ToolSpec, tool_specs_text

if TYPE_CHECKING:  # the SDKs are imported where a provider is built (activities.providers)
    import anthropic

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

    @activity.defn(name="call_model")
    @model_call_telemetry
    async def call_model(self, request: ModelRequest) -> ModelReply:
        """Call the model with the session's transcript plus the new messages."""
        provider, model = resolve(request.model, self._providers)
        request, tail, new = await self._load(request)
        attempt = activity.info().attempt
        started = time.monotonic()
        beats = Heartbeats()  # only with a heartbeat timeout (activities/heartbeat.py)
        try:
            # A session that stops closes the request (activities/stopping.py).
            async with stoppable(), beats, Deltas(request.session_id, request.step, attempt) as deltas:
                turn, cut = await self._send(provider, model, request, tail, deltas)
        except ApplicationError:
            raise
        except Exception as err:
            raise provider.classify(err) from err
        ref = await self._record(request, new, tail, turn)
        return ModelReply(
            message=turn.message,
            stop_reason=turn.stop_reason,
            usage=turn.usage,
            model=turn.model,
            transcript_ref=ref,
            latency_ms=int((time.monotonic() - started) * 1000),
            attempt=attempt,
            context_dropped=cut.left_out,
            heartbeats=beats.sent,
            refusals=request.refusals,
        )

    @activity.defn(name="archive_records")
    async def archive_records(self, part: ArchivePart) -> ArchiveReceipt:
        """Store what a run of a long session hands over instead of carrying it (once per
        continue-as-new, as a local activity: its input is not recorded in history)."""
        ref = await self._store.put_archive(part.model_dump(mode="json", exclude_none=True))
        return ArchiveReceipt(ref=ref, attempt=activity.info().attempt)

    async def _load(self, request: ModelRequest) -> tuple[ModelRequest, Tail, Messages]:
        """The request with its tool specs, the tail of the stored transcript that the
        request's context budget can use followed by the new messages, and the new messages."""
        try:
            stored = await self._store.load_tail(request.transcript_ref, _keep(request))
            new = [
                await self._store.resolve(m.model_dump(mode="json", exclude_none=True))
                for m in request.new_messages
            ]
            return await self._with_tools(request), stored.extended(new), new
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

    async def _send(
        self,
        provider: Provider,
        model: str,
        request: ModelRequest,
        tail: Tail,
        deltas: Deltas,
    ) -> tuple[ModelTurn, Cut]:
        """The provider's answer to the fitted messages, fitted tighter while it says too long."""
        budget = _keep(request)
        sent: Messages | None = None
        # Replaced by the provider's own error at its first refusal, which the loop needs to
        # end: the first fit is always sent.
        too_long = ApplicationError("prompt is too long", type=PROMPT_TOO_LONG, non_retryable=True)
        for _ in range(PROMPT_TOO_LONG_REFITS + 1):
            cut = await self._fit(provider, model, request, tail, budget)
            if cut.messages == sent:
                break  # nothing more can be left out
            sent = cut.messages
            outgoing = await self._with_attachments(sent)
            try:
                return await provider.complete(
                    _call(request, model, outgoing), deltas.on_text, deltas.on_thinking
                ), cut
            except Exception as err:
                too_long = provider.classify(err)
                if too_long.type != PROMPT_TOO_LONG:
                    raise too_long from err
            # Answered by compacting, never by sending the same request again.
            budget = int(cut.estimated_tokens * REFIT_SHRINK)
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
        tail: Tail,
        budget: int,
    ) -> Cut:
        """The messages that fit the context window, with a summary of the rest if asked for."""
        fixed = estimate_tokens(request.system) + estimate_tokens(
            [t.for_model() for t in request.tools or []]
        )
        cut = tail.fit(budget, fixed=fixed)
        if not cut.left_out and cut.estimated_tokens > budget * COUNT_ABOVE:
            # Close to the limit: ask the provider rather than trust the estimate. (Nothing
            # left out: the tail is the whole transcript.)
            counted = await provider.count_tokens(
                _call(request, model, await self._with_attachments(tail.all_messages()))
            )
            if counted is not None and counted > budget:
                cut = tail.fit(int(budget * cut.estimated_tokens / counted), fixed=fixed)
        if cut.left_out and request.summarize_dropped:
            summary = await self._summary(provider, model, request, tail, cut.left_out, budget)
            cut = tail.fit(budget, fixed=fixed + estimate_tokens(summary), summary=summary)
        return cut

    async def _summary(
        self, provider: Provider, model: str, request: ModelRequest, tail: Tail, left_out: int, budget: int
    ) -> str:
        """A summary of the messages left out, made once per distinct run of them."""
        dropped: Messages | None = None
        if tail.summarized is not None and tail.summarized[0] == left_out:
            key = tail.summarized[1]  # the same messages as at an earlier call of this transcript
        else:
            dropped = await self._dropped(request, tail, left_out)
            key = hashlib.sha256(json.dumps(dropped, sort_keys=True).encode()).hexdigest()
            tail.summarized = (left_out, key)
        cached = await self._store.note(key)
        if cached is not None:
            return cached
        if dropped is None:
            dropped = await self._dropped(request, tail, left_out)
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

    async def _dropped(self, request: ModelRequest, tail: Tail, left_out: int) -> Messages:
        """The `left_out` messages after the goal: the older ones read from the store."""
        if tail.whole:
            return tail.messages[1 : 1 + left_out]
        try:
            stored = await self._store.load(request.transcript_ref)
        except TranscriptMissing as err:
            raise ApplicationError(str(err), type=TRANSCRIPT_MISSING, non_retryable=True) from err
        return [*stored[1 : tail.start], *tail.messages[1:]][:left_out]

    async def _record(self, request: ModelRequest, new: Messages, tail: Tail, turn: ModelTurn) -> str:
        """The transcript's new reference: one segment per call, the new messages and the reply.
        The store keeps the new transcript's tail that the next call's budget can use."""
        reply = turn.message.model_dump(mode="json", exclude_none=True)
        recorded = tail.extended([reply]).trimmed(_keep(request))
        return await self._store.extend(request.transcript_ref, [*new, reply], recorded)


def _keep(request: ModelRequest) -> int:
    """The request's context budget: the largest any fit of its transcript is given."""
    return request.context_tokens - request.max_tokens


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
