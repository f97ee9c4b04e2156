"""`AgentWorkflow`: one agent session, one workflow.

The loop: call the model, record its response, run the tools it asked for (concurrently,
results in the model's order as one user turn), repeat until it answers or a limit stops
it. Every way a run ends is a status with a reason; the workflow returns normally.

The workflow holds one `SessionState` and hands it to continue-as-new, without what the
loop no longer needs (workflows/archive.py puts that in the store). The model
call (`ModelCaller`), the tool calls (`ToolRunner`) and the control actions (declared
here, their rules and effects in `workflows/actions.py`) act on the `Session` they are
given. Determinism: no I/O, no environment, no wall clock but `workflow.now()`.
"""

from __future__ import annotations

import asyncio
import contextlib

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError
    from temporalio.contrib.workflow_streams import WorkflowStream

    from activities.memory import recall
    from activities.tools import ToolActivities
    from activities.wire import ContentBlock, Message, TextBlock, ToolOutcome, ToolRequest
    from workflows import actions, archive, budgets, messages, options
    from workflows.contract import (
        CancelRequest,
        Decision,
        EventInput,
        LimitDecline,
        LimitRaise,
        SessionHistory,
        SessionInput,
        SessionStatus,
        UserMessage,
        memory_scope,
    )
    from workflows.events import EVENT_TOPIC, Answered, ContinuedAsNew, UserMessageTaken
    from workflows.model_calls import ModelCaller
    from workflows.notify import NOTIFY_OUTCOME, NotifyResult
    from workflows.options import DESCRIBE_TOOLS_ATTEMPTS
    from workflows.outcomes import Finished, HandOver
    from workflows.session import Session, fmt_duration
    from workflows.state import SETTLED, SessionState
    from workflows.stopping import lets_calls_finish, stop_calls
    from workflows.subagents import CHILD_APPROVALS, ChildApprovals, SubAgents, subagent_specs
    from workflows.temporal import Failed, Temporal
    from workflows.tool_calls import ToolRunner, describe_tools, list_mcp_tools, wait_while_paused
    from workflows.typed_output import FINAL_ANSWER, TypedAnswers, answer_spec
    from workflows.view import SessionView
    from workflows.working_time import WorkClock


# Input that does not validate (a start from the CLI or UI with bad JSON) fails the
# workflow with pydantic's message, instead of failing its first task over and over.
@workflow.defn(name="AgentWorkflow", failure_exception_types=[ValidationError])
class AgentWorkflow:
    @workflow.init
    def __init__(self, input: SessionInput) -> None:
        state = input.state or SessionState.new(
            input.goal, workflow.now(), priced=input.price is not None,
            attachments=[a.block() for a in input.attachments],
        )  # fmt: skip
        # A fork's state comes from another session with `runs` 0; a continue-as-new's, from this one.
        session_id = workflow.info().workflow_id
        # Every command the session issues; `Metering` (the worker's interceptor) reports
        # the signals and updates it takes here.
        self.temporal = Temporal(session_id, input, state)
        self.temporal.run_started(forked=input.state is not None and state.runs == 0)
        state.runs += 1
        self.stream = WorkflowStream(prior_state=state.stream_state)
        view = SessionView(session_id, input, state, self.stream.topic(EVENT_TOPIC), self.temporal)
        self.session = Session(id=session_id, input=input, state=state, view=view, temporal=self.temporal)
        self.steps_at_run_start = state.steps
        self.model = ModelCaller(self.session)
        self.clock = WorkClock(self.session, lambda: self.model.in_flight)
        self.subagents = SubAgents(self.session, self.clock)
        self.typed = TypedAnswers(self.session) if input.output_schema is not None else None
        self.tools = ToolRunner(self.session, self.subagents, self._wants_handover, self.typed)
        self.budgets = budgets.Budgets(self.session, self._wants_handover)
        view.on_change = self.subagents.tell_parent

    @workflow.run
    async def run(self, input: SessionInput) -> SessionStatus:
        self.session.view.changed()
        handover = False
        with self.temporal.run_span():
            try:
                await self._session()
            except asyncio.CancelledError:
                # The workflow itself was cancelled (the Temporal UI's Cancel button).
                self.session.finish("cancelled", error="cancelled from Temporal")
            except HandOver:
                handover = True  # after the run's span has ended: continue-as-new ends this code
        if handover:
            await self._continue_as_new()
        await self.temporal.wait(workflow.all_handlers_finished)
        await self.session.notifier.ended()  # started, not delivered: the session closes at once
        self.temporal.ended()  # the result records what is still open (workflows/metering.py)
        return self.session.view.snapshot()

    # ---- queries and control -------------------------------------------------------------

    @workflow.query
    def status(self) -> SessionStatus:
        return self.session.view.snapshot()

    @workflow.query
    def history(self) -> SessionHistory:
        return self.session.view.history()

    @workflow.query
    def state(self) -> SessionState:
        """Everything the session knows but its event stream: what a fork starts from (with
        the parts earlier runs put in the store, which `sessions.archive.whole_state` joins)."""
        return self.session.state.model_copy(update={"stream_state": None})

    @workflow.signal(name=CHILD_APPROVALS)
    def child_approvals(self, update: ChildApprovals) -> None:
        self.subagents.take_child_approvals(update)

    @workflow.signal(name=NOTIFY_OUTCOME)
    def notification_outcome(self, outcome: NotifyResult) -> None:
        self.session.notifier.take_outcome(outcome)

    # Each action is an update (its validator is the action's rule: a refused one is not
    # recorded, and the caller gets the reason) and a signal of the same action for
    # callers that need no answer (a refused one changes nothing and is logged).

    @workflow.update(name="approve_call")
    def approve_call(self, decision: Decision) -> str:
        return actions.approve(self.session, decision)

    @approve_call.validator
    def _check_approve_call(self, decision: Decision) -> None:
        actions.check_approve(self.session, decision)

    @workflow.signal(name="approve")
    def approve(self, decision: Decision | None = None) -> None:
        actions.signalled(self.session, "approve", actions.check_approve, actions.approve, decision)

    @workflow.update(name="deny_call")
    def deny_call(self, decision: Decision) -> str:
        return actions.deny(self.session, decision)

    @deny_call.validator
    def _check_deny_call(self, decision: Decision) -> None:
        actions.check_deny(self.session, decision)

    @workflow.signal(name="deny")
    def deny(self, decision: Decision | None = None) -> None:
        actions.signalled(self.session, "deny", actions.check_deny, actions.deny, decision)

    @workflow.update(name="pause_session")
    def pause_session(self) -> str:
        return actions.pause(self.session)

    @pause_session.validator
    def _check_pause_session(self) -> None:
        actions.check_pause(self.session)

    @workflow.signal(name="pause")
    def pause(self) -> None:
        actions.signalled(self.session, "pause", actions.check_pause, actions.pause)

    @workflow.update(name="resume_session")
    def resume_session(self) -> str:
        return actions.resume(self.session)

    @resume_session.validator
    def _check_resume_session(self) -> None:
        actions.check_resume(self.session)

    @workflow.signal(name="resume")
    def resume(self) -> None:
        actions.signalled(self.session, "resume", actions.check_resume, actions.resume)

    @workflow.update(name="cancel_session")
    def cancel_session(self, request: CancelRequest) -> str:
        return actions.cancel(self.session, request)

    @cancel_session.validator
    def _check_cancel_session(self, request: CancelRequest) -> None:
        actions.check_cancel(self.session, request)

    @workflow.signal(name="cancel")
    def cancel(self, request: CancelRequest | None = None) -> None:
        request = request or CancelRequest()  # a bare cancel: no reason given
        actions.signalled(self.session, "cancel", actions.check_cancel, actions.cancel, request)

    @workflow.update(name="send_message")
    def send_message(self, message: UserMessage) -> int:
        return actions.send(self.session, message)

    @send_message.validator
    def _check_send_message(self, message: UserMessage) -> None:
        actions.check_send(self.session, message)

    @workflow.signal(name="send")
    def send(self, message: UserMessage | None = None) -> None:
        actions.signalled(self.session, "send", actions.check_send, actions.send, message)

    @workflow.update(name="send_event")
    def send_event(self, event: EventInput) -> str:
        return actions.take_event(self.session, event)

    @send_event.validator
    def _check_send_event(self, event: EventInput) -> None:
        actions.check_event(self.session, event)

    @workflow.signal(name="event")
    def event(self, event: EventInput | None = None) -> None:
        actions.signalled(self.session, "event", actions.check_event, actions.take_event, event)

    @workflow.update(name="raise_limit")
    def raise_limit(self, request: LimitRaise) -> str:
        return budgets.raise_limit(self.session, request)

    @raise_limit.validator
    def _check_raise_limit(self, request: LimitRaise) -> None:
        budgets.check_raise(self.session, request)

    @workflow.signal(name="raise")
    def raise_(self, request: LimitRaise | None = None) -> None:
        actions.signalled(self.session, "raise", budgets.check_raise, budgets.raise_limit, request)

    @workflow.update(name="decline_limit")
    def decline_limit(self, request: LimitDecline) -> str:
        return budgets.decline_limit(self.session, request)

    @decline_limit.validator
    def _check_decline_limit(self, request: LimitDecline) -> None:
        budgets.check_decline(self.session, request)

    @workflow.signal(name="decline")
    def decline(self, request: LimitDecline | None = None) -> None:
        request = request or LimitDecline()  # a bare decline: no reason given
        actions.signalled(self.session, "decline", budgets.check_decline, budgets.decline_limit, request)

    @workflow.update(name="close_session")
    def close_session(self) -> str:
        return actions.close(self.session)

    @close_session.validator
    def _check_close_session(self) -> None:
        actions.check_close(self.session)

    @workflow.signal(name="close")
    def close(self) -> None:
        actions.signalled(self.session, "close", actions.check_close, actions.close)

    # ---- the session: runs, and in a chat the waits between them ---------------------------

    async def _session(self) -> None:
        session, state = self.session, self.session.state
        if problem := self._check_input():
            session.finish("failed", error=problem)
            return
        # A worker's check of the notification URLs runs beside the tool listing; either
        # failing ends the session before any model call.
        checked = asyncio.create_task(session.notifier.check()) if state.runs == 1 else None
        problem = await self._list_tools() if not state.specs else None
        problem = problem or (await checked if checked is not None else None) or self._check_tool_choice()
        if problem:
            session.finish("failed", error=problem)
            return
        agent = session.input.agent
        if agent is not None and agent.memory_prompt and state.memory_note is None and state.steps == 0:
            state.memory_note = await self._memories_for_prompt(agent.memory_prompt)
        while True:
            if not state.idle:
                ended = await self._run_with_limits()
                if not (session.input.chat and ended.chat_goes_on()):
                    session.finish(ended.status, ended.stop_reason, ended.error)
                    return
                state.idle = True
                session.view.publish(
                    Answered(status=ended.status, stop_reason=ended.stop_reason, answer=state.answer)
                )
                session.view.changed()
            if (message := messages.take_next(session)) is not None:
                self._take_message(message.text)
                continue
            if state.closing:
                session.finish("completed")
                return
            if self._wants_handover():
                raise HandOver()
            if not await self._wait_for_input():
                return

    async def _memories_for_prompt(self, count: int) -> str:
        """The user's `count` memories most relevant to the goal, for the system prompt (the
        state records them: a replay or a fork sees the same ones). A failure leaves none."""
        session = self.session
        request = ToolRequest(
            session_id=session.id, user_id=session.input.user_id, tool_use_id="memory-prompt",
            name=recall.name, input={"query": session.input.goal[:2000], "limit": count},
            max_output=session.input.limits.max_tool_output, memory_scope=memory_scope(session.input),
        )  # fmt: skip
        try:
            found: ToolOutcome = await session.temporal.activity(
                ToolActivities.run_tool, request, options.run_tool(recall.spec), summary="recall memories"
            )
        except Failed:
            return ""
        return "" if found.is_error or found.content.startswith("no memories") else found.content

    async def _list_tools(self) -> str | None:
        """Record the session's tools (the worker's, its MCP servers', its sub-agents'); why it cannot, or None."""
        session = self.session
        try:
            session.state.specs = (
                await describe_tools(session) + await list_mcp_tools(session) + subagent_specs(session)
            )
        except Failed as err:
            return f"cannot start: {err.describe('listing the tools')} (after {DESCRIBE_TOOLS_ATTEMPTS} attempts)"
        if session.input.output_schema is not None:  # the answer's own tool, in place of any namesake
            session.state.specs = [
                *(s for s in session.state.specs if s.name != FINAL_ANSWER),
                answer_spec(session.input.output_schema),
            ]
        return None

    async def _wait_for_input(self) -> bool:
        """Wait idle for the next message; False when the session ended meanwhile."""
        session, state = self.session, self.session.state
        came = await self.temporal.wait(
            lambda: bool(state.pending) or state.closing or state.cancel_requested is not None
            or self._wants_handover(),
            timeout=session.input.idle_timeout_seconds,
            summary=f"idle {fmt_duration(session.input.idle_timeout_seconds)}",
        )  # fmt: skip
        if not came:
            session.finish("completed", stop_reason="idle_timeout")
            return False
        if state.cancel_requested is not None:
            session.finish("cancelled", error=state.cancel_requested or None)
            return False
        return True

    def _check_input(self) -> str | None:
        input = self.session.input
        if input.limits.cost_budget_usd is not None:
            for model in input.models():
                if input.price_of(model) is None:
                    return f"a cost budget needs prices for model {model!r}, and there are none"
        return None

    def _check_tool_choice(self) -> str | None:
        """A tool choice the session's tools cannot meet (the start checks it when it can)."""
        settings, specs = self.session.input.model_settings, self.session.state.specs
        choice = settings.tool_choice if settings is not None else None
        if choice in (None, "auto", "none"):
            return None
        names = [s.name for s in specs]
        if choice == "any" and not names:
            return "tool_choice 'any' needs a tool, and the session has none"
        if choice != "any" and choice not in names:
            return f"tool_choice {choice!r} is not one of the session's tools ({', '.join(names) or 'none'})"
        return None

    async def _run_with_limits(self) -> Finished:
        """One run: the loop until an answer, a limit, a failure or a cancel."""
        state, limits = self.session.state, self.session.input.limits
        if state.run_started_at is None:
            state.run_started_at = workflow.now()
        loop = asyncio.create_task(self._loop())
        cancelled = asyncio.create_task(self.temporal.wait(lambda: state.cancel_requested is not None))
        timeout = asyncio.create_task(self.clock.run_out(limits.timeout_seconds))
        try:
            while True:
                interrupted = asyncio.create_task(self.temporal.wait(self._interrupt_cuts))
                try:
                    ends = [loop, cancelled, timeout, interrupted]
                    await workflow.wait(ends, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    interrupted.cancel()
                if loop.done() or cancelled.done() or timeout.done():
                    break
                loop = await self._interrupt(loop)
        except asyncio.CancelledError:
            await self._stop(loop)
            self.clock.stop()
            raise
        finally:
            cancelled.cancel()
            timeout.cancel()
        try:
            return await self._outcome(loop)
        finally:
            self.clock.stop()

    async def _outcome(self, loop: asyncio.Task[None]) -> Finished:
        state = self.session.state
        if loop.done():
            outcome = loop.exception()
            if isinstance(outcome, Finished):
                state.run_started_at = None
                return outcome
            raise outcome or RuntimeError("the loop ended without an outcome")
        await self._stop(loop)
        state.run_started_at = None
        if state.cancel_requested is not None:
            return Finished("cancelled", error=state.cancel_requested or None)
        return Finished("stopped", stop_reason="timeout")

    async def _loop(self) -> None:
        state = self.session.state
        while True:
            await wait_while_paused(self.session)
            if uses := state.unanswered_uses():
                await self.tools.run_all(uses)
                await self.budgets.check()  # sub-agents spend the session's tokens too
                if self.typed is not None:
                    self.typed.after_tools()
                continue
            if self._wants_handover():
                raise HandOver()
            if state.steps >= self.session.limits.max_steps:
                await self.budgets.at_max_steps()
                continue
            messages.deliver_steers(self.session)
            reply = await self.model.call()
            self.model.record(reply)
            await self.budgets.check()
            stop = reply.stop_reason
            if stop == "tool_use" and reply.message.tool_uses():
                continue  # its tools run at the top of the loop
            if stop == "pause_turn" or (stop in ("end_turn", "tool_use") and state.for_this_run()):
                continue  # a steer (or an interrupt) sent meanwhile gets one more call of this run
            if stop in ("end_turn", "tool_use"):
                if self.typed is not None:
                    self.typed.text_answer(reply)
                    continue
                raise Finished("completed")
            if stop in ("max_tokens", "refusal"):
                raise Finished("stopped", stop_reason=stop)
            raise Finished("stopped", stop_reason="unknown")

    def _interrupt_cuts(self) -> bool:
        """An interrupt is pending and there is work in flight to cut short for it: the
        model call, or the last response's tool calls that have no outcome yet (running,
        waiting for approval, not yet started); once cut, they all have one."""
        state = self.session.state
        if not state.interrupts():
            return False
        open_calls = (state.calls[use.id].status not in SETTLED for use in state.unanswered_uses())
        return self.model.in_flight or any(open_calls)

    async def _interrupt(self, loop: asyncio.Task[None]) -> asyncio.Task[None]:
        """Cut the loop's work short for an interrupt, with the steps of a stop (an at-most-once
        call ends first, the workers are asked to stop the other calls), close the calls that
        will not run, and go on with a new loop, which gives the model the message
        (workflows/messages.py). A loop that ended meanwhile stands, with its outcome."""
        in_flight = self.temporal.activities_in_flight > 0
        stops = self.tools.stopping = in_flight and lets_calls_finish(self.session)
        loop.cancel()
        if stops:
            await stop_calls(self.session)
        await workflow.wait([loop])
        self.tools.stopping = False
        if not loop.cancelled():
            return loop
        self.tools.interrupted()
        return asyncio.create_task(self._loop())

    async def _stop(self, loop: asyncio.Task[None]) -> None:
        """Stop the loop: Temporal cancels its activities; with a model call or a regular tool
        call in flight, the session also asks their workers to stop them now, and lets an
        at-most-once call end first (workflows/stopping.py)."""
        in_flight = self.temporal.activities_in_flight > 0
        stops = self.tools.stopping = in_flight and lets_calls_finish(self.session)
        loop.cancel()
        if stops:
            await stop_calls(self.session)
        with contextlib.suppress(asyncio.CancelledError, Finished, HandOver):
            await loop

    # ---- chat ------------------------------------------------------------------------------

    def _take_message(self, text: str) -> None:
        """Start the next run with a user message; calls left unanswered get 'not run' results."""
        session, state = self.session, self.session.state
        content: list[ContentBlock] = [*state.close_unanswered(), TextBlock(text=text)]
        state.append(Message(role="user", content=content), sent=False)
        state.user_turns += 1
        state.idle = False
        state.run_started_at = workflow.now()
        self.clock.start_run()
        session.view.publish(UserMessageTaken(turn=state.user_turns, text=text))
        session.view.changed()

    # ---- continue-as-new -------------------------------------------------------------------

    def _wants_handover(self) -> bool:
        if workflow.info().is_continue_as_new_suggested():
            return True
        steps_this_run = self.session.state.steps - self.steps_at_run_start
        return steps_this_run >= self.session.input.limits.continue_as_new_after_steps

    async def _continue_as_new(self) -> None:
        """Hand the state to a new run of the same session: no activity is in flight. What
        the loop no longer needs goes to the store instead (workflows/archive.py)."""
        state = self.session.state
        self.stream.detach_pollers()
        await self.temporal.wait(workflow.all_handlers_finished)
        await self.session.notifier.started()  # their deliveries go on in their own workflows
        await archive.hand_over(self.session)
        await self.temporal.wait(workflow.all_handlers_finished)
        self.session.view.publish(ContinuedAsNew(run=state.runs + 1, steps=state.steps))
        state.stream_state = archive.trim_stream(self.stream.get_state())
        # The new run's input records what is still open (workflows/metering.py).
        self.temporal.continue_as_new(self.session.input.model_copy(update={"state": state}))
