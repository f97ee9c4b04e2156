"""Running one model response's tool calls: approval, pause, policies, results.

A mixin of `AgentWorkflow`: it uses the session state that the workflow holds.
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
)

with workflow.unsafe.imports_passed_through():
    from activities.types import (
        Message,
        ToolOutcome,
        ToolRequest,
        ToolResultBlock,
        ToolSpec,
        ToolUseBlock,
    )
    from workflows.types import (
        ToolCallRecord,
    )

from workflows._shared import SETTLED, _ContinueAsNew, _describe_failure, _short, _was_cancelled

TOOL_START_TO_CLOSE = timedelta(minutes=10)
HEARTBEAT_TIMEOUT = timedelta(seconds=10)
LOCAL_TIMEOUT = timedelta(seconds=30)
LOCAL_TOOL_TIMEOUT = timedelta(seconds=30)
REPEAT_NOTE_AT = 3
RETRY_IDEMPOTENT_TOOL = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30), maximum_attempts=5
)
RUN_ONCE = RetryPolicy(maximum_attempts=1)


class ToolCalls:
    async def _run_tools(self, uses: list[ToolUseBlock]) -> None:
        """Run one response's calls concurrently; their results go back in the model's order.

        Calls already settled (in an earlier run of this session) keep their results.
        """
        results = await asyncio.gather(*(self._settle(self.calls[u.id]) for u in uses))
        self._append(Message(role="user", content=list(results)), sent=False)
        self._changed()

    async def _settle(self, call: ToolCallRecord) -> ToolResultBlock:
        if call.status in SETTLED:
            return ToolResultBlock(
                tool_use_id=call.tool_use_id, content=call.output or "", is_error=call.is_error
            )
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
                    "check_tool_input",
                    request,
                    result_type=str | None,
                    start_to_close_timeout=LOCAL_TIMEOUT,
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
                return self._close_call(
                    call, "denied", f"denied by a person: {call.reason or 'no reason given'}"
                )
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
            "describe_tools",
            result_type=list[ToolSpec],
            start_to_close_timeout=LOCAL_TIMEOUT,
            summary="list the worker's tools",
        )
        if self.input.tools is not None:
            wanted = set(self.input.tools)
            specs = [s for s in specs if s.name in wanted]
        return specs
