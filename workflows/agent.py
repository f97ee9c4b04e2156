"""`AgentWorkflow`: one agent session, one workflow.

The loop: call the model, record its response, run the tools it asked for (concurrently,
results in the model's order as one user turn), repeat until it answers or a limit stops
it. Every way a run ends is a status with a reason; the workflow returns normally.

Determinism: no I/O, no environment, no wall clock but `workflow.now()`. The run status
is derived from the state (final status, paused, waiting approvals), never kept twice.
Control arrives as signals (fire and forget) or as updates with validators (the client's
path: it learns whether the decision was recorded).
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
)

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError
    from temporalio.contrib.workflow_streams import WorkflowStream

    from activities.errors import TRANSCRIPT_MISSING
    from activities.types import (
        Message,
        ModelReply,
        ModelRequest,
        TextBlock,
        ToolResultBlock,
        ToolUseBlock,
        Usage,
        tool_specs_text,
    )
    from workflows.types import (
        Carried,
        RunStatus,
        SessionInput,
        SessionStatus,
        ToolCallRecord,
        TraceTurn,
    )

from workflows._shared import (
    EVENT_TOPIC,
    _chat_goes_on,
    _ContinueAsNew,
    _describe_failure,
    _error_type,
    _Finished,
    _fmt_duration,
    _was_cancelled,
)
from workflows.control import SessionControl
from workflows.tool_calls import HEARTBEAT_TIMEOUT, ToolCalls


def model_retry_policy(attempts: int) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=60),
        maximum_attempts=attempts,
    )


# Input that does not validate (a start from the CLI or UI with bad JSON) fails the
# workflow with pydantic's message, instead of failing its first task over and over.
@workflow.defn(name="AgentWorkflow", failure_exception_types=[ValidationError])
class AgentWorkflow(ToolCalls, SessionControl):
    @workflow.init
    def __init__(self, input: SessionInput) -> None:
        self.input = input
        self.session_id = workflow.info().workflow_id
        self.updated_at = workflow.now()
        self.cancel_requested: str | None = None
        self.final: tuple[RunStatus, str | None, str | None] | None = None
        self._published_status: RunStatus | None = None
        self._indexed: tuple[Any, ...] | None = None
        self._indexed_at: datetime | None = None
        carried = input.carried
        self.stream = WorkflowStream(prior_state=carried.stream_state if carried else None)
        self.events = self.stream.topic(EVENT_TOPIC)
        if carried is None:
            goal = Message(role="user", content=[TextBlock(text=input.goal)])
            carried = Carried(
                started_at=workflow.now(), runs=0, messages=[goal], unsent=[goal], transcript_ref=None,
                specs=[], calls=[], trace=[], repeats={}, steps=0, usage=Usage(),
                cost_usd=0.0 if input.price else None, paused=False, idle=False, closing=False,
                queue=[], user_turns=1, answer=None, run_started_at=workflow.now(),
            )  # fmt: skip
        self.started_at = carried.started_at
        self.runs = carried.runs + 1
        self.messages = carried.messages
        self.unsent = carried.unsent  # not yet in the transcript store
        self.transcript_ref = carried.transcript_ref
        self.specs = carried.specs
        self.calls = {c.tool_use_id: c for c in carried.calls}
        self.trace = carried.trace
        self.repeats = carried.repeats
        self.steps = carried.steps
        self.steps_at_run_start = carried.steps
        self.usage = carried.usage
        self.cost_usd = carried.cost_usd
        self.paused = carried.paused
        self.idle = carried.idle  # a chat session between runs, waiting for input
        self.closing = carried.closing
        self.queue = carried.queue
        self.user_turns = carried.user_turns
        self.answer = carried.answer
        self.run_started_at = carried.run_started_at
        self._tools_sent = False  # each run sends the tool specs inline once

    # ---- the session: runs, and in a chat the waits between them -----------------------

    @workflow.run
    async def run(self, input: SessionInput) -> SessionStatus:
        self._changed()
        try:
            await self._session()
        except asyncio.CancelledError:
            # The workflow itself was cancelled (the Temporal UI's Cancel button).
            self._finish("cancelled", error="cancelled from Temporal")
        except _ContinueAsNew:
            await self._continue_as_new()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self.snapshot()

    async def _session(self) -> None:
        problem = self._check_input()
        if problem:
            self._finish("failed", error=problem)
            return
        if not self.specs:
            self.specs = await self._describe_tools()
        while True:
            if not self.idle:
                ended = await self._run_with_limits()
                if not (self.input.chat and _chat_goes_on(ended)):
                    self._finish(ended.status, ended.stop_reason, ended.error)
                    return
                self.idle = True
                self._publish(
                    "answered", status=ended.status, stop_reason=ended.stop_reason, answer=self.answer
                )
                self._changed()
            if self.queue:
                self._take_message(self.queue.pop(0))
                continue
            if self.closing:
                self._finish("completed")
                return
            if self._wants_continue_as_new():
                raise _ContinueAsNew()
            try:
                await workflow.wait_condition(
                    lambda: bool(self.queue) or self.closing or self.cancel_requested is not None
                    or self._wants_continue_as_new(),
                    timeout=timedelta(seconds=self.input.idle_timeout_seconds),
                    timeout_summary=f"idle {_fmt_duration(self.input.idle_timeout_seconds)}",
                )  # fmt: skip
            except asyncio.TimeoutError:
                self._finish("completed", stop_reason="idle_timeout")
                return
            if self.cancel_requested is not None:
                self._finish("cancelled", error=self.cancel_requested or None)
                return

    async def _run_with_limits(self) -> _Finished:
        """One run: the loop until an answer, a limit, a failure or a cancel."""
        limits = self.input.limits
        if self.run_started_at is None:
            self.run_started_at = workflow.now()
        elapsed = (workflow.now() - self.run_started_at).total_seconds()
        remaining = max(0.001, limits.timeout_seconds - elapsed)
        loop = asyncio.create_task(self._loop())
        cancelled = asyncio.create_task(workflow.wait_condition(lambda: self.cancel_requested is not None))
        timeout = asyncio.create_task(
            workflow.sleep(remaining, summary=f"timeout {_fmt_duration(limits.timeout_seconds)}")
        )
        try:
            await workflow.wait([loop, cancelled, timeout], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            await self._stop_loop(loop)
            raise
        finally:
            cancelled.cancel()
            timeout.cancel()
        if loop.done():
            outcome = loop.exception()
            if isinstance(outcome, _Finished):
                self.run_started_at = None
                return outcome
            raise outcome or RuntimeError("the loop ended without an outcome")
        await self._stop_loop(loop)
        self.run_started_at = None
        if self.cancel_requested is not None:
            return _Finished("cancelled", error=self.cancel_requested or None)
        return _Finished("stopped", stop_reason="timeout")

    async def _stop_loop(self, loop: asyncio.Task[None]) -> None:
        loop.cancel()
        try:
            await loop
        except (asyncio.CancelledError, _Finished, _ContinueAsNew):
            pass

    async def _loop(self) -> None:
        while True:
            await self._gate()
            uses = self._unanswered_uses()
            if uses:
                await self._run_tools(uses)
                continue
            if self._wants_continue_as_new():
                raise _ContinueAsNew()
            if self.steps >= self.input.limits.max_steps:
                raise _Finished("stopped", stop_reason="max_steps")
            reply = await self._call_model()
            self._record_reply(reply)
            self._check_budgets(reply)
            stop = reply.stop_reason
            if stop == "tool_use" and reply.message.tool_uses():
                continue  # its tools run at the top of the loop
            if stop == "pause_turn":
                continue
            if stop in ("end_turn", "stop_sequence", "tool_use"):
                raise _Finished("completed")
            if stop in ("max_tokens", "refusal"):
                raise _Finished("stopped", stop_reason=stop)
            raise _Finished("stopped", stop_reason=stop or "unknown")

    def _unanswered_uses(self) -> list[ToolUseBlock]:
        """The tool calls of the last response, if their results are not in yet."""
        last = self.messages[-1]
        return last.tool_uses() if last.role == "assistant" else []

    def _check_input(self) -> str | None:
        limits = self.input.limits
        if limits.cost_budget_usd is not None and self.input.price is None:
            return f"a cost budget needs prices for model {self.input.model!r}, and there are none"
        return None

    async def _gate(self) -> None:
        """Wait while paused: nothing new starts until resume."""
        if self.paused:
            await workflow.wait_condition(lambda: not self.paused)

    # ---- chat ------------------------------------------------------------------------

    def _take_message(self, text: str) -> None:
        """Start the next run with a user message; calls left unanswered get 'not run' results."""
        content: list[Any] = []
        for use in self._unanswered_uses():
            call = self.calls[use.id]
            reason = call.output or "not run: the run ended before it"
            if call.status in ("pending", "waiting_approval"):
                call.status, call.is_error, call.output = "not_run", True, reason
            content.append(ToolResultBlock(tool_use_id=use.id, content=reason, is_error=True))
        content.append(TextBlock(text=text))
        self._append(Message(role="user", content=content), sent=False)
        self.user_turns += 1
        self.idle = False
        self.run_started_at = workflow.now()
        self._publish("user_message", turn=self.user_turns, text=text)
        self._changed()

    # ---- continue-as-new ---------------------------------------------------------------

    def _wants_continue_as_new(self) -> bool:
        if workflow.info().is_continue_as_new_suggested():
            return True
        return self.steps - self.steps_at_run_start >= self.input.limits.continue_as_new_after_steps

    async def _continue_as_new(self) -> None:
        """Hand the whole state to a new run of the same session: no activity is in flight."""
        self.stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._publish("continued", run=self.runs + 1, steps=self.steps)
        carried = Carried(
            started_at=self.started_at, runs=self.runs, messages=self.messages, unsent=self.unsent,
            transcript_ref=self.transcript_ref, specs=self.specs, calls=list(self.calls.values()),
            trace=self.trace, repeats=self.repeats, steps=self.steps, usage=self.usage,
            cost_usd=self.cost_usd, paused=self.paused, idle=self.idle, closing=self.closing,
            queue=self.queue, user_turns=self.user_turns, answer=self.answer,
            run_started_at=self.run_started_at, stream_state=self.stream.get_state(),
        )  # fmt: skip
        workflow.continue_as_new(self.input.model_copy(update={"carried": carried}))

    # ---- the model -------------------------------------------------------------------

    async def _call_model(self) -> ModelReply:
        step = self.steps + 1
        tools_ref = tool_specs_text(self.specs)[1]
        request = ModelRequest(
            session_id=self.session_id,
            step=step,
            model=self.input.model,
            system=self.input.system,
            max_tokens=self.input.limits.max_tokens,
            tools=None if self._tools_sent else self.specs,
            tools_ref=tools_ref,
            transcript_ref=self.transcript_ref,
            new_messages=[self._by_reference(m) for m in self.unsent],
            stream=self.input.stream,
            context_tokens=self.input.limits.context_tokens,
            summarize_dropped=self.input.summarize_dropped,
        )
        try:
            reply = await self._model_activity(request)
        except ActivityError as err:
            if _was_cancelled(err):
                raise asyncio.CancelledError() from err
            if _error_type(err) != TRANSCRIPT_MISSING:
                raise _Finished("failed", error=_describe_failure(err, "model call")) from err
            # The store lost the transcript: send it whole, once.
            request = request.model_copy(
                update={"transcript_ref": None, "new_messages": self.messages, "tools": self.specs}
            )
            try:
                reply = await self._model_activity(request)
            except ActivityError as err2:
                raise _Finished("failed", error=_describe_failure(err2, "model call")) from err2
        self.transcript_ref = reply.transcript_ref
        self.unsent = []
        self._tools_sent = True
        return reply

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
        call = self.calls.get(block.tool_use_id)
        return call.output_ref if call is not None and call.output == block.content else None

    async def _model_activity(self, request: ModelRequest) -> ModelReply:
        return await workflow.execute_activity(
            "call_model",
            request,
            result_type=ModelReply,
            start_to_close_timeout=timedelta(seconds=self.input.limits.model_timeout_seconds),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=model_retry_policy(self.input.limits.model_attempts),
            summary=f"model call {request.step} ({request.model})",
        )

    def _record_reply(self, reply: ModelReply) -> None:
        now = workflow.now()
        self.steps += 1
        self.usage = self.usage + reply.usage
        turn_cost = self.input.price.cost(reply.usage) if self.input.price else None
        if turn_cost is not None and self.cost_usd is not None:
            self.cost_usd += turn_cost
        self._append(reply.message, sent=True)
        text = reply.message.text()
        if text:
            self.answer = text
        self.trace.append(
            TraceTurn(
                step=self.steps,
                model=reply.model,
                prompt_version=self.input.prompt_version,
                started_at=now - timedelta(milliseconds=reply.latency_ms),
                ended_at=now,
                stop_reason=reply.stop_reason,
                text=text,
                tool_use_ids=[b.id for b in reply.message.tool_uses()],
                usage=reply.usage,
                cost_usd=turn_cost,
                latency_ms=reply.latency_ms,
                attempt=reply.attempt,
                context_dropped=reply.context_dropped,
            )
        )
        for block in reply.message.tool_uses():
            self.calls[block.id] = ToolCallRecord(
                tool_use_id=block.id, step=self.steps, name=block.name, input=block.input
            )
        self._publish(
            "turn",
            step=self.steps,
            text=text,
            stop_reason=reply.stop_reason,
            usage=self.usage.model_dump(),
            cost_usd=self.cost_usd,
            attempt=reply.attempt,
        )
        self._changed()

    def _check_budgets(self, reply: ModelReply) -> None:
        limits = self.input.limits
        reason = None
        if self.usage.total() > limits.token_budget:
            reason = "token_budget"
        elif limits.cost_budget_usd is not None and (self.cost_usd or 0) > limits.cost_budget_usd:
            reason = "cost_budget"
        if reason is not None:
            raise _Finished("stopped", stop_reason=reason)
