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
import json
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    RetryState,
    TimeoutError,
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
        ToolOutcome,
        ToolRequest,
        ToolResultBlock,
        ToolSpec,
        ToolUseBlock,
        Usage,
        tool_specs_text,
    )
    from workflows import search
    from workflows.types import (
        FINAL_STATUSES,
        CancelRequest,
        Carried,
        Decision,
        PendingApproval,
        RunStatus,
        SessionHistory,
        SessionInput,
        SessionStatus,
        ToolCallRecord,
        TraceTurn,
        UserMessage,
    )

EVENT_TOPIC = "event"
TOOL_START_TO_CLOSE = timedelta(minutes=10)
HEARTBEAT_TIMEOUT = timedelta(seconds=10)
LOCAL_TIMEOUT = timedelta(seconds=30)
LOCAL_TOOL_TIMEOUT = timedelta(seconds=30)
REPEAT_NOTE_AT = 3
SETTLED = ("done", "error", "denied", "cancelled", "not_run")


def model_retry_policy(attempts: int) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=60),
        maximum_attempts=attempts,
    )


RETRY_IDEMPOTENT_TOOL = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30), maximum_attempts=5
)
RUN_ONCE = RetryPolicy(maximum_attempts=1)


class _Finished(Exception):
    """Raised inside the loop to end the run with a status."""

    def __init__(self, status: RunStatus, stop_reason: str | None = None, error: str | None = None):
        super().__init__(status)
        self.status, self.stop_reason, self.error = status, stop_reason, error


class _ContinueAsNew(Exception):
    """Raised at a safe point to hand the session to a new run."""


def _chat_goes_on(ended: _Finished) -> bool:
    """A chat waits for the next message after an answer, a cut answer or a refusal."""
    return ended.status == "completed" or ended.stop_reason in ("max_tokens", "refusal")


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _fmt_duration(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h"
    if seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    return f"{seconds:g}s"


# Input that does not validate (a start from the CLI or UI with bad JSON) fails the
# workflow with pydantic's message, instead of failing its first task over and over.
@workflow.defn(name="AgentWorkflow", failure_exception_types=[ValidationError])
class AgentWorkflow:
    @workflow.init
    def __init__(self, input: SessionInput) -> None:
        self.input = input
        self.session_id = workflow.info().workflow_id
        self.updated_at = workflow.now()
        self.cancel_requested: str | None = None
        self.final: tuple[RunStatus, str | None, str | None] | None = None
        self._published_status: RunStatus | None = None
        self._indexed: tuple[Any, ...] | None = None
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
                self._publish("answered", status=ended.status, stop_reason=ended.stop_reason, answer=self.answer)
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

    # ---- tools -----------------------------------------------------------------------

    async def _run_tools(self, uses: list[ToolUseBlock]) -> None:
        """Run one response's calls concurrently; their results go back in the model's order.

        Calls already settled (in an earlier run of this session) keep their results.
        """
        results = await asyncio.gather(*(self._settle(self.calls[u.id]) for u in uses))
        self._append(Message(role="user", content=list(results)), sent=False)
        self._changed()

    async def _settle(self, call: ToolCallRecord) -> ToolResultBlock:
        if call.status in SETTLED:
            return ToolResultBlock(tool_use_id=call.tool_use_id, content=call.output or "", is_error=call.is_error)
        return await self._run_call(call)

    async def _run_call(self, call: ToolCallRecord) -> ToolResultBlock:
        if call.status == "pending" and call.ended_at is None and call.started_at is None:
            key = f"{call.name}:{json.dumps(call.input, sort_keys=True, ensure_ascii=False)}"
            self.repeats[key] = call.repeats = self.repeats.get(key, 0) + 1
            self._publish("tool_call", tool_use_id=call.tool_use_id, name=call.name, input=call.input)
        spec = next((s for s in self.specs if s.name == call.name), None)
        if spec is None:
            names = ", ".join(s.name for s in self.specs) or "none"
            return self._close_call(call, "error", f"unknown tool {call.name!r}; available tools: {names}")
        call.policy, call.requires_approval = spec.policy, spec.requires_approval
        request = ToolRequest(
            session_id=self.session_id,
            user_id=self.input.user_id,
            tool_use_id=call.tool_use_id,
            name=call.name,
            input=call.input,
            max_output=self.input.limits.max_tool_output,
        )
        if spec.requires_approval and not call.approved:
            if call.status != "waiting_approval":
                problem = await workflow.execute_local_activity(
                    "check_tool_input", request, result_type=str | None, start_to_close_timeout=LOCAL_TIMEOUT,
                    summary=f"check the input of {call.name}",
                )
                if problem:
                    return self._close_call(call, "error", problem)
                call.status = "waiting_approval"
                self._changed()
                self._publish("approval", tool_use_id=call.tool_use_id, name=call.name, input=call.input)
            decided = lambda: call.status != "waiting_approval" or self._idle_enough_to_continue_as_new()  # noqa: E731
            try:
                # The timer only names the wait in the Temporal UI: the run's timeout fires first.
                await workflow.wait_condition(
                    decided, timeout=self._approval_timer(), timeout_summary=f"approval wait for {call.name}"
                )
            except asyncio.TimeoutError:
                await workflow.wait_condition(decided)
            if call.status == "waiting_approval":
                raise _ContinueAsNew()  # a long wait: the next run waits on
            if call.status == "denied":
                return self._close_call(call, "denied", f"denied by a person: {call.reason or 'no reason given'}")
        await self._gate()
        call.status, call.started_at = "running", workflow.now()
        self._changed()
        try:
            outcome = await self._tool_activity(spec, request, f"tool {call.name} {_short(call.input, 60)}")
        except ActivityError as err:
            if _was_cancelled(err):
                self._close_call(call, "cancelled", "cancelled before it finished")
                raise asyncio.CancelledError() from err
            if spec.policy == "at_most_once":
                text = f"interrupted, not run again ({_describe_failure(err, 'tool call')})"
            else:
                text = f"tool call failed: {_describe_failure(err, 'tool call')}"
            return self._close_call(call, "error", text)
        except asyncio.CancelledError:
            self._close_call(call, "cancelled", "cancelled before it finished")
            raise
        content = outcome.content
        call.output_ref = outcome.content_ref
        if call.repeats >= REPEAT_NOTE_AT:
            content += (
                f"\n[note: this exact call ({call.name} with the same input) has now been made "
                f"{call.repeats} times; you are repeating yourself, try a different approach]"
            )
        return self._close_call(call, "error" if outcome.is_error else "done", content, outcome.duration_ms)

    async def _tool_activity(self, spec: ToolSpec, request: ToolRequest, summary: str) -> ToolOutcome:
        if spec.local and spec.policy != "at_most_once":
            return await workflow.execute_local_activity(
                "run_tool",
                request,
                result_type=ToolOutcome,
                start_to_close_timeout=LOCAL_TOOL_TIMEOUT,
                retry_policy=RETRY_IDEMPOTENT_TOOL,
                summary=summary,
            )
        return await workflow.execute_activity(
            "run_tool",
            request,
            result_type=ToolOutcome,
            start_to_close_timeout=TOOL_START_TO_CLOSE,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RUN_ONCE if spec.policy == "at_most_once" else RETRY_IDEMPOTENT_TOOL,
            summary=summary,
        )

    def _approval_timer(self) -> timedelta:
        started = self.run_started_at or workflow.now()
        left = self.input.limits.timeout_seconds - (workflow.now() - started).total_seconds()
        return timedelta(seconds=max(0.0, left) + 60)

    def _idle_enough_to_continue_as_new(self) -> bool:
        """Continue as new during approval waits only when no tool call is in flight."""
        if not self._wants_continue_as_new():
            return False
        return all(c.status in (*SETTLED, "waiting_approval") for c in self.calls.values())

    def _close_call(
        self, call: ToolCallRecord, status: Any, content: str, duration_ms: int | None = None
    ) -> ToolResultBlock:
        now = workflow.now()
        call.status, call.output, call.ended_at = status, content, now
        call.is_error = status != "done"
        if duration_ms is None and call.started_at is not None:
            duration_ms = int((now - call.started_at).total_seconds() * 1000)
        call.duration_ms = duration_ms
        self._publish(
            "tool_result",
            tool_use_id=call.tool_use_id,
            name=call.name,
            status=status,
            output=_short(content, 500),
            duration_ms=duration_ms,
        )
        self._changed()
        return ToolResultBlock(tool_use_id=call.tool_use_id, content=content, is_error=call.is_error)

    async def _describe_tools(self) -> list[ToolSpec]:
        specs = await workflow.execute_local_activity(
            "describe_tools", result_type=list[ToolSpec], start_to_close_timeout=LOCAL_TIMEOUT,
            summary="list the worker's tools",
        )
        if self.input.tools is not None:
            wanted = set(self.input.tools)
            specs = [s for s in specs if s.name in wanted]
        return specs

    # ---- state -----------------------------------------------------------------------

    def _append(self, message: Message, *, sent: bool) -> None:
        self.messages.append(message)
        if not sent:
            self.unsent.append(message)

    def _finish(self, status: RunStatus, stop_reason: str | None = None, error: str | None = None) -> None:
        if self.final is not None:
            return
        reason = stop_reason or error or status
        for call in self.calls.values():
            if call.status in ("pending", "waiting_approval"):
                call.status, call.is_error, call.output = "not_run", True, f"not run: {reason}"
            elif call.status == "running":
                call.status, call.is_error, call.output = "cancelled", True, f"cancelled: {reason}"
        self.final = (status, stop_reason, error)
        self._publish("end", status=status, stop_reason=stop_reason, error=error, answer=self.answer)
        self._changed()

    def run_status(self) -> RunStatus:
        if self.final is not None:
            return self.final[0]
        if self.paused:
            return "paused"
        if any(c.status == "waiting_approval" for c in self.calls.values()):
            return "waiting_approval"
        if self.idle:
            return "waiting_input"
        return "running"

    def _changed(self) -> None:
        self.updated_at = workflow.now()
        status = self.run_status()
        if status != self._published_status:
            self._published_status = status
            self._publish("status", status=status)
        workflow.set_current_details(self._details())
        self._index(status)

    def _index(self, status: RunStatus) -> None:
        """Keep the search attributes current; one upsert per change, none when nothing changed."""
        if not self.input.search_attributes:
            return
        waiting = sum(1 for c in self.calls.values() if c.status == "waiting_approval")
        values = (status, self.steps, self.usage.total(), waiting, self.input.user_id)
        if values == self._indexed:
            return
        self._indexed = values
        keys = (search.AGENT_STATUS, search.AGENT_STEPS, search.AGENT_TOKENS,
                search.AGENT_PENDING_APPROVALS, search.AGENT_USER)  # fmt: skip
        workflow.upsert_search_attributes([k.value_set(v) for k, v in zip(keys, values)])

    def _details(self) -> str:
        status = self.run_status()
        waiting = [c for c in self.calls.values() if c.status == "waiting_approval"]
        lines = [
            f"**status** {status}" + (f" ({self.final[1]})" if self.final and self.final[1] else ""),
            f"**step** {self.steps} of {self.input.limits.max_steps}",
            f"**tokens** {self.usage.total()}",
        ]
        if self.cost_usd is not None:
            lines.append(f"**cost** ${self.cost_usd:.4f}")
        if waiting:
            lines.append("**waiting for approval** " + ", ".join(f"{c.name} ({c.tool_use_id})" for c in waiting))
        if self.final and self.final[2]:
            lines.append(f"**error** {self.final[2]}")
        return "\n".join(lines)

    def _publish(self, kind: str, **fields: Any) -> None:
        self.events.publish({"type": kind, "at": workflow.now().isoformat(), **fields})

    # ---- queries ---------------------------------------------------------------------

    @workflow.query
    def status(self) -> SessionStatus:
        return self.snapshot()

    @workflow.query
    def history(self) -> SessionHistory:
        return SessionHistory(
            session_id=self.session_id,
            status=self.snapshot(),
            messages=self.messages,
            trace=self.trace,
            tool_calls=list(self.calls.values()),
        )

    def snapshot(self) -> SessionStatus:
        final = self.final or (self.run_status(), None, None)
        return SessionStatus(
            session_id=self.session_id,
            status=final[0],
            stop_reason=final[1],
            error=final[2],
            steps=self.steps,
            usage=self.usage,
            cost_usd=self.cost_usd,
            pending_approvals=[
                PendingApproval(tool_use_id=c.tool_use_id, name=c.name, input=c.input)
                for c in self.calls.values()
                if c.status == "waiting_approval"
            ],
            answer=self.answer,
            chat=self.input.chat,
            user_turns=self.user_turns,
            queued_messages=len(self.queue),
            runs=self.runs,
            model=self.input.model,
            user_id=self.input.user_id,
            limits=self.input.limits,
            started_at=self.started_at,
            updated_at=self.updated_at,
        )

    # ---- control: the shared rules ---------------------------------------------------

    def _refuse_if_finished(self, action: str) -> None:
        if self.final is not None:
            raise ValueError(f"session {self.session_id} is {self.final[0]}; cannot {action}")

    def _check_decision(self, decision: Decision, action: str) -> ToolCallRecord:
        self._refuse_if_finished(action)
        call = self.calls.get(decision.tool_use_id)
        if call is None:
            waiting = [c.tool_use_id for c in self.calls.values() if c.status == "waiting_approval"]
            hint = f"; waiting: {', '.join(waiting)}" if waiting else "; no call is waiting for approval"
            raise ValueError(f"no tool call {decision.tool_use_id!r} in session {self.session_id}{hint}")
        if call.status != "waiting_approval":
            if call.requires_approval and call.status != "pending":
                raise ValueError(f"tool call {call.tool_use_id} ({call.name}) was already decided: {call.status}")
            raise ValueError(f"tool call {call.tool_use_id} ({call.name}) is not waiting for approval")
        return call

    def _decide(self, decision: Decision, approved: bool) -> str:
        call = self.calls[decision.tool_use_id]
        if approved:
            call.status, call.approved = "pending", True
        else:
            call.status, call.reason = "denied", decision.reason
        self._publish(
            "decision", tool_use_id=call.tool_use_id, name=call.name, approved=approved, reason=decision.reason
        )
        self._changed()
        return f"{'approved' if approved else 'denied'} {call.name} ({call.tool_use_id})"

    def _set_paused(self, paused: bool) -> str:
        self.paused = paused
        self._changed()
        return "paused" if paused else "resumed"

    def _request_cancel(self, request: CancelRequest) -> str:
        if self.cancel_requested is None:
            self.cancel_requested = request.reason or ""
        return "cancelling"

    def _check_message(self, message: UserMessage) -> None:
        self._refuse_if_finished("take a message")
        if not self.input.chat:
            raise ValueError(f"session {self.session_id} is not a chat session (start one with --chat)")
        if self.closing:
            raise ValueError(f"session {self.session_id} is closing; it takes no more messages")

    def _queue_message(self, message: UserMessage) -> int:
        self.queue.append(message.text)
        self._changed()
        return self.user_turns + len(self.queue)

    def _check_close(self) -> None:
        self._refuse_if_finished("close")
        if not self.input.chat:
            raise ValueError(f"session {self.session_id} is not a chat session; use cancel to end it")
        if self.closing:
            raise ValueError(f"session {self.session_id} is already closing")

    def _close(self) -> str:
        self.closing = True
        self._changed()
        return "closing: the session ends after the messages already sent" if not self.idle or self.queue else "closed"

    # ---- control: updates (answer the caller) ----------------------------------------

    @workflow.update(name="send_message")
    def send_message(self, message: UserMessage) -> int:
        """Queue a user message; answers with its position among the user turns (the goal is 1)."""
        return self._queue_message(message)

    @send_message.validator
    def _validate_send(self, message: UserMessage) -> None:
        self._check_message(message)

    @workflow.update(name="close_session")
    def close_session(self) -> str:
        return self._close()

    @close_session.validator
    def _validate_close(self) -> None:
        self._check_close()

    @workflow.update(name="approve_call")
    def approve_call(self, decision: Decision) -> str:
        return self._decide(decision, approved=True)

    @approve_call.validator
    def _validate_approve(self, decision: Decision) -> None:
        self._check_decision(decision, "approve")

    @workflow.update(name="deny_call")
    def deny_call(self, decision: Decision) -> str:
        return self._decide(decision, approved=False)

    @deny_call.validator
    def _validate_deny(self, decision: Decision) -> None:
        self._check_decision(decision, "deny")

    @workflow.update(name="pause_session")
    def pause_session(self) -> str:
        return self._set_paused(True)

    @pause_session.validator
    def _validate_pause(self) -> None:
        self._refuse_if_finished("pause")
        if self.paused:
            raise ValueError(f"session {self.session_id} is already paused")

    @workflow.update(name="resume_session")
    def resume_session(self) -> str:
        return self._set_paused(False)

    @resume_session.validator
    def _validate_resume(self) -> None:
        self._refuse_if_finished("resume")
        if not self.paused:
            raise ValueError(f"session {self.session_id} is not paused")

    @workflow.update(name="cancel_session")
    def cancel_session(self, request: CancelRequest) -> str:
        return self._request_cancel(request)

    @cancel_session.validator
    def _validate_cancel(self, request: CancelRequest) -> None:
        self._refuse_if_finished("cancel")

    # ---- control: signals (fire and forget; invalid ones change nothing) -------------

    @workflow.signal
    def approve(self, decision: Decision) -> None:
        self._signal(lambda: (self._check_decision(decision, "approve"), self._decide(decision, True)))

    @workflow.signal
    def deny(self, decision: Decision) -> None:
        self._signal(lambda: (self._check_decision(decision, "deny"), self._decide(decision, False)))

    @workflow.signal
    def pause(self) -> None:
        self._signal(lambda: (self._refuse_if_finished("pause"), self._set_paused(True)))

    @workflow.signal
    def resume(self) -> None:
        self._signal(lambda: (self._refuse_if_finished("resume"), self._set_paused(False)))

    @workflow.signal
    def cancel(self, request: CancelRequest | None = None) -> None:
        self._signal(lambda: (self._refuse_if_finished("cancel"), self._request_cancel(request or CancelRequest())))

    @workflow.signal
    def send(self, message: UserMessage) -> None:
        self._signal(lambda: (self._check_message(message), self._queue_message(message)))

    @workflow.signal
    def close(self) -> None:
        self._signal(lambda: (self._check_close(), self._close()))

    def _signal(self, action: Any) -> None:
        try:
            action()
        except ValueError as err:
            workflow.logger.warning("ignored signal: %s", err)


def _was_cancelled(err: ActivityError) -> bool:
    return isinstance(err.cause, CancelledError)


def _error_type(err: ActivityError) -> str | None:
    cause = err.cause
    return cause.type if isinstance(cause, ApplicationError) else None


def _describe_failure(err: ActivityError, what: str) -> str:
    cause = err.cause
    if isinstance(cause, TimeoutError):
        return f"{what} timed out ({cause.type.name.lower().replace('_', '-')})"
    text = cause.message if isinstance(cause, ApplicationError) else f"{what} failed: {cause or err}"
    if err.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED:
        text += " (retries exhausted)"
    return text
