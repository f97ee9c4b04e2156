"""`Session`: what the loop, the tool calls and the control actions act on, passed to
each of them explicitly: the input it runs with, its state, its view (how others see it)
and `temporal`, through which it issues every Temporal command (workflows/temporal.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.contract import Limits, RunStatus, SessionInput
    from workflows.events import SessionEnded
    from workflows.notify import Notifier
    from workflows.state import SessionState
    from workflows.temporal import Temporal
    from workflows.view import SessionView


@dataclass
class Session:
    id: str
    input: SessionInput
    state: SessionState
    view: SessionView
    temporal: Temporal  # every command it issues, and the billable actions they cost
    notifier: Notifier = field(init=False)  # tells its `notify` URLs (workflows/notify.py)

    def __post_init__(self) -> None:
        self.notifier = Notifier(self.id, self.input, self.state, self.temporal)

    @property
    def limits(self) -> Limits:
        """The session's limits, with the ones a person raised (workflows/budgets.py)."""
        return self.input.limits.raised(self.state.raised_limits)

    def finish(self, status: RunStatus, stop_reason: str | None = None, error: str | None = None) -> None:
        """End the session with a status; the first end counts."""
        if not self.state.end(status, stop_reason, error):
            return
        self.view.publish(
            SessionEnded(status=status, stop_reason=stop_reason, error=error, answer=self.state.answer)
        )
        self.view.changed()

    def refuse_if_finished(self, action: str) -> None:
        if self.state.ending is not None:
            raise ValueError(f"session {self.id} is {self.state.ending.status}; cannot {action}")


def short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def fmt_duration(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h"
    if seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    return f"{seconds:g}s"
