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
    )
    from workflows import search
    from workflows.types import (
        FINAL_STATUSES,
        CancelRequest,
        Decision,
        PendingApproval,
        RunStatus,
        SessionHistory,
        SessionInput,
        SessionStatus,
        ToolCallRecord,
        TraceTurn,
    )

EVENT_TOPIC = "event"
TOOL_START_TO_CLOSE = timedelta(minutes=10)
HEARTBEAT_TIMEOUT = timedelta(seconds=10)
LOCAL_TIMEOUT = timedelta(seconds=30)
LOCAL_TOOL_TIMEOUT = timedelta(seconds=30)
REPEAT_NOTE_AT = 3


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


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _fmt_duration(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h"
    if seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    return f"{seconds:g}s"


@workflow.defn(name="AgentWorkflow")
class AgentWorkflow:
    @workflow.init
    def __init__(self, input: SessionInput) -> None:
        self.input = input
        self.session_id = workflow.info().workflow_id
        self.started_at = workflow.now()
        self.updated_at = self.started_at
        self.stream = WorkflowStream()
        self.events = self.stream.topic(EVENT_TOPIC)
        self.messages: list[Message] = [Message(role="user", content=[TextBlock(text=input.goal)])]
        self.unsent: list[Message] = list(self.messages)  # not yet in the transcript store
        self.transcript_ref: str | None = None
        self.specs: list[ToolSpec] = []
        self.calls: dict[str, ToolCallRecord] = {}
        self.trace: list[TraceTurn] = []
        self.repeats: dict[str, int] = {}
        self.steps = 0
        self.usage = Usage()
        self.cost_usd: float | None = 0.0 if input.price else None
        self.paused = False
        self.cancel_requested: str | None = None
        self.final: tuple[RunStatus, str | None, str | None] | None = None
        self.answer: str | None = None
        self._published_status: RunStatus | None = None
        self._indexed: tuple[Any, ...] | None = None

    # ---- the run ---------------------------------------------------------------------

    @workflow.run
    async def run(self, input: SessionInput) -> SessionStatus:
        self._changed()
        try:
            await self._run_with_limits()
        except asyncio.CancelledError:
            # The workflow itself was cancelled (the Temporal UI's Cancel button).
            self._finish("cancelled", error="cancelled from Temporal")
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self.snapshot()

    async def _run_with_limits(self) -> None:
        limits = self.input.limits
        loop = asyncio.create_task(self._loop())
        cancelled = asyncio.create_task(workflow.wait_condition(lambda: self.cancel_requested is not None))
        timeout = asyncio.create_task(
            workflow.sleep(
                timedelta(seconds=limits.timeout_seconds),
                summary=f"timeout {_fmt_duration(limits.timeout_seconds)}",
            )
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
                self._finish(outcome.status, outcome.stop_reason, outcome.error)
            elif outcome is not None:
                raise outcome
            return
        await self._stop_loop(loop)
        if self.cancel_requested is not None:
            self._finish("cancelled", error=self.cancel_requested or None)
        else:
            self._finish("stopped", stop_reason="timeout")

    async def _stop_loop(self, loop: asyncio.Task[None]) -> None:
        loop.cancel()
        try:
            await loop
        except (asyncio.CancelledError, _Finished):
            pass

    async def _loop(self) -> None:
        problem = self._check_input()
        if problem:
            raise _Finished("failed", error=problem)
        self.specs = await self._describe_tools()
        while True:
            await self._gate()
            if self.steps >= self.input.limits.max_steps:
                raise _Finished("stopped", stop_reason="max_steps")
            reply = await self._call_model()
            self._record_reply(reply)
            self._check_budgets(reply)
            stop = reply.stop_reason
            if stop == "tool_use" and reply.message.tool_uses():
                await self._run_tools(reply.message.tool_uses())
            elif stop == "pause_turn":
                continue
            elif stop in ("end_turn", "stop_sequence", "tool_use"):
                raise _Finished("completed")
            elif stop in ("max_tokens", "refusal"):
                raise _Finished("stopped", stop_reason=stop)
            else:
                raise _Finished("stopped", stop_reason=stop or "unknown")

    def _check_input(self) -> str | None:
        limits = self.input.limits
        if limits.cost_budget_usd is not None and self.input.price is None:
            return f"a cost budget needs prices for model {self.input.model!r}, and there are none"
        return None

    async def _gate(self) -> None:
        """Wait while paused: nothing new starts until resume."""
        if self.paused:
            await workflow.wait_condition(lambda: not self.paused)

    # ---- the model -------------------------------------------------------------------

    async def _call_model(self) -> ModelReply:
        step = self.steps + 1
        request = ModelRequest(
            session_id=self.session_id,
            step=step,
            model=self.input.model,
            system=self.input.system,
            max_tokens=self.input.limits.max_tokens,
            tools=self.specs,
            transcript_ref=self.transcript_ref,
            new_messages=self.unsent,
            stream=self.input.stream,
        )
        try:
            reply = await self._model_activity(request)
        except ActivityError as err:
            if _was_cancelled(err):
                raise asyncio.CancelledError() from err
            if _error_type(err) != TRANSCRIPT_MISSING:
                raise _Finished("failed", error=_describe_failure(err, "model call")) from err
            # The store lost the transcript: send it whole, once.
            request = request.model_copy(update={"transcript_ref": None, "new_messages": self.messages})
            try:
                reply = await self._model_activity(request)
            except ActivityError as err2:
                raise _Finished("failed", error=_describe_failure(err2, "model call")) from err2
        self.transcript_ref = reply.transcript_ref
        self.unsent = []
        return reply

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
        results = await asyncio.gather(*(self._run_call(self.calls[u.id]) for u in uses))
        self._append(Message(role="user", content=list(results)), sent=False)
        self._changed()

    async def _run_call(self, call: ToolCallRecord) -> ToolResultBlock:
        key = f"{call.name}:{json.dumps(call.input, sort_keys=True, ensure_ascii=False)}"
        self.repeats[key] = call.repeats = self.repeats.get(key, 0) + 1
        spec = next((s for s in self.specs if s.name == call.name), None)
        self._publish("tool_call", tool_use_id=call.tool_use_id, name=call.name, input=call.input)
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
        if spec.requires_approval:
            problem = await workflow.execute_local_activity(
                "check_tool_input", request, result_type=str | None, start_to_close_timeout=LOCAL_TIMEOUT
            )
            if problem:
                return self._close_call(call, "error", problem)
            call.status = "waiting_approval"
            self._changed()
            self._publish("approval", tool_use_id=call.tool_use_id, name=call.name, input=call.input)
            await workflow.wait_condition(
                lambda: call.status != "waiting_approval",
                timeout_summary=f"approval wait for {call.name}",
            )
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
            "describe_tools", result_type=list[ToolSpec], start_to_close_timeout=LOCAL_TIMEOUT
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
            call.status = "pending"
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

    # ---- control: updates (answer the caller) ----------------------------------------

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
