"""A deploy with Worker Deployments: sessions run on build 1, build 2 (a patched change
to the workflow) becomes the current version, build 1 is drained, and every session
completes; the histories of sessions started on build 1 replay on build 2's code.

Real `python worker.py --deployment NAME --build-id ID` processes, ended by PID.
"""

from __future__ import annotations

import uuid

import pytest
from temporalio.api.workflowservice.v1 import SetWorkerDeploymentCurrentVersionRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from tests.conftest import answer, tool_use
from tests.support.build2 import MEMO_KEY, PATCH, AgentWorkflowBuild2
from tests.support.procs import (
    Event,
    ProcessHarness,
    effects_of,
    events_of,
    result_of,
    wait_for_effects,
    wait_for_status,
    wait_until,
)
from tests.support.reliability import record
from workflows.agent import AgentWorkflow
from workflows.contract import Decision

pytestmark = pytest.mark.process

BUILD2_WORKFLOW = "tests.support.build2:AgentWorkflowBuild2"
EMAIL = {"to": "a@example.com", "subject": "hi", "body": "x"}


async def set_current(client: Client, deployment: str, build_id: str) -> None:
    """Make the build current, once the server knows it (a version registers on its first poll)."""

    async def attempt() -> bool:
        request = SetWorkerDeploymentCurrentVersionRequest(
            namespace=client.namespace, deployment_name=deployment, build_id=build_id, identity="test_deploy"
        )
        await client.workflow_service.set_worker_deployment_current_version(request)
        return True

    await wait_until(
        attempt, timeout=30, what=f"{deployment} build {build_id} to become current", interval=0.3
    )


def builds_of(events: list[Event]) -> list[str]:
    """The build id that completed each workflow task, in order."""
    found = []
    for event in events:
        if event.type == "WORKFLOW_TASK_COMPLETED":
            attrs = event.raw.workflow_task_completed_event_attributes
            found.append(attrs.deployment_version.build_id)
    return found


def patch_markers(events: list[Event]) -> int:
    """How many times the history recorded taking build 2's patched path."""
    markers = (e.raw.marker_recorded_event_attributes for e in events if e.type == "MARKER_RECORDED")
    patches = (m.details["patch-data"].payloads[0].data for m in markers if m.marker_name == "core_patch")
    return sum(1 for data in patches if PATCH.encode() in data)


def trace(events: list[Event]) -> str:
    """The history in one line, for a failure's message: event, time, and who ran a task."""

    def who(e: Event) -> str:
        if e.type == "WORKFLOW_TASK_STARTED":
            return "@" + e.raw.workflow_task_started_event_attributes.identity.split("@")[0]
        if e.type == "WORKFLOW_TASK_COMPLETED":
            return ":build-" + e.raw.workflow_task_completed_event_attributes.deployment_version.build_id
        return f" {e.activity}" if e.activity else ""

    start = events[0].epoch
    return "; ".join(f"{e.epoch - start:.1f} {e.type}{who(e)}" for e in events)


def memo_upserts(events: list[Event]) -> int:
    return sum(1 for e in events if e.type == "WORKFLOW_PROPERTIES_MODIFIED")


async def replays_on(workflow: type, handle: WorkflowHandle) -> str | None:
    """None if the session's history replays on this workflow code, else the failure."""
    history = await handle.fetch_history()
    replayer = Replayer(workflows=[workflow], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    return None if result.replay_failure is None else str(result.replay_failure)


async def test_build2_takes_over_and_build1_sessions_replay_on_it(procs: ProcessHarness):
    deployment = f"agents-{uuid.uuid4().hex[:8]}"
    build1 = await procs.worker("--deployment", deployment, "--build-id", "1")
    await set_current(procs.client, deployment, "1")
    waiting = [await procs.start([tool_use("send_email", EMAIL, id="e1"), answer("Sent.")]) for _ in range(2)]
    for handle in waiting:
        await wait_for_status(handle, "waiting_approval")
    build2 = await procs.worker("--deployment", deployment, "--build-id", "2", "--workflow", BUILD2_WORKFLOW)
    # Build 2 polls but is not current yet: this session's tool starts on build 1.
    busy = await procs.start(
        [tool_use("slow_upsert", {"key": "v1", "seconds": 5}, id="u1"), answer("Saved.")]
    )
    await wait_for_effects(busy.id, "slow_upsert")

    await set_current(procs.client, deployment, "2")
    build1.terminate()  # drain: its running tool finishes, then it exits
    for handle in waiting:
        assert await handle.execute_update("approve_call", Decision(tool_use_id="e1"), result_type=str)
    fresh = await procs.start([tool_use("get_time", id="t1"), answer("It is late.")])
    await build1.exited(timeout=30)

    started_on_1 = [*waiting, busy]
    for handle in [*started_on_1, fresh]:
        result = await result_of(handle)
        assert result.status == "completed", (handle.id, result)
    assert build1.process.returncode == 0 and build2.alive()
    assert [r["pid"] for r in effects_of(busy.id, "slow_upsert")] == [build1.pid]  # not run again
    fresh_events = await events_of(fresh)
    assert set(builds_of(fresh_events)) == {"2"}
    assert patch_markers(fresh_events) == 1 and memo_upserts(fresh_events) == 2  # one per step
    assert await _memo(fresh) == "build-2"
    # The change does alter the commands: build 1's code cannot replay a build-2 session.
    assert await replays_on(AgentWorkflow, fresh) is not None
    for handle in started_on_1:
        events = await events_of(handle)
        builds = builds_of(events)
        # Its first tasks ran on build 1, its last ones on build 2 (auto-upgrade).
        assert builds[0] == "1" and builds[-1] == "2", trace(events)
        # `patched()` answered False while replaying its build-1 steps, and a patch keeps
        # its first answer for the whole run: the session goes on on the old path.
        assert patch_markers(events) == 0 and memo_upserts(events) == 0, handle.id
        assert await replays_on(AgentWorkflowBuild2, handle) is None, handle.id
    record(
        "Deploys and drains",
        "build 2 (a patched change: one more command per step) made current while build 1 runs 3 sessions (2 waiting for approval, 1 in a 5 s tool); build 1 SIGTERMed",
        "build 1's tool finished there and it exited 0; every session completed, its last tasks on build 2; sessions started on build 1 kept the old path (`patched()` False), the new one took the patched path; the build-1 sessions' histories replay on build 2's code, and build 1's code fails to replay the new session's",
        {"sessions started on build 1": len(started_on_1), "started on build 2": 1},
    )


async def _memo(handle: WorkflowHandle) -> str | None:
    description = await handle.describe()
    return await description.memo_value(MEMO_KEY, default=None)
