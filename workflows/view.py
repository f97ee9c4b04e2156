"""How others see a session: its events, current details in the Temporal UI, search
attributes, and the status and history snapshots the queries return.

`SessionView.changed()` is called after every change of the state; it publishes a status
event when the run status moved, refreshes the UI's current details, and keeps the
search attributes current.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows import search
    from workflows.contract import (
        PendingMessageView,
        RunStatus,
        SessionHistory,
        SessionInput,
        SessionStatus,
        WaitingFor,
    )
    from workflows.events import StatusChanged, WorkflowEvent
    from workflows.loops import repeats_seen
    from workflows.records import SLEEP, WAIT_FOR_EVENT
    from workflows.state import SessionState
    from workflows.temporal import Temporal

if TYPE_CHECKING:
    from temporalio.common import SearchAttributeKey
    from temporalio.contrib.workflow_streams import WorkflowTopicHandle

# A change of AgentSteps and AgentTokens alone (status, approvals and user as they were)
# is indexed once both `COUNTS_INDEXED_EVERY` and `COUNTS_INDEXED_EVERY_STEPS` have passed,
# and at the latest `COUNTS_STALE_AT_MOST` after the last upsert: every upsert is an event
# and a write to the visibility store, and one per step was the largest cost this project
# added to the server's work per step. Any other change, and the end, index everything at
# once. A run does not upsert what it started with (the client's start, or the values the
# previous run left when it continued as new).
COUNTS_INDEXED_EVERY = timedelta(seconds=10)
COUNTS_INDEXED_EVERY_STEPS = 10
COUNTS_STALE_AT_MOST = timedelta(seconds=60)
INDEXED: tuple[SearchAttributeKey[Any], ...] = (search.AGENT_STATUS, search.AGENT_STEPS, search.AGENT_TOKENS,
           search.AGENT_PENDING_APPROVALS, search.AGENT_USER)  # fmt: skip
# The values of `INDEXED`, in its order: status, steps, tokens, pending approvals, user.
Indexed = tuple[str, int, int, int, str]


class SessionView:
    def __init__(
        self,
        session_id: str,
        input: SessionInput,
        state: SessionState,
        topic: WorkflowTopicHandle[Any],
        temporal: Temporal,
    ) -> None:
        self.session_id = session_id
        self.input = input
        self.state = state
        self._topic = topic
        self._temporal = temporal
        # Called after every change: a sub-agent tells its parent what it waits for.
        self.on_change: Callable[[], None] | None = None
        self._published_status: RunStatus | None = None
        self._indexed: Indexed | None = None
        self._indexed_at: datetime | None = None

    def publish(self, event: WorkflowEvent) -> None:
        event.at = workflow.now()
        self._topic.publish(event)

    def changed(self) -> None:
        self.state.updated_at = workflow.now()
        status = self.state.run_status()
        if status != self._published_status:
            self._published_status = status
            self.publish(StatusChanged(status=status))
        workflow.set_current_details(self.details())
        self._index(status)
        if self.on_change is not None:
            self.on_change()

    def _index(self, status: RunStatus) -> None:
        """Upsert the search attributes when they moved (see `COUNTS_INDEXED_EVERY`)."""
        if not self.input.search_attributes:
            return
        state = self.state
        waiting = len(state.pending_approvals(self.session_id))
        values: Indexed = (status, state.steps, state.usage.total(), waiting, self.input.user_id)
        if values == self._indexed:
            return
        now = workflow.now()
        if self._indexed is None or self._indexed_at is None:
            if values == self._start_values():
                self._indexed, self._indexed_at = values, now
                return
        elif (values[0], *values[3:]) == (self._indexed[0], *self._indexed[3:]) and self._counts_wait(
            values, now
        ):
            return
        self._indexed, self._indexed_at = values, now
        self._temporal.upsert([k.value_set(v) for k, v in zip(INDEXED, values, strict=True)])

    def _counts_wait(self, values: Indexed, now: datetime) -> bool:
        """Whether a change of the step and token counts alone waits for a later upsert."""
        assert self._indexed is not None and self._indexed_at is not None
        since = now - self._indexed_at
        steps = values[1] - self._indexed[1]
        recent = since < COUNTS_INDEXED_EVERY or steps < COUNTS_INDEXED_EVERY_STEPS
        return recent and since < COUNTS_STALE_AT_MOST

    @staticmethod
    def _start_values() -> tuple[object, ...]:
        """The search attributes this run started with, in `INDEXED`'s order (None: unset)."""
        attributes = workflow.info().typed_search_attributes
        return tuple(attributes.get(key) for key in INDEXED)

    def details(self) -> str:
        state, ending = self.state, self.state.ending
        lines = [
            f"**status** {state.run_status()}"
            + (f" ({ending.stop_reason})" if ending and ending.stop_reason else ""),
            f"**step** {state.steps} of {self.input.limits.raised(state.raised_limits).max_steps}",
            f"**tokens** {state.usage.total()}",
        ]
        if state.cost_usd is not None:
            lines.append(f"**cost** ${state.cost_usd:.4f}")
        if waiting := state.pending_approvals(self.session_id):
            lines.append(
                "**waiting for approval** " + ", ".join(f"{p.name} ({p.tool_use_id})" for p in waiting)
            )
        for call in state.in_waits(WAIT_FOR_EVENT):
            name = call.run_input().get("name")
            lines.append(f"**waiting for event** {name} until {_iso(call.deadline)}")
        for call in state.in_waits(SLEEP):
            lines.append(f"**sleeping** until {_iso(call.deadline)}: {call.run_input().get('reason') or ''}")
        if (reached := state.limit_reached) is not None and ending is None:
            lines.append(f"**waiting at {reached.name}** {reached.used:g} used of {reached.limit:g}")
        if ending and ending.error:
            lines.append(f"**error** {ending.error}")
        return "\n".join(lines)

    def snapshot(self) -> SessionStatus:
        state, ending = self.state, self.state.ending
        return SessionStatus(
            session_id=self.session_id,
            status=state.run_status(),
            stop_reason=ending.stop_reason if ending else None,
            error=ending.error if ending else None,
            steps=state.steps,
            usage=sum((c.usage for c in state.child_spend.values()), state.usage),
            cost_usd=self._cost_so_far(),
            pending_approvals=state.pending_approvals(self.session_id),
            answer=state.answer,
            output=state.output,
            chat=self.input.chat,
            user_turns=state.user_turns,
            queued_messages=len(state.queued()),
            pending_messages=[
                PendingMessageView(id=m.id, mode=m.mode, chars=len(m.text), sent_at=m.sent_at)
                for m in state.pending
            ],
            runs=state.runs,
            model=self.input.model,
            model_in_use=state.model_in_use or self.input.model,
            user_id=self.input.user_id,
            limits=self.input.limits.raised(state.raised_limits),
            started_at=state.started_at,
            updated_at=state.updated_at or state.started_at,
            transcript_resends=state.transcript_resends,
            agent=self.input.agent.name if self.input.agent else None,
            parent_session_id=self.input.parent.session_id if self.input.parent else None,
            forked_from=self.input.forked_from,
            temporal_actions=self._temporal.actions(),
            notifications=state.notifications.model_copy(deep=True),
            worked_seconds=round(state.worked(workflow.now()), 3),
            wake_at=next((c.deadline for c in state.in_waits(SLEEP)), None),
            waiting_for=self._waiting_for(),
            repeats=repeats_seen(state),
            limit_reached=state.limit_reached,
        )

    def _cost_so_far(self) -> float | None:
        """The session's cost, with what its running sub-agents told they have spent."""
        cost = self.state.cost_usd
        if cost is None:
            return None
        return cost + sum(c.cost_usd or 0.0 for c in self.state.child_spend.values())

    def _waiting_for(self) -> WaitingFor | None:
        for call in self.state.in_waits(WAIT_FOR_EVENT):
            name = call.run_input().get("name")
            if isinstance(name, str) and call.deadline is not None:
                return WaitingFor(name=name, until=call.deadline)
        return None

    def history(self) -> SessionHistory:
        return SessionHistory(
            session_id=self.session_id,
            status=self.snapshot(),
            messages=self.state.messages,
            trace=self.state.trace,
            tool_calls=list(self.state.calls.values()),
            temporal_actions=self._temporal.actions(),
            archive_ref=self.state.archive_ref,
        )


def _iso(at: datetime | None) -> str:
    return at.isoformat(timespec="seconds") if at is not None else "?"
