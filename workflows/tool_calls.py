"""One response's tool calls: the approval a call may wait for, its policy, its activity,
and the result the model gets back.

`ToolRunner` acts on the session it is given. A call goes pending -> (waiting_approval
-> pending | denied) -> running -> done | error | unknown | cancelled; calls that already
have their result (from an earlier run of the session) keep it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from activities.mcp import McpActivities
    from activities.mcp._errors import UNAVAILABLE as MCP_SERVER_UNAVAILABLE
    from activities.memory import MEMORY_TOOLS
    from activities.memory import NAMES as MEMORY_NAMES
    from activities.tools import ToolActivities
    from activities.wire import Message, ToolOutcome, ToolRequest, ToolResultBlock, ToolSpec, ToolUseBlock
    from workflows import options
    from workflows.actions import record_decision
    from workflows.contract import TIMED_OUT, CallStatus, ToolCallRecord, memory_scope
    from workflows.events import ApprovalRequested, ToolCallEnded, ToolCallStarted
    from workflows.loops import STOP_REASON, Loops
    from workflows.messages import INTERRUPTED
    from workflows.outcomes import Finished, HandOver
    from workflows.records import SLEEP, WAIT_FOR_EVENT, PendingApproval
    from workflows.session import Session, fmt_duration, short
    from workflows.state import SETTLED
    from workflows.subagents import SubAgents
    from workflows.temporal import EndedWhileStopping, Failed, describe_failure
    from workflows.typed_output import FINAL_ANSWER, TypedAnswers
    from workflows.waits import Waits, check_input, is_wait, with_waits


class ToolRunner:
    def __init__(
        self,
        session: Session,
        subagents: SubAgents,
        wants_handover: Callable[[], bool],
        typed: TypedAnswers | None = None,
    ) -> None:
        self.session = session
        self.typed = typed  # a session with an output schema: `final_answer` is checked here
        self.state = session.state
        self.subagents = subagents
        self._wants_handover = wants_handover
        self._siblings = 0  # sub-agent calls in the response being run: they share the budget
        # Set by a session that stops with calls in flight and lets an at-most-once call end
        # (workflows/stopping.py); never in a replay of a history recorded before.
        self.stopping = False
        self.waits = Waits(session, self._idle_enough_to_hand_over)
        self.loops = Loops(session.state, session.input.loop_policy)

    async def run_all(self, uses: list[ToolUseBlock]) -> None:
        """Run one response's calls concurrently; their results go back in the model's order."""
        if (repeat := self.loops.stopping([self.state.calls[u.id] for u in uses])) is not None:
            self._close(repeat, "not_run", f"not run: the session stopped: {repeat.repeat_reason}")
            raise Finished("stopped", stop_reason=STOP_REASON)
        self._siblings = sum(1 for u in uses if (s := self.state.spec(u.name)) is not None and s.subagent)
        settling = [asyncio.ensure_future(self._settle(self.state.calls[u.id])) for u in uses]
        try:
            results = await asyncio.gather(*settling)
        except asyncio.CancelledError:
            if self.stopping:  # an at-most-once call ends, and is recorded, before the stop
                await workflow.wait(settling)
            raise
        self.state.append(Message(role="user", content=list(results)), sent=False)
        self.session.view.changed()

    async def _settle(self, call: ToolCallRecord) -> ToolResultBlock:
        if call.status in SETTLED:
            return ToolResultBlock(
                tool_use_id=call.tool_use_id, content=call.output or "", is_error=call.is_error
            )
        with self.session.temporal.tool_call_span(call):
            return await self._settle_open(call)

    async def _settle_open(self, call: ToolCallRecord) -> ToolResultBlock:
        if call.status == "pending" and call.ended_at is None and call.started_at is None:
            self.loops.count(call)
            self.session.view.publish(
                ToolCallStarted(tool_use_id=call.tool_use_id, name=call.name, input=call.input)
            )
        if self.typed is not None and call.name == FINAL_ANSWER:
            valid, content = self.typed.take_call(call)
            return self._close(call, "done" if valid else "error", content)
        spec = self.state.spec(call.name)
        if spec is None:
            names = ", ".join(s.name for s in self.state.specs) or "none"
            return self._close(call, "error", f"unknown tool {call.name!r}; available tools: {names}")
        call.policy = spec.policy
        call.requires_approval = self._needs_approval(call, spec) or self.loops.asks(call)
        call.approval = "required" if call.requires_approval else "auto"
        if call.requires_approval and not call.approved:
            refused = await self._approval(call)
            if refused is not None:
                return refused
        await wait_while_paused(self.session)
        return await self._execute(call, spec)

    def interrupted(self) -> None:
        """After an interrupt cut the calls short: a call waiting for approval is denied, and
        one not yet started does not run (each with `INTERRUPTED` as its reason)."""
        for use in self.state.unanswered_uses():
            call = self.state.calls[use.id]
            if call.status == "waiting_approval":
                record_decision(self.session, call, approved=False, reason=INTERRUPTED, decided_by=None)
                self._close(call, "denied", f"denied: {INTERRUPTED}")
            elif call.status == "running":  # its task was cancelled before it could say so
                self._close(call, "cancelled", f"cancelled: {INTERRUPTED}")
            elif call.status not in SETTLED:
                self._close(call, "not_run", f"not run: {INTERRUPTED}")

    def _needs_approval(self, call: ToolCallRecord, spec: ToolSpec) -> bool:
        """The agent's rule for this tool ("always", "never"), else the tool's own."""
        agent = self.session.input.agent
        rule = agent.approval_rule(call.name) if agent is not None else "tool"
        return spec.requires_approval if rule == "tool" else rule == "always"

    def _request(self, call: ToolCallRecord) -> ToolRequest:
        return ToolRequest(
            session_id=self.session.id,
            user_id=self.session.input.user_id,
            tool_use_id=call.tool_use_id,
            name=call.name,
            input=call.run_input(),
            max_output=self.session.input.limits.max_tool_output,
            memory_scope=memory_scope(self.session.input) if call.name in MEMORY_NAMES else None,
        )

    # ---- approval ----------------------------------------------------------------------

    async def _approval(self, call: ToolCallRecord) -> ToolResultBlock | None:
        """Validate the input, then wait for a person; the result if the call will not run."""
        if call.status != "waiting_approval":
            problem = await self._check_input(call)
            if problem:
                return self._close(call, "error", problem)
            call.status = "waiting_approval"
            if (timeout := self.session.input.limits.approval_timeout_seconds) is not None:
                call.deadline = workflow.now() + timedelta(seconds=timeout)
            self.session.view.changed()
            self.session.view.publish(
                ApprovalRequested(
                    tool_use_id=call.tool_use_id, name=call.name, input=call.input, reason=call.repeat_reason
                )
            )
            self.session.notifier.approval_requested(
                PendingApproval(
                    tool_use_id=call.tool_use_id, name=call.name, input=call.input, reason=call.repeat_reason
                )
            )
        with self.session.temporal.approval_span(call):
            await self._wait_for_decision(call)
        if call.status == "waiting_approval":
            raise HandOver()  # a long wait: the next run waits on
        if call.status == "denied" and call.decided_by == TIMED_OUT:
            return self._close(call, "denied", f"denied: {call.reason}")
        if call.status == "denied":
            return self._close(call, "denied", f"denied by a person: {call.reason or 'no reason given'}")
        return None

    async def _wait_for_decision(self, call: ToolCallRecord) -> None:
        """Wait for a decision; past the call's approval deadline (if any) deny it."""
        decided = lambda: call.status != "waiting_approval" or self._idle_enough_to_hand_over()  # noqa: E731
        temporal = self.session.temporal
        if call.deadline is None:
            await temporal.wait(decided)
            return
        left = (call.deadline - workflow.now()).total_seconds()
        if left > 0:
            if decided():  # decided, or the session hands over: the next run waits on
                return
            timeout = self.session.input.limits.approval_timeout_seconds or left
            summary = f"approval wait for {call.name}, at most {fmt_duration(timeout)}"
            if await temporal.wait(decided, timeout=left, summary=summary):
                return
        if call.status == "waiting_approval":
            self._deny_by_timeout(call)

    def _deny_by_timeout(self, call: ToolCallRecord) -> None:
        timeout = self.session.input.limits.approval_timeout_seconds or 0
        reason = f"no decision within {fmt_duration(timeout)}"
        record_decision(self.session, call, approved=False, reason=reason, decided_by=TIMED_OUT)

    async def _check_input(self, call: ToolCallRecord) -> str | None:
        """The input checked before anyone is asked: the error text, or None."""
        spec = self.state.spec(call.name)
        if spec is None or spec.subagent is not None:
            return None
        if is_wait(spec):
            return check_input(call)
        temporal, summary = self.session.temporal, f"check the input of {call.name}"
        if spec.server is None:
            return await temporal.local_activity(
                ToolActivities.check_tool_input,
                [self._request(call)],
                options.check_tool_input(),
                summary=summary,
            )
        try:
            return await temporal.activity(
                McpActivities.check_mcp_input,
                self._request(call),
                options.check_mcp_input(spec),
                summary=summary,
            )
        except Failed as err:
            return f"the input of {call.name} could not be checked: {err.describe('the check')}"

    def _idle_enough_to_hand_over(self) -> bool:
        """Continue as new during approval waits only when no tool call is in flight."""
        if not self._wants_handover():
            return False
        return all(
            c.status in (*SETTLED, "waiting_approval") or c.in_wait(SLEEP) or c.in_wait(WAIT_FOR_EVENT)
            for c in self.state.calls.values()
        )

    # ---- running -----------------------------------------------------------------------

    async def _execute(self, call: ToolCallRecord, spec: ToolSpec) -> ToolResultBlock:
        if is_wait(spec):
            return await self._execute_wait(call)
        call.status, call.started_at = "running", workflow.now()
        self.session.view.changed()
        if spec.subagent is not None:
            return await self._execute_subagent(call, spec)
        try:
            outcome = await self._activity(
                spec, self._request(call), f"tool {call.name} {short(call.input, 60)}"
            )
        except Failed as err:
            return self._close(call, *_failed(spec, err))
        except asyncio.CancelledError:
            self._close(call, "cancelled", "cancelled before it finished")
            raise
        except EndedWhileStopping as ended:
            # An at-most-once call that the stopping session let end: its outcome, then the stop.
            if isinstance(ended.outcome, Failed):
                self._close(call, *_failed(spec, ended.outcome))
            else:
                self._done(call, ended.outcome)
            raise asyncio.CancelledError() from None
        return self._done(call, outcome)

    def _done(self, call: ToolCallRecord, outcome: ToolOutcome) -> ToolResultBlock:
        call.output_ref = outcome.content_ref
        return self._close(
            call, "error" if outcome.is_error else "done", self._content(call, outcome), outcome.duration_ms
        )

    async def _execute_wait(self, call: ToolCallRecord) -> ToolResultBlock:
        """`sleep` or `wait_for_event`: a wait in the workflow (a new run takes it up again)."""
        try:
            content, is_error = await self.waits.run(call)
        except asyncio.CancelledError:
            self._close(call, "cancelled", "cancelled before it finished")
            raise
        return self._close(call, "error" if is_error else "done", content)

    async def _execute_subagent(self, call: ToolCallRecord, spec: ToolSpec) -> ToolResultBlock:
        try:
            content, is_error = await self.subagents.run(call, spec, self._siblings)
        except asyncio.CancelledError:
            self._close(call, "cancelled", "cancelled before it finished")
            raise
        except ChildWorkflowError as err:
            content, is_error = f"the sub-agent failed: {describe_failure(err, 'sub-agent')}", True
        outcome = ToolOutcome(content=content, is_error=is_error)
        return self._close(call, "error" if is_error else "done", self._content(call, outcome))

    def _content(self, call: ToolCallRecord, outcome: ToolOutcome) -> str:
        """What the model reads: the output, with notes on an edited input and on repeats."""
        content = outcome.content
        if call.approved_input is not None:
            edited = json.dumps(call.approved_input, ensure_ascii=False, sort_keys=True)
            content = f"[a person edited the input before approving; the tool ran with {edited}]\n{content}"
        return content + self.loops.ended(call, outcome.content, outcome.is_error)

    async def _activity(self, spec: ToolSpec, request: ToolRequest, summary: str) -> ToolOutcome:
        temporal = self.session.temporal
        if _runs_locally(spec):
            return await temporal.local_activity(
                ToolActivities.run_tool, [request], options.run_local_tool(spec), summary=summary
            )
        method = McpActivities.call_mcp_tool if spec.server is not None else ToolActivities.run_tool
        call_options = options.call_mcp_tool(spec) if spec.server is not None else options.run_tool(spec)
        if spec.policy == "at_most_once":  # never interrupted by a session that stops
            return await temporal.activity_to_its_end(
                method, request, call_options, summary=summary, lets_it_end=lambda: self.stopping
            )
        return await temporal.activity(method, request, call_options, summary=summary)

    def _close(
        self, call: ToolCallRecord, status: CallStatus, content: str, duration_ms: int | None = None
    ) -> ToolResultBlock:
        now = workflow.now()
        call.status, call.output, call.ended_at = status, content, now
        call.is_error = status != "done"
        if duration_ms is None and call.started_at is not None:
            duration_ms = int((now - call.started_at).total_seconds() * 1000)
        call.duration_ms = duration_ms
        self.session.view.publish(
            ToolCallEnded(
                tool_use_id=call.tool_use_id, name=call.name, status=status,
                output=short(content, 500), duration_ms=duration_ms,
            )
        )  # fmt: skip
        self.session.view.changed()
        return ToolResultBlock(tool_use_id=call.tool_use_id, content=content, is_error=call.is_error)


def _runs_locally(spec: ToolSpec) -> bool:
    return spec.server is None and spec.local and spec.policy != "at_most_once"


def _failed(spec: ToolSpec, err: Failed) -> tuple[CallStatus, str]:
    """The status and result of a call whose activity failed (a crash, a timeout)."""
    why = err.describe("tool call")
    if spec.policy == "at_most_once" and err.error_type != MCP_SERVER_UNAVAILABLE:
        # It was started once and may have done its work before it was interrupted.
        return (
            "unknown",
            f"outcome unknown: the call was interrupted ({why}); it may have taken effect, and it will not be run again",
        )
    return "error", f"tool call failed: {why}"


async def wait_while_paused(session: Session) -> None:
    """Nothing new starts until resume."""
    state = session.state
    if state.paused:
        await session.temporal.wait(lambda: not state.paused)


async def list_mcp_tools(session: Session) -> list[ToolSpec]:
    """The tools of the agent's MCP servers, as `SERVER__TOOL` specs (recorded with the rest)."""
    agent = session.input.agent
    if agent is None or not agent.mcp_servers:
        return []
    return await session.temporal.activity(
        McpActivities.list_mcp_tools,
        agent.mcp_servers,
        options.list_mcp_tools(),
        summary=f"list the tools of {', '.join(agent.mcp_servers)}",
    )


async def describe_tools(session: Session) -> list[ToolSpec]:
    """The worker's tools, narrowed to the session's list."""
    specs = await session.temporal.local_activity(
        ToolActivities.describe_tools, [], options.describe_tools(), summary="list the worker's tools"
    )
    if session.input.tools is not None:
        wanted = set(session.input.tools)
        specs = [s for s in specs if s.name in wanted]
    # The memory tools only when named, like the waits: the worker runs them, never lists them.
    memory = [
        t.spec for t in MEMORY_TOOLS if session.input.tools is not None and t.name in session.input.tools
    ]
    return with_waits([s for s in specs if s.name not in MEMORY_NAMES], session.input.tools) + memory
