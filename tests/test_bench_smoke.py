"""The benchmark harness runs end to end in its quick mode and writes its page.

By default one session each way (the plain loop, this project) and the reference run on a
default server; every contender that needs no optional package on three scenarios, and
the load scenario, are slow tests (`pytest -m slow`). No timing is asserted, only
that each was measured. The economy
scenario runs on its own at its quick size: the floor's billable actions, which its
workflow fixes, are checked against both counts (history and the server's counter), and
the action count itself against Temporal Cloud's rules on a built history.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from bench.billing import count

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.process
def test_quick_benchmark_of_one_session_writes_the_page(tmp_path: Path):
    """The plain loop and this project, one session each way, and the reference run on a
    server with Temporal's defaults: the page's sections and contenders are written."""
    out = tmp_path / "docs"
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(out), "--only", "plain,project", "--scenarios", "single"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    page = (out / "benchmarks.md").read_text()
    for heading in ("## One session", "## The goals in this run", "## Machine and versions",
                    "## The same work on a server with Temporal's default settings"):  # fmt: skip
        assert heading in page
    for key in ("plain", "project"):
        assert f"| {key} |" in page
    assert "| floor |" not in page and "pydantic-ai |" not in page  # only what ran
    section = page.split("## Contenders")[1].split("\n## ")[0]
    contenders = {line.split("**")[1]: line for line in section.splitlines() if line.startswith("- **")}
    assert contenders["project"].endswith("every one streamed."), contenders["project"]
    assert contenders["plain"].endswith("none streamed."), contenders["plain"]
    assert "failed" not in page.split("## One session")[1].split("\n## ")[0]
    assert "## Failures seen in this run" not in page


@pytest.mark.slow
@pytest.mark.process
def test_quick_benchmark_writes_the_report(tmp_path: Path):
    """Every contender that needs no optional package, on three scenarios (`pytest -m slow`:
    two minutes beside the suite; the test above covers one session each way)."""
    out = tmp_path / "docs"
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(out),
         "--only", "plain,floor,project,project-regular", "--scenarios", "single,many,history"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    page = (out / "benchmarks.md").read_text()
    for heading in ("## One session", "sessions at once", "## History size", "## Machine and versions",
                    "## The same work on a server with Temporal's default settings"):  # fmt: skip
        assert heading in page
    assert "CPU per step, milliseconds" in page
    for key in ("plain", "floor", "project", "project-regular"):
        assert f"| {key} |" in page
    assert "pydantic-ai |" not in page
    # This project runs as a user runs it: every model request streamed (the fake server's
    # log says so), with the worker's own defaults; the plain loop's requests do not stream.
    section = page.split("## Contenders")[1].split("\n## ")[0]
    contenders = {line.split("**")[1]: line for line in section.splitlines() if line.startswith("- **")}
    for key in ("project", "project-regular"):
        assert contenders[key].endswith("every one streamed."), contenders[key]
    assert contenders["plain"].endswith("none streamed."), contenders["plain"]
    assert "with its own defaults (the 1 s sticky-queue timeout included)" in page
    assert "failed" not in page.split("## History size")[0].split("## One session")[1]
    assert "## Failures seen in this run" not in page


@pytest.mark.slow
@pytest.mark.process
def test_quick_load_scenario_completes_every_session(tmp_path: Path):
    """100 sessions at once (`pytest -m slow`: beside the whole suite on two cores they
    outlast the quick mode's limit)."""
    out = tmp_path / "docs"
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(out), "--only", "project", "--scenarios", "load"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    page = (out / "benchmarks.md").read_text()
    assert "## Load:" in page
    assert "| 100 | 100 |" in page  # the load scenario's sessions, all completed


@pytest.mark.process
def test_quick_economy_writes_its_table(tmp_path: Path):
    out = tmp_path / "docs"
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(out),
         "--only", "floor,project,project-regular", "--scenarios", "economy"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    page = (out / "benchmarks.md").read_text()
    assert "## One session" not in page and "## Contenders" not in page  # only what ran
    section = page.split("## Economy")[1].split("\n## ")[0]
    for key in ("floor", "project", "project-regular", "project-watched", "project-instant"):
        assert f"| {key} |" in section
    # 3 model calls, 2 tool calls: 1 start and 5 activities, nothing else, in history and
    # in the server's own counter alike.
    floor = next(line for line in section.splitlines() if line.startswith("| floor |")).split(" | ")
    assert floor[1] == "2.0" and floor[-1] == "2.0 |", floor
    assert "What watching adds" in section
    assert "failed" not in section.lower()
    assert "## Failures seen in this run" not in page


@pytest.mark.process
def test_quick_scale_scenario_measures_waiting_sessions(tmp_path: Path):
    """20 sessions waiting for an approval on the defaults (worker.py without flags, api.py),
    all approved through the API; the measured section of the sizing page is written."""
    out = tmp_path / "docs"
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(out), "--scenarios", "scale"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    page = (out / "sizing.md").read_text()
    assert "## Measured: sessions waiting for a person" in page and "| N = 20 |" in page
    rows = {line.split(" | ")[0].lstrip("| "): line for line in page.splitlines() if line.startswith("| ")}
    assert rows["errors"].startswith("| errors | 0 |"), rows["errors"]
    for figure in (
        "sessions started a second",
        "approval to completion, p99",
        "one page of GET /v1/sessions",
    ):
        row = next(line for name, line in rows.items() if name.startswith(figure))
        assert "—" not in row, row  # measured


def _event(kind: str, **attributes) -> HistoryEvent:
    event = HistoryEvent(event_type=EventType.Value(f"EVENT_TYPE_{kind}"))
    for field, values in attributes.items():
        getattr(event, field).MergeFrom(type(getattr(event, field))(**values))
    return event


def test_action_count_follows_temporal_clouds_rules():
    change_version = {"search_attributes": {"indexed_fields": {"TemporalChangeVersion": Payload(data=b"[]")}}}
    status = {
        "search_attributes": {
            "indexed_fields": {"AgentStatus": Payload(data=b'"x"'), "AgentSteps": Payload()}
        }
    }
    events = [
        _event("WORKFLOW_EXECUTION_STARTED"),
        _event("WORKFLOW_EXECUTION_SIGNALED"),  # signal-with-start: one action with the start
        _event("WORKFLOW_TASK_COMPLETED", workflow_task_completed_event_attributes={
            "metering_metadata": {"nonfirst_local_activity_execution_attempts": 2}}),
        _event("MARKER_RECORDED", marker_recorded_event_attributes={"workflow_task_completed_event_id": 3}),
        _event("MARKER_RECORDED", marker_recorded_event_attributes={"workflow_task_completed_event_id": 3}),
        _event("UPSERT_WORKFLOW_SEARCH_ATTRIBUTES", upsert_workflow_search_attributes_event_attributes=change_version),
        _event("UPSERT_WORKFLOW_SEARCH_ATTRIBUTES", upsert_workflow_search_attributes_event_attributes=status),
        _event("ACTIVITY_TASK_SCHEDULED"),
        _event("ACTIVITY_TASK_STARTED", activity_task_started_event_attributes={"attempt": 3}),
        _event("TIMER_STARTED"),
        _event("WORKFLOW_EXECUTION_SIGNALED"),
        _event("WORKFLOW_EXECUTION_UPDATE_ACCEPTED"),
        _event("START_CHILD_WORKFLOW_EXECUTION_INITIATED"),
        _event("MARKER_RECORDED", marker_recorded_event_attributes={"workflow_task_completed_event_id": 20}),
        _event("WORKFLOW_EXECUTION_COMPLETED"),
    ]  # fmt: skip
    found = count(events, heartbeats=4, rejected_updates=1)
    assert found.as_dict() == {
        "starts": 1, "activities": 1, "activity_retries": 2, "local_activity_batches": 2,
        "local_activity_retries": 2, "heartbeats": 4, "signals": 1, "updates": 1, "rejected_updates": 1,
        "timers": 1, "upserts": 1, "children": 2, "other": 0, "total": 19,
    }  # fmt: skip
    child = _event("WORKFLOW_EXECUTION_STARTED", workflow_execution_started_event_attributes={
        "parent_workflow_execution": {"workflow_id": "parent"}})  # fmt: skip
    assert count([child, _event("WORKFLOW_TASK_SCHEDULED")]).total == 0  # its parent counted its start
