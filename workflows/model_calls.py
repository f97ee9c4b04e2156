"""One model call of a session: the request (the transcript by reference, only the new
messages inline), the activity, and the reply recorded in the state.

The workflow sees only normalised replies (`ModelReply`: neutral content blocks, stop
reason and usage), whichever provider the model string names.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.model import ModelActivities
    from activities.model_errors import TRANSCRIPT_MISSING
    from activities.wire import Message, ModelReply, ModelRequest, ToolResultBlock, tool_specs_text
    from workflows import options, spans
    from workflows.contract import ToolCallRecord, TraceTurn
    from workflows.events import TurnRecorded
    from workflows.metering import history_length
    from workflows.session import Finished, Session, describe_failure, error_type, was_cancelled


class ModelCaller:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.state = session.state
        self.tools_sent = False  # each run sends the tool specs inline once
        self._resent = 0  # for the trace turn of the reply being recorded
        self.in_flight = False  # a model call runs: working time, whatever the state says

    async def call(self) -> ModelReply:
        """Call the model with what is new since the last call; a lost transcript is sent whole, once."""
        self.in_flight = True
        try:
            return await self._call()
        finally:
            self.in_flight = False

    async def _call(self) -> ModelReply:
        request = self._request()
        self._resent = 0
        self.session.meter.to_next_turn = True  # from here, actions go to the turn this call records
        try:
            reply = await self._activity(request)
        except ActivityError as err:
            if was_cancelled(err):
                raise asyncio.CancelledError() from err
            if error_type(err) != TRANSCRIPT_MISSING:
                raise Finished("failed", error=describe_failure(err, "model call")) from err
            whole = {"transcript_ref": None, "new_messages": self.state.messages, "tools": self.state.specs}
            self._resent = 1
            self.state.transcript_resends += 1
            try:
                reply = await self._activity(request.model_copy(update=whole))
            except ActivityError as again:
                raise Finished("failed", error=describe_failure(again, "model call")) from again
        self.state.transcript_ref = reply.transcript_ref
        self.state.unsent = []
        self.tools_sent = True
        return reply

    def _request(self) -> ModelRequest:
        state, input = self.state, self.session.input
        return ModelRequest(
            session_id=self.session.id,
            step=state.steps + 1,
            model=input.model,
            system=input.system,
            max_tokens=input.limits.max_tokens,
            tools=None if self.tools_sent else state.specs,
            tools_ref=tool_specs_text(state.specs)[1],
            transcript_ref=state.transcript_ref,
            new_messages=[self._by_reference(m) for m in state.unsent],
            stream=input.stream,
            context_tokens=input.limits.context_tokens,
            summarize_dropped=input.summarize_dropped,
        )

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

    async def _activity(self, request: ModelRequest) -> ModelReply:
        meter, limits = self.session.meter, self.session.input.limits
        scheduled = history_length()
        try:
            reply = await workflow.execute_activity_method(
                ModelActivities.call_model,
                request,
                **options.model_call(limits),
                summary=f"model call {request.step} ({request.model})",
            )
        except ActivityError as err:
            if was_cancelled(err):
                meter.activity_interrupted(scheduled)
            else:
                meter.activity_failed(err, limits.model_attempts)
            raise
        except asyncio.CancelledError:
            meter.activity_interrupted(scheduled)
            raise
        meter.activity(reply.attempt, reply.heartbeats)
        return reply

    def record(self, reply: ModelReply) -> None:
        """The reply in the state: the message, usage and cost, a trace turn, its tool calls."""
        state, input, now = self.state, self.session.input, workflow.now()
        state.steps += 1
        state.usage = state.usage + reply.usage
        turn_cost = input.price.cost(reply.usage) if input.price else None
        if turn_cost is not None and state.cost_usd is not None:
            state.cost_usd += turn_cost
        spans.model_turn(self.session, input.model, reply.usage, turn_cost)
        state.append(reply.message, sent=True)
        text = reply.message.text()
        if text:
            state.answer = text
        state.trace.append(
            TraceTurn(
                step=state.steps, model=reply.model, prompt_version=input.prompt_version,
                started_at=now - timedelta(milliseconds=reply.latency_ms), ended_at=now,
                stop_reason=reply.stop_reason, text=text, tool_use_ids=[b.id for b in reply.message.tool_uses()],
                usage=reply.usage, cost_usd=turn_cost, latency_ms=reply.latency_ms, attempt=reply.attempt,
                context_dropped=reply.context_dropped, transcript_resends=self._resent,
                temporal_actions=state.unattributed_actions,
            )
        )  # fmt: skip
        state.unattributed_actions = 0
        self.session.meter.to_next_turn = False  # the turn collects what follows, up to the next call
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

    def check_budgets(self) -> None:
        """Stop as soon as a response passes the token or cost budget, before its tools run."""
        limits, state = self.session.input.limits, self.state
        if state.usage.total() > limits.token_budget:
            raise Finished("stopped", stop_reason="token_budget")
        if limits.cost_budget_usd is not None and (state.cost_usd or 0) > limits.cost_budget_usd:
            raise Finished("stopped", stop_reason="cost_budget")
