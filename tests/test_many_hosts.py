"""Many machines, one session: three worker processes, each with its own data directory
(three hosts), one S3 store (SeaweedFS), one dev server. A long session is moved from host
to host by killing (kill -9, by PID) the host that runs its model call, and a 1 MB tool
output written on one host is read on another.

Figures: resends of the whole transcript (TranscriptMissing failures in history; the
workflow re-sends only after one), history bytes per step against the same session on
one host, and recovery time (kill to the model's next request for the session).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from devservers.fakemodel import FakeModelServer
from tests.conftest import answer, tool_use
from tests.support.procs import (
    ProcessHarness,
    WorkerProcess,
    Workers,
    end_if_running,
    result_of,
    start_session,
    wait_for_model_request,
    wait_until,
)
from tests.support.reliability import record
from tests.support.s3 import s3_env, s3_server  # noqa: F401  (fixtures)

pytestmark = pytest.mark.process

AREA = "Many machines, one session"
MB = 1_000_000
LIMITS = {
    "max_tool_output": MB,
    "context_tokens": 10_000_000,  # the 1 MB output stays in every request
    "token_budget": 10**12,
}


class Hosts:
    """Worker processes on one task queue, each with a data directory of its own."""

    def __init__(self, workers: list[Workers]):
        self.workers = workers
        self.started: list[WorkerProcess] = []

    def start(self) -> WorkerProcess:
        host = self.workers[len(self.started) % len(self.workers)]
        worker = host.start()
        self.started.append(worker)
        return worker

    def by_identity(self, identity: str) -> WorkerProcess:
        return next(w for w in self.started if identity.startswith(f"{w.pid}@"))

    def close(self) -> None:
        for host in self.workers:
            host.close()


class HostsHarness(ProcessHarness):
    """Three hosts on one task queue, and one more host alone on a queue of its own."""

    def __init__(self, client: Client, fake_model: FakeModelServer, hosts: Hosts, alone: Workers):
        super().__init__(client, fake_model, hosts.workers[0])
        self.hosts, self.alone = hosts, alone

    async def close(self) -> None:
        for handle in self.handles:
            await end_if_running(handle)
        self.hosts.close()
        self.alone.close()


@pytest_asyncio.fixture
async def hosts(
    client: Client, dev_server, fake_model: FakeModelServer, s3_env, tmp_path: Path
) -> AsyncIterator[HostsHarness]:
    def host(name: str, queue: str | None) -> Workers:
        # A killed host's model call is noticed within 3 s, not at its own timeout.
        return Workers(
            address=dev_server.address,
            model_url=fake_model.url,
            data_dir=tmp_path / name,
            log_dir=tmp_path / f"logs-{name}",
            task_queue=queue,
            args=["--heartbeat-timeout", "3"],
        )

    queue = f"hosts-{uuid.uuid4().hex[:8]}"
    harness = HostsHarness(
        client, fake_model, Hosts([host(f"host-{n}", queue) for n in range(3)]), host("alone", None)
    )
    try:
        yield harness
    finally:
        await harness.close()
        print("\n".join(w.logs() for w in [*harness.hosts.workers, harness.alone]))


def script(steps: int, kill_steps: set[int]) -> dict[int, list[dict]]:
    """The turns of each step: a 1 MB tool output first, then one small tool call a step,
    then the answer. The first model call at each of `kill_steps` would take 60 s, so the
    kill lands while it runs however slow the machine; its retry gets the same turn at once.
    By step, so a retry nobody planned (a busy worker taken for dead with its 3 s heartbeat
    timeout on a loaded machine) answers its own step, not the next one."""
    turns = {1: [tool_use("big_output", {"chars": MB}, id="big")]}
    for step in range(2, steps):
        turn = {**tool_use("get_time", id=f"t{step}"), "delay": 0.05}
        turns[step] = [{**turn, "delay": 60}, turn] if step in kill_steps else [turn]
    turns[steps] = [answer("done")]
    return turns


def scripted(h: HostsHarness, turns: dict[int, list[dict]]) -> str:
    session_id = f"proc-{uuid.uuid4().hex[:10]}"
    h.fake_model.script.set_by_step(session_id, turns)
    return session_id


async def running_call_host(handle: WorkflowHandle, hosts: Hosts) -> WorkerProcess:
    async def check():
        pending = (await handle.describe()).raw_description.pending_activities
        identities = [p.last_worker_identity for p in pending if p.activity_type.name == "call_model"]
        return identities[0] if identities and identities[0] else None

    return hosts.by_identity(await wait_until(check, timeout=15, what="the model call's worker"))


async def step_bytes(handle: WorkflowHandle) -> tuple[int, int, int]:
    """Total history bytes, bytes of the activity events (scheduled and completed), and resends."""
    total = activity = resends = 0
    async for event in handle.fetch_history_events():
        size = event.ByteSize()
        total += size
        if event.event_type in (
            EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
        ):
            activity += size
        failure = event.activity_task_failed_event_attributes.failure
        if (
            event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
            and failure.application_failure_info.type == "TranscriptMissing"
        ):
            resends += 1
    return total, activity, resends


async def breakdown(handle: WorkflowHandle) -> list[tuple[str, int]]:
    return [(EventType.Name(e.event_type)[11:], e.ByteSize()) async for e in handle.fetch_history_events()]


async def run_moving_session(h: HostsHarness, steps: int) -> None:
    hosts = h.hosts
    kill_steps = {2, 2 * steps // 3}
    # Not waiting for each to poll: a task queue has several partitions and a poller shows
    # only on the one it polls; the session starts on whichever host is ready first.
    for _ in range(3):
        hosts.start()
    limits = {**LIMITS, "max_steps": steps + 5}
    moving = await h.start(
        None, session_id=scripted(h, script(steps, kill_steps)), goal="a long session", limits=limits
    )
    # The same session on one host, at the same time, for the history figures.
    solo = await start_session(
        h.client, h.fake_model, h.alone.task_queue, None, session_id=scripted(h, script(steps, set())),
        goal="a long session", limits=limits,
    )  # fmt: skip
    h.handles.append(solo)
    h.alone.start()

    recoveries = []
    for step in sorted(kill_steps):
        await wait_for_model_request(h.fake_model, moving.id, step, timeout=120)
        victim = await running_call_host(moving, hosts)
        killed_at = victim.kill()
        hosts.start()  # the machine is replaced; the session does not wait for it
        retried = await wait_for_model_request(h.fake_model, moving.id, step, count=2, timeout=120)
        recoveries.append(retried[1]["at"] - killed_at)

    result = await result_of(moving, timeout=60 + steps * 3)
    solo_result = await result_of(solo, timeout=60 + steps * 3)
    assert result.status == solo_result.status == "completed" and result.answer == "done"
    assert result.steps == solo_result.steps == steps

    # The 1 MB output reached the model whole after its reader moved host.
    after = h.requests(moving.id, 2)
    assert all(len(r["body"]["messages"][-1]["content"][0]["content"]) == MB for r in after), len(after)
    readers = [d for d in (w.data_dir for w in hosts.workers) if list(d.rglob("store-cache/**/blobs/*/*"))]
    assert len(readers) >= 2, readers  # written on one host, read through the store on another

    total, activity, resends = await step_bytes(moving)
    solo_total, solo_activity, _ = await step_bytes(solo)
    assert resends == 0 and result.transcript_resends == 0
    if abs(activity - solo_activity) > 0.02 * solo_activity:
        print("MOVING", await breakdown(moving))
        print("SOLO", await breakdown(solo))
    assert abs(activity - solo_activity) <= 0.02 * solo_activity
    assert max(recoveries) < 40
    record(
        AREA,
        f"a {steps}-step session moved across 3 hosts by 2 kills (-9), one S3 store, a 1 MB tool output",
        "completed; the 1 MB output read on another host; no transcript re-sent",
        {
            "whole-transcript resends": str(resends),
            "history per step": f"{total // steps:,} B moved, {solo_total // steps:,} B on one host",
            "activity events per step": f"{activity // steps:,} B moved, {solo_activity // steps:,} B on one host",
            "recovery (kill to next model request)": ", ".join(f"{r:.1f} s" for r in recoveries),
        },
    )
    print(
        f"steps={steps} resends={resends} history/step moved={total / steps:.0f} one-host={solo_total / steps:.0f} "
        f"activity/step moved={activity / steps:.0f} one-host={solo_activity / steps:.0f} recoveries={recoveries}"
    )


async def test_a_session_moves_across_three_hosts(hosts: HostsHarness):
    await run_moving_session(hosts, steps=12)


@pytest.mark.slow
async def test_a_sixty_step_session_moves_across_three_hosts(hosts: HostsHarness):
    await run_moving_session(hosts, steps=60)
