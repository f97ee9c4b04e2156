"""One model call of a session: the request (the transcript by reference, only the new
messages inline), the activity, and the reply recorded in the state.

The workflow sees only normalised replies (`ModelReply`: neutral content blocks, stop
reason and usage), whichever provider the model string names.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.model_errors import FALLS_BACK, MODEL_RATE_LIMITED, TRANSCRIPT_MISSING
    from activities.wire import (
        Message,
        ModelReply,
        ModelRequest,
        ModelSettings,
        ToolResultBlock,
        tool_specs_text,
    )
    from workflows import options
    from workflows.contract import Fallback, ToolCallRecord, TraceTurn
    from workflows.events import TurnRecorded
    from workflows.outcomes import Finished
    from workflows.session import Session
    from workflows.temporal import Failed
    from workflows.typed_output import INSTRUCTION


class FallBack(Exception):
    """The model in use failed in a way its fallback model may not: the step goes on to it."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class ModelCaller:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.state = session.state
        self.tools_sent = False  # each run sends the tool specs inline once
        self._resent = 0  # for the trace turn of the reply being recorded
        self._fallback: list[Fallback] = []  # for the trace turn of the reply being recorded
        self._model = session.input.model  # the model that made the call being recorded
        self.in_flight = False  # a model call runs: working time, whatever the state says

    async def call(self) -> ModelReply:
        """Call the model with what is new since the last call; a lost transcript is sent
        whole, once. With fallback models, a model that fails as unavailable, rate limited
        or refusing the key hands the same step to the next one."""
        self.in_flight = True
        try:
            return await self._call()
        finally:
            self.in_flight = False

    async def _call(self) -> ModelReply:
        self._resent = 0
        self._fallback = []
        models = self._models()
        for index, model in enumerate(models):
            try:
                reply = await self._call_with(model, last=index == len(models) - 1)
            except FallBack as why:
                self._fallback.append(Fallback(model=model, reason=why.reason))
                continue
            self._model = model
            self.state.model_in_use = model if model != self.session.input.model else None
            self.state.transcript_ref = reply.transcript_ref
            self.state.unsent = []
            self.tools_sent = True
            return reply
        raise RuntimeError("no model to call")  # the last model never falls back

    def _models(self) -> list[str]:
        """The models this step may try, in order: from the fallback model in use while the
        model's tool loop goes on (a loop never moves back half way), else from the first."""
        models = self.session.input.models()
        in_use, trace = self.state.model_in_use, self.state.trace
        looping = bool(trace) and trace[-1].stop_reason in ("tool_use", "pause_turn")
        if in_use in models and looping:
            return models[models.index(in_use) :]
        return models

    async def _call_with(self, model: str, *, last: bool) -> ModelReply:
        """The reply of `model`; `FallBack` when a failure leaves the step to the next model."""
        limits = self.session.input.limits
        if last:
            return self._finished_on_failure(await self._attempts(model, options.model_call(limits)))
        outcome = await self._attempts(model, options.model_call_before_fallback(limits))
        if isinstance(outcome, Failed) and outcome.error_type == MODEL_RATE_LIMITED:
            rest = options.model_call_rate_limited(limits)
            if rest is not None:
                outcome = await self._attempts(model, rest)
        if isinstance(outcome, Failed) and _falls_back(outcome):
            raise FallBack(outcome.describe("model call"))
        return self._finished_on_failure(outcome)

    def _finished_on_failure(self, outcome: ModelReply | Failed) -> ModelReply:
        if isinstance(outcome, Failed):
            raise Finished("failed", error=outcome.describe("model call")) from outcome
        return outcome

    async def _attempts(self, model: str, call_options: options.ActivityOptions) -> ModelReply | Failed:
        """One model activity with `call_options` (and the whole transcript once more if the
        store lost it): the reply, or the failure it ended in."""
        request = self._request(model)
        try:
            return await self._activity(request, call_options)
        except Failed as err:
            if err.error_type != TRANSCRIPT_MISSING:
                return err
        whole = {"transcript_ref": None, "new_messages": self.state.messages, "tools": self.state.specs}
        self._resent = 1
        self.state.transcript_resends += 1
        try:
            return await self._activity(request.model_copy(update=whole), call_options)
        except Failed as again:
            return again

    def _request(self, model: str) -> ModelRequest:
        state, input = self.state, self.session.input
        return ModelRequest(
            session_id=self.session.id,
            step=state.steps + 1,
            model=model,
            system=self._system(),
            max_tokens=input.limits.max_tokens,
            tools=None if self.tools_sent else state.specs,
            tools_ref=tool_specs_text(state.specs)[1],
            transcript_ref=state.transcript_ref,
            new_messages=[self._by_reference(m) for m in state.unsent],
            stream=input.stream,
            context_tokens=input.limits.context_tokens,
            summarize_dropped=input.summarize_dropped,
            settings=self._settings(),
        )

    def _system(self) -> str:
        """The system prompt: the session's, the user's memories (if asked), the typed answer's instruction."""
        system, note = self.session.input.system, self.state.memory_note
        if note:
            system += f"\n\nWhat you remember about this user from earlier sessions:\n{note}"
        return system if self.session.input.output_schema is None else f"{system}\n\n{INSTRUCTION}"

    def _settings(self) -> ModelSettings | None:
        """The session's model settings for this call: its tool choice on a run's first
        call only (later calls choose freely, so `any` cannot call tools forever)."""
        settings = self.session.input.model_settings
        if settings is None or settings.tool_choice is None or self.state.next_call_starts_run():
            return settings
        settings = settings.model_copy(update={"tool_choice": None})
        return None if settings.is_default() else settings

    def _by_reference(self, message: Message) -> Message:
        """The message with long tool outputs named by the hash the tool activity stored them under."""
        if message.role != "user" or not any(
            isinstance(b, ToolResultBlock) and self._output_ref(b) for b in message.content
        ):
            return message
        blocks: list[Any] = []
        for block in message.content:
            ref = self._output_ref(block) if isinstance(block, ToolResultBlock) else None
            blocks.append(block.model_copy(update={"content": "", "content_ref": ref}) if ref else block)
        return Message(role=message.role, content=blocks)

    def _output_ref(self, block: ToolResultBlock) -> str | None:
        call = self.state.calls.get(block.tool_use_id)
        return call.output_ref if call is not None and call.output == block.content else None

    async def _activity(self, request: ModelRequest, call_options: options.ActivityOptions) -> ModelReply:
        # On the model calls' own queue, rate-limited there when the workers say so (the SDK
        # dispatches eagerly only on the workflow's own queue, which would pass the rate by).
        queue = options.model_task_queue(workflow.info().task_queue)
        return await self.session.temporal.call_model(request, call_options, task_queue=queue)

    def record(self, reply: ModelReply) -> None:
        """The reply in the state: the message, usage and cost, a trace turn, its tool calls."""
        state, input, now = self.state, self.session.input, workflow.now()
        state.steps += 1
        state.steered = False
        state.usage = state.usage + reply.usage
        price = input.price_of(self._model)
        turn_cost = price.cost(reply.usage) if price else None
        if state.cost_usd is not None:
            # A turn of a fallback model without prices leaves the session's cost unknown.
            state.cost_usd = state.cost_usd + turn_cost if turn_cost is not None else None
        state.append(reply.message, sent=True)
        text = reply.message.text()
        if text:
            state.answer = text
        self.session.temporal.record_turn(
            TraceTurn(
                step=state.steps, model=reply.model, prompt_version=input.prompt_version,
                started_at=now - timedelta(milliseconds=reply.latency_ms), ended_at=now,
                stop_reason=reply.stop_reason, text=text, tool_use_ids=[b.id for b in reply.message.tool_uses()],
                usage=reply.usage, cost_usd=turn_cost, latency_ms=reply.latency_ms, attempt=reply.attempt,
                context_dropped=reply.context_dropped, transcript_resends=self._resent,
                fallback=self._fallback,
            ),
            model=self._model,
        )  # fmt: skip
        for block in reply.message.tool_uses():
            state.calls[block.id] = ToolCallRecord(
                tool_use_id=block.id, step=state.steps, name=block.name, input=block.input
            )
        self.session.view.publish(
            TurnRecorded(
                step=state.steps, text=text, stop_reason=reply.stop_reason, usage=state.usage,
                cost_usd=state.cost_usd, attempt=reply.attempt,
            )
        )  # fmt: skip
        self.session.view.changed()


def _falls_back(err: Failed) -> bool:
    """A failure the next model may not share: unavailable, rate limited, a refused key, a timeout."""
    return err.timed_out or err.error_type in FALLS_BACK
