"""How the loop leaves a run: `Finished` ends it with a status, `HandOver` hands the
session to a new run (continue-as-new). Both are raised inside the loop and caught by
`AgentWorkflow`."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.contract import RunStatus


class Finished(Exception):
    """Raised inside the loop to end the run with a status."""

    status: RunStatus
    stop_reason: str | None
    error: str | None

    def __init__(self, status: RunStatus, stop_reason: str | None = None, error: str | None = None):
        super().__init__(status)
        self.status, self.stop_reason, self.error = status, stop_reason, error

    def chat_goes_on(self) -> bool:
        """A chat waits for the next message after an answer, a cut answer or a refusal."""
        return self.status == "completed" or self.stop_reason in ("max_tokens", "refusal")


class HandOver(Exception):
    """Raised at a safe point to hand the session to a new run (continue-as-new)."""
