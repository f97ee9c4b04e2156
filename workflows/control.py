"""The session as others see and steer it: the derived status, current details, search
attributes and events; the queries; and the control updates and signals with their rules.

A mixin of `AgentWorkflow`: it uses the session state that the workflow holds.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.types import (
        Message,
    )
    from workflows import search
    from workflows.types import (
        CancelRequest,
        Decision,
        PendingApproval,
        RunStatus,
        SessionHistory,
        SessionStatus,
        ToolCallRecord,
        UserMessage,
    )


# A change of AgentSteps and AgentTokens alone (status, approvals and user as they were)
# is indexed at most this often: every upsert is a write to the visibility store, and one
# per step was the largest cost this project added to the server's work per step. Any
# other change, and the end, index everything at once.
COUNTS_INDEXED_EVERY = timedelta(seconds=10)
COUNTS_THROTTLED = "search-attribute-counts-throttled"


class SessionControl:
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
        """Keep the search attributes current: one upsert per change of status, approvals or
        user; the step and token counts alone at most every `COUNTS_INDEXED_EVERY`."""
        if not self.input.search_attributes:
            return
        waiting = sum(1 for c in self.calls.values() if c.status == "waiting_approval")
        values = (status, self.steps, self.usage.total(), waiting, self.input.user_id)
        if values == self._indexed:
            return
        now = workflow.now()
        if (
            self._indexed is not None
            and self._indexed_at is not None
            and (values[0], *values[3:]) == (self._indexed[0], *self._indexed[3:])
            and now - self._indexed_at < COUNTS_INDEXED_EVERY
            and workflow.patched(COUNTS_THROTTLED)  # sessions started before upsert every step
        ):
            return
        self._indexed, self._indexed_at = values, now
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
            lines.append(
                "**waiting for approval** " + ", ".join(f"{c.name} ({c.tool_use_id})" for c in waiting)
            )
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
                raise ValueError(
                    f"tool call {call.tool_use_id} ({call.name}) was already decided: {call.status}"
                )
            raise ValueError(f"tool call {call.tool_use_id} ({call.name}) is not waiting for approval")
        return call

    def _decide(self, decision: Decision, approved: bool) -> str:
        call = self.calls[decision.tool_use_id]
        if approved:
            call.status, call.approved = "pending", True
        else:
            call.status, call.reason = "denied", decision.reason
        self._publish(
            "decision",
            tool_use_id=call.tool_use_id,
            name=call.name,
            approved=approved,
            reason=decision.reason,
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
        return (
            "closing: the session ends after the messages already sent"
            if not self.idle or self.queue
            else "closed"
        )

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
        self._signal(
            lambda: (self._refuse_if_finished("cancel"), self._request_cancel(request or CancelRequest()))
        )

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
