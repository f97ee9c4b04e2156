"""`history --json` carries the whole trace; `export` writes a history the Replayer accepts."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from sessions.pricing import price_for
from tests.conftest import Harness, answer, tool_use
from tests.test_watch import run_cli
from workflows.agent import AgentWorkflow

PRICED = "claude-sonnet-4-6"


async def finished_session(harness: Harness):
    handle = await harness.start(
        [
            tool_use("get_time", {"timezone_name": "UTC"}, id="t1", text="Looking at the clock."),
            tool_use("explode", {"message": "disk on fire"}, id="t2"),
            answer("It is noon."),
        ],
        model=PRICED,
        price=price_for(PRICED),
        prompt_version="v7",
    )
    result = await handle.result()
    assert result.status == "completed"
    return handle, result


async def test_history_json_carries_the_trace(harness: Harness):
    handle, _result = await finished_session(harness)
    code, out, err = await run_cli(harness, "history", handle.id, "--json")
    assert code == 0, err
    found = json.loads(out)
    assert found["status"]["status"] == "completed" and found["status"]["stop_reason"] is None
    assert found["status"]["answer"] == "It is noon."
    trace = found["trace"]
    assert [t["step"] for t in trace] == [1, 2, 3]
    assert [t["stop_reason"] for t in trace] == ["tool_use", "tool_use", "end_turn"]
    assert [t["text"] for t in trace] == ["Looking at the clock.", "", "It is noon."]
    for turn in trace:
        assert turn["model"] == PRICED and turn["prompt_version"] == "v7"
        assert turn["latency_ms"] >= 0 and turn["attempt"] == 1
        assert turn["usage"]["input_tokens"] > 0 and turn["usage"]["output_tokens"] > 0
        assert turn["cost_usd"] > 0
        assert datetime.fromisoformat(turn["started_at"]) <= datetime.fromisoformat(turn["ended_at"])
    assert abs(sum(t["cost_usd"] for t in trace) - found["status"]["cost_usd"]) < 1e-9
    assert sum(t["usage"]["output_tokens"] for t in trace) == found["status"]["usage"]["output_tokens"]
    # per turn: its tool calls with input, output, error and duration
    (ok,) = trace[0]["tool_calls"]
    assert ok["tool_use_id"] == "t1" and ok["name"] == "get_time" and ok["input"] == {"timezone_name": "UTC"}
    assert ok["status"] == "done" and ok["is_error"] is False and ok["error"] is None
    assert ok["output"] and ok["duration_ms"] is not None and ok["duration_ms"] >= 0
    assert datetime.fromisoformat(ok["started_at"]) <= datetime.fromisoformat(ok["ended_at"])
    (bad,) = trace[1]["tool_calls"]
    assert bad["name"] == "explode" and bad["input"] == {"message": "disk on fire"}
    assert bad["status"] == "error" and bad["is_error"] is True
    assert "disk on fire" in bad["error"] and bad["error"] == bad["output"]
    assert bad["duration_ms"] is not None
    assert trace[2]["tool_calls"] == []
    assert [c["tool_use_id"] for c in found["tool_calls"]] == ["t1", "t2"]
    assert [m["role"] for m in found["messages"]] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]

    code, out, _ = await run_cli(harness, "history", handle.id)
    assert code == 0
    assert "step 1" in out and "get_time" in out and "disk on fire" in out and "completed" in out


async def test_export_writes_a_replayable_history(harness: Harness, tmp_path: Path):
    handle, _ = await finished_session(harness)
    target = tmp_path / "session.json"
    code, _, err = await run_cli(harness, "export", handle.id, str(target))
    assert code == 0, err
    assert f"to {target}" in err
    document = json.loads(target.read_text())
    assert document["events"][0]["eventType"] == "EVENT_TYPE_WORKFLOW_EXECUTION_STARTED"
    assert document["events"][-1]["eventType"] == "EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED"
    history = WorkflowHistory.from_json(handle.id, target.read_text())
    assert len(history.events) == len(document["events"])
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history)
    assert result.replay_failure is None

    code, _, err = await run_cli(harness, "export", "no-such-session", str(tmp_path / "x.json"))
    assert code == 1 and "no session 'no-such-session'" in err
    assert not (tmp_path / "x.json").exists()
