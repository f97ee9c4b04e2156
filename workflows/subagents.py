"""Sub-agents: another agent called as a tool (`agent__NAME`), run as a child session.

The child is its own workflow (`PARENT.sub-N`, its own history in the Temporal UI,
linked to the parent) started with the sub-agent's recorded definition. It runs this
same workflow, started and signalled by the names it is registered under (so this
module needs no reference to the workflow class, which is built on it). Budgets are
shared: the child gets at most what the parent has left (split between the children of
one response), and its tokens and cost are added to the parent's when it ends. The
parent's pause and resume are passed on; cancelling the parent cancels the child. The
child tells its parent which of its calls wait for a person, so they show in the
parent's status and can be decided through it, and whether it is in a wait that is not
work (paused, waiting for a person, sleeping, waiting for an event), so the parent's
working time stops while it is, and what it has spent as it goes (children started with
`ParentLink.tells_spend`): the parent's status counts it at once, and a child that fails or
is cancelled still has it charged. The shares keep the whole tree within the parent's
budget but for one model call per session running in it: each child stops at its share,
a response's children split what the parent had left, and the parent checks its budgets
when they end.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel

    from activities.wire import ToolSpec, Usage
    from workflows import ids, options
    from workflows.contract import Limits, ParentLink, SessionInput, SessionStatus, SubAgent
    from workflows.records import ChildSpend, PendingApproval, ToolCallRecord
    from workflows.session import Session, short
    from workflows.working_time import WorkClock

TOOL_PREFIX = "agent__"
# The signals between a parent and its children: the child tells what it waits for; the
# parent passes on its pause and resume (the names of AgentWorkflow's own signals).
CHILD_APPROVALS = "child_approvals"
PAUSE, RESUME = "pause", "resume"
# A child tells its parent what it has spent (`ChildApprovals.usage`, `cost_usd`) each time
# it has spent another tenth of its token or cost budget since it last told: at most about
# ten more signals a child, and none from a session without sub-agents.
SPEND_TOLD_EVERY = 0.1


class ChildApprovals(BaseModel):
    """What a child session waits for, sent to its parent whenever that changes."""

    session_id: str
    pending: list[PendingApproval]
    # Whether the child is in a wait that is not work (children that predate it never say so).
    waiting: bool = False
    # What the child has spent so far (children started without `tells_spend` never say: None).
    usage: Usage | None = None
    cost_usd: float | None = None


def subagent_specs(session: Session) -> list[ToolSpec]:
    """The sub-agents of the session's agent, as tools the model can call."""
    agent = session.input.agent
    if agent is None:
        return []
    return [
        ToolSpec(
            name=f"{TOOL_PREFIX}{sub.name}",
            description=f"Hand a task to the {sub.name} agent and get its answer. {sub.description}".strip(),
            input_schema={
                "type": "object",
                "properties": {
                    "task": {"type": "string", "description": "What the agent should do, in full"}
                },
                "required": ["task"],
                "additionalProperties": False,
            },
            policy="idempotent",
            subagent=sub.name,
        )
        for sub in agent.subagents
    ]


class SubAgents:
    def __init__(self, session: Session, clock: WorkClock) -> None:
        self.session = session
        self.state = session.state
        self._clock = clock  # in a child: whether it works, for its parent's working time
        self._running: set[str] = set()
        self._told: tuple[list[PendingApproval], bool] | None = None
        self._told_spend = ChildSpend()

    async def run(self, call: ToolCallRecord, spec: ToolSpec, siblings: int) -> tuple[str, bool]:
        """Run the child session for one call; its answer, or an error result with its reason."""
        sub = self._definition(spec)
        task = call.run_input().get("task")
        if sub is None or not isinstance(task, str) or not task.strip():
            return f"invalid input for {call.name}: task: a non-empty string is required", True
        self.state.subagent_runs += 1
        child_id = call.child_session_id = ids.subagent(self.session.id, self.state.subagent_runs)
        handle = await self.session.temporal.start_child(
            workflow.info().workflow_type,  # the child runs this same workflow
            self._child_input(sub, task, call, siblings),
            id=child_id,
            result_type=SessionStatus,
            child_options=options.subagent(),
            summary=f"sub-agent {sub.name} of {self.session.id}: {short(task, 120)}",
        )
        self._running.add(child_id)
        pauses = asyncio.create_task(self._pass_on_pauses(handle))
        result: SessionStatus | None = None
        try:
            result = await handle
        finally:
            pauses.cancel()
            self._running.discard(child_id)
            self.state.child_approvals.pop(child_id, None)
            if child_id in self.state.child_waits:
                self.state.child_waits.remove(child_id)
            spent = self.state.child_spend.pop(child_id, None)
            if result is None and spent is not None:  # failed or cancelled: what it told is not lost
                self._charge(spent.usage, spent.cost_usd)
        assert result is not None
        return self._settle(sub, result)

    def _definition(self, spec: ToolSpec) -> SubAgent | None:
        agent = self.session.input.agent
        return next((s for s in agent.subagents if s.name == spec.subagent), None) if agent else None

    def _child_input(self, sub: SubAgent, task: str, call: ToolCallRecord, siblings: int) -> SessionInput:
        parent = self.session.input
        return SessionInput(
            goal=task, user_id=parent.user_id, model=sub.model, system=sub.system,
            limits=self._shared_limits(sub.limits, _priced(sub), siblings), price=sub.price,
            fallback_models=sub.fallback_models, fallback_prices=sub.fallback_prices,
            tools=sub.tools, agent=sub.agent, search_attributes=parent.search_attributes,
            model_settings=sub.model_settings, loop_policy=sub.loop_policy,
            parent=ParentLink(session_id=self.session.id, tool_use_id=call.tool_use_id, tells_spend=True),
        )  # fmt: skip

    def _shared_limits(self, own: Limits, priced: bool, siblings: int) -> Limits:
        """The child's limits, capped by what the parent has left (split among siblings)."""
        parent, state = self.session.limits, self.state
        share = max(1, siblings)
        tokens_left = max(1, (parent.token_budget - state.usage.total()) // share)
        update: dict[str, Any] = {"token_budget": min(own.token_budget, tokens_left)}
        if parent.cost_budget_usd is not None and priced:
            cost_left = max(1e-6, (parent.cost_budget_usd - (state.cost_usd or 0)) / share)
            update["cost_budget_usd"] = min(own.cost_budget_usd or cost_left, cost_left)
        time_left = parent.timeout_seconds - (state.worked(workflow.now()) - state.run_worked_from)
        update["timeout_seconds"] = max(1.0, min(own.timeout_seconds, time_left))
        return own.model_copy(update=update)

    def _settle(self, sub: SubAgent, result: SessionStatus) -> tuple[str, bool]:
        """Charge the child's tokens, cost and billable actions to this session; its answer as the result."""
        self._charge(result.usage, result.cost_usd)
        self.session.temporal.child_actions(result.temporal_actions)
        if result.status == "completed":
            return result.answer or "", False
        why = result.stop_reason or result.error or result.status
        return f"the {sub.name} agent did not finish: {result.status} ({why})", True

    def _charge(self, usage: Usage, cost_usd: float | None) -> None:
        state = self.state
        state.usage = state.usage + usage
        if state.cost_usd is not None and cost_usd is not None:
            state.cost_usd += cost_usd

    async def _pass_on_pauses(self, handle: workflow.ChildWorkflowHandle[Any, SessionStatus]) -> None:
        paused = False
        while True:
            await self.session.temporal.wait(lambda: self.state.paused != paused)  # noqa: B023  (awaited here)
            paused = self.state.paused
            await self.session.temporal.signal(handle, PAUSE if paused else RESUME)

    # ---- approvals, both ways --------------------------------------------------------------

    def take_child_approvals(self, update: ChildApprovals) -> None:
        """A running child said what it waits for (news from an ended child is dropped)."""
        if update.session_id not in self._running:
            return
        known = {p.tool_use_id for p in self.state.child_approvals.get(update.session_id, [])}
        self.state.child_approvals[update.session_id] = update.pending
        waits = self.state.child_waits
        if update.waiting and update.session_id not in waits:
            waits.append(update.session_id)
        elif not update.waiting and update.session_id in waits:
            waits.remove(update.session_id)
        if update.usage is not None:
            self.state.child_spend[update.session_id] = ChildSpend(
                usage=update.usage, cost_usd=update.cost_usd
            )
        for pending in update.pending:
            if pending.tool_use_id not in known:
                self.session.notifier.approval_requested(pending)
        self.session.view.changed()

    def tell_parent(self) -> None:
        """In a child: send the parent what this session waits for, when it changed."""
        link = self.session.input.parent
        if link is None:
            return
        pending = self.state.pending_approvals(self.session.id)
        waiting = self._waiting()
        spend_due = self._spend_due()
        if (pending, waiting) == self._told and not spend_due:
            return
        self._told = (pending, waiting)
        told = ChildApprovals(session_id=self.session.id, pending=pending, waiting=waiting)
        if link.tells_spend:
            told.usage, told.cost_usd = self.state.usage, self.state.cost_usd
            self._told_spend = ChildSpend(usage=self.state.usage, cost_usd=self.state.cost_usd)
        signal = self.session.temporal.signal(link.session_id, CHILD_APPROVALS, told)
        # No reference kept: the workflow's event loop holds every task until it ends.
        asyncio.create_task(signal)  # noqa: RUF006

    def _spend_due(self) -> bool:
        """In a child: whether it has spent another `SPEND_TOLD_EVERY` of a budget since it last told."""
        link = self.session.input.parent
        if link is None or not link.tells_spend or self.state.ending is not None:
            return False
        limits, state, told = self.session.limits, self.state, self._told_spend
        if state.usage.total() - told.usage.total() >= SPEND_TOLD_EVERY * limits.token_budget:
            return True
        if limits.cost_budget_usd is None or state.cost_usd is None:
            return False
        return state.cost_usd - (told.cost_usd or 0.0) >= SPEND_TOLD_EVERY * limits.cost_budget_usd

    def _waiting(self) -> bool:
        """In a child: whether it waits and does not work (an ended one says as it last said)."""
        if self.state.ending is not None:
            return self._told[1] if self._told is not None else False
        return not self._clock.working()


def _priced(sub: SubAgent) -> bool:
    """Whether every model of the sub-agent has prices: only then can it share a cost budget."""
    return sub.price is not None and all(model in sub.fallback_prices for model in sub.fallback_models)
