"""Determinism: every recorded history under tests/histories/ replays against the current
workflow code. A change that would break running sessions (a different command sequence
without `workflow.patched()`) fails here. Re-record with `python -m tests.record_histories`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from tests.record_histories import SCENARIOS, load_history
from tests.support.reliability import record
from workflows.agent import AgentWorkflow

HISTORIES = Path(__file__).resolve().parent / "histories"
FILES = sorted(HISTORIES.glob("*.json"))


def test_every_scenario_has_a_recorded_history():
    recorded = {p.stem for p in FILES}
    assert set(SCENARIOS) <= recorded, f"not recorded: {sorted(set(SCENARIOS) - recorded)}"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
async def test_history_replays(path: Path):
    raw = json.loads(path.read_text())
    # Recorded as `replay-<scenario>`; a history kept from a release before is named `<scenario>-<date>`.
    history = load_history(path)
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"
    record(
        "Determinism",
        f"replay of the recorded `{path.stem}` history",
        "replays with the current workflow code, no non-determinism",
        {"events": len(raw["events"])},
    )


async def test_a_replay_schedules_the_model_call_without_the_refusals_its_history_carries():
    """Refused updates reach history by echo (workflows/metering.py): the live worker put the
    two refusals it held in the second model call's input, and the reply carried them back. A
    replay runs no validator, so it schedules that call with 0; the history still replays,
    because Temporal compares an activity's type and id on replay, not its input."""
    path = HISTORIES / "refused_updates.json"
    raw = json.loads(path.read_text())
    history = WorkflowHistory.from_json("replay-refused", raw)
    scheduled = [
        e.activity_task_scheduled_event_attributes
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "call_model"
    ]
    carried = [json.loads(a.input.payloads[0].data).get("refusals", 0) for a in scheduled]
    assert carried == [0, 2]
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
