"""Real worker processes for fault tests: start, kill -9 by PID, reap, and wait for conditions.

Every process is started by `Workers.start` and ended by its PID (`kill` or `stop`);
`Workers.close` ends whatever is still running. Nothing here looks a process up by name.
Waiting is polling with a deadline, never a fixed long sleep.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from temporalio.api.enums.v1 import DescribeTaskQueueMode, EventType, TaskQueueType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.taskqueue.v1 import TaskQueue, TaskQueueVersionSelection
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowHandle

from devservers import processes
from infra.datadir import read_effects
from workflows.agent import AgentWorkflow
from workflows.contract import FINAL_STATUSES, Limits, SessionInput, SessionStatus

ROOT = Path(__file__).resolve().parents[2]
TOOLS_SPEC = "tests.support.tools:TOOLS"
T = TypeVar("T")


@dataclass
class WorkerProcess:
    """One `python worker.py` process."""

    process: subprocess.Popen
    task_queue: str
    log_file: Path
    started_at: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> float:
        """kill -9 by PID and reap; returns the wall-clock time of the kill."""
        at = time.time()
        processes.kill(self.process)
        return at

    def terminate(self) -> float:
        """SIGTERM by PID (the worker drains); returns the wall-clock time it was sent."""
        at = time.time()
        self.process.send_signal(signal.SIGTERM)
        return at

    async def exited(self, timeout: float = 60) -> float:
        """Wait until the process has exited and is reaped; the wall-clock time it was seen gone."""
        deadline = time.monotonic() + timeout
        while self.process.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"worker {self.pid} still running {timeout:g} s after SIGTERM:\n{self.log()}"
                )
            await asyncio.sleep(0.02)
        return time.time()

    def stop(self) -> None:
        """SIGTERM by PID, then SIGKILL if it lingers; always reaped."""
        processes.stop(self.process, grace=10)

    def log(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")[-4000:]
        except OSError:
            return ""


class Workers:
    """Worker processes for one test, on one task queue; ends them all on close."""

    def __init__(
        self,
        *,
        address: str,
        model_url: str,
        data_dir: Path,
        log_dir: Path,
        task_queue: str | None = None,
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
        program: list[str] | None = None,
    ):
        """`env` is added to each worker's environment, `args` to its command line;
        `program` is what the interpreter runs (default `worker.py`)."""
        self.env = dict(env or {})
        self.args = list(args or [])
        self.program = list(program or ["worker.py"])
        self.address = address
        self.model_url = model_url
        self.data_dir = data_dir
        self.log_dir = log_dir
        self.task_queue = task_queue or f"proc-{uuid.uuid4().hex[:10]}"
        self.started: list[WorkerProcess] = []

    def start(self, *args: str) -> WorkerProcess:
        """A `python worker.py` process; `args` are more of its flags."""
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": self.address,
            "TEMPORAL_NAMESPACE": "default",
            "TEMPORAL_TASK_QUEUE": self.task_queue,
            "ANTHROPIC_BASE_URL": self.model_url,
            "ANTHROPIC_API_KEY": "test-key",
            "AGENT_DATA_DIR": str(self.data_dir),
            "PYTHONUNBUFFERED": "1",
            **self.env,
        }
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_file = self.log_dir / f"worker-{len(self.started) + 1}.log"
        with open(log_file, "ab") as out:
            process = subprocess.Popen(
                [sys.executable, *self.program, "--tools", TOOLS_SPEC, *self.args, *args],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C to pytest does not reach it; we end it by PID
            )
        worker = WorkerProcess(process, self.task_queue, log_file)
        self.started.append(worker)
        return worker

    def close(self) -> None:
        for worker in self.started:
            try:
                worker.stop()
            except Exception:  # keep ending the others
                processes.kill(worker.process)

    def logs(self) -> str:
        return "\n".join(f"--- worker pid {w.pid} ---\n{w.log()}" for w in self.started)


# ---- waiting -----------------------------------------------------------------------------


async def wait_until(
    check: Callable[[], Awaitable[T | None] | T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.1,
) -> T:
    """Poll `check` until it returns something truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = check()
            if asyncio.iscoroutine(value):
                value = await value
            if value:
                return value  # type: ignore[return-value]
        except Exception as err:  # e.g. a query while no worker is up yet
            last_error = err
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{detail}")
        await asyncio.sleep(interval)


async def wait_polling(client: Client, worker: WorkerProcess, timeout: float = 60) -> None:
    """Wait until this worker process polls its task queue (workflow and activity tasks).

    Two answers count. The root partition's list shows every poller that reached it,
    whatever its version; but a worker whose long polls all went to other partitions is
    polling too, and the root lists it only when those polls end, a minute later. The
    enhanced describe asks every partition, for the unversioned pollers and every active
    build.
    """
    kinds = [TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY]
    queue = TaskQueue(name=worker.task_queue)
    everywhere = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=queue,
        api_mode=DescribeTaskQueueMode.DESCRIBE_TASK_QUEUE_MODE_ENHANCED,
        versions=TaskQueueVersionSelection(unversioned=True, all_active=True),
        task_queue_types=kinds,
        report_pollers=True,
    )

    def ours(pollers) -> bool:
        return any(p.identity.startswith(f"{worker.pid}@") for p in pollers)

    deadline = time.monotonic() + timeout
    while True:
        if not worker.alive():
            raise AssertionError(
                f"worker {worker.pid} exited with {worker.process.returncode}:\n{worker.log()}"
            )
        seen = set()
        for kind in kinds:
            root = DescribeTaskQueueRequest(
                namespace=client.namespace, task_queue=queue, task_queue_type=kind
            )
            if ours((await client.workflow_service.describe_task_queue(root)).pollers):
                seen.add(kind)
        if seen != set(kinds):
            response = await client.workflow_service.describe_task_queue(everywhere)
            seen |= {
                kind
                for version in response.versions_info.values()
                for kind, info in version.types_info.items()
                if ours(info.pollers)
            }
        if seen >= set(kinds):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"worker {worker.pid} did not poll {worker.task_queue} within {timeout:g} s")
        await asyncio.sleep(0.2)


async def status_of(handle: WorkflowHandle) -> SessionStatus:
    return await handle.query("status", result_type=SessionStatus)


async def wait_for_status(
    handle: WorkflowHandle, status: str, timeout: float = 60, *, queried: bool = True
) -> SessionStatus:
    """Until the session's status is `status`: asked of its worker (a query), or with
    `queried=False` read from its history as `client.py status` reads it (no query reaches
    the worker, so none can end a workflow task while a local activity runs: the tests of
    exact billable-action counts wait this way)."""

    async def check() -> SessionStatus | None:
        if queried:
            snapshot = await status_of(handle)
        else:
            from sessions import control

            snapshot = await control.status(handle._client, handle.id)  # pyright: ignore[reportPrivateUsage]
        if snapshot.status != status and snapshot.status in FINAL_STATUSES:
            raise AssertionError(f"session {handle.id} ended {snapshot.status}, never {status}")
        return snapshot if snapshot.status == status else None

    return await wait_until(check, timeout=timeout, what=f"session {handle.id} to be {status}")


def effects_of(session_id: str, tool: str | None = None) -> list[dict[str, Any]]:
    return [
        e for e in read_effects() if e["session_id"] == session_id and (tool is None or e["tool"] == tool)
    ]


async def wait_for_effects(
    session_id: str, tool: str, count: int = 1, timeout: float = 30
) -> list[dict[str, Any]]:
    def check() -> list[dict[str, Any]] | None:
        found = effects_of(session_id, tool)
        return found if len(found) >= count else None

    return await wait_until(check, timeout=timeout, what=f"{count} run(s) of {tool} in session {session_id}")


def model_requests(fake_model: Any, session_id: str, step: int | None = None) -> list[dict[str, Any]]:
    with fake_model.script.lock:
        found = list(fake_model.script.requests)
    return [r for r in found if r["session"] == session_id and (step is None or r["step"] == str(step))]


async def wait_for_model_request(
    fake_model: Any, session_id: str, step: int, count: int = 1, timeout: float = 30
) -> list[dict[str, Any]]:
    def check() -> list[dict[str, Any]] | None:
        found = model_requests(fake_model, session_id, step)
        return found if len(found) >= count else None

    return await wait_until(check, timeout=timeout, what=f"model call {step} of session {session_id}")


# ---- sessions ----------------------------------------------------------------------------


async def start_session(
    client: Client,
    fake_model: Any,
    task_queue: str,
    turns: list[dict[str, Any]] | None,
    *,
    goal: str = "do the thing",
    session_id: str | None = None,
    **fields: Any,
) -> WorkflowHandle:
    """Script the fake model for a new session and start its workflow on `task_queue`."""
    session_id = session_id or f"proc-{uuid.uuid4().hex[:10]}"
    if turns is not None:
        fake_model.script.set(session_id, turns)
    limits = fields.pop("limits", {})
    session_input = SessionInput(goal=goal, limits=Limits(**limits), **fields)
    return await client.start_workflow(AgentWorkflow.run, session_input, id=session_id, task_queue=task_queue)


async def result_of(handle: WorkflowHandle, timeout: float = 60) -> SessionStatus:
    return await asyncio.wait_for(handle.result(), timeout=timeout)


async def end_if_running(handle: WorkflowHandle) -> None:
    """Teardown: terminate a session a failed test left running."""
    try:
        description = await handle.describe()
        if description.status is not None and description.status.name == "RUNNING":
            await handle.terminate(reason="test teardown")
    except Exception:
        pass


# ---- history -----------------------------------------------------------------------------


@dataclass
class Event:
    id: int
    type: str
    epoch: float  # the server's event time, seconds since the epoch
    activity: str | None  # the activity type, for activity events
    raw: HistoryEvent


async def events_of(handle: WorkflowHandle) -> list[Event]:
    """The workflow's history events, with the activity type resolved for activity events."""
    history = await handle.fetch_history()
    scheduled: dict[int, str] = {}
    found: list[Event] = []
    for raw in history.events:
        kind = EventType.Name(raw.event_type).removeprefix("EVENT_TYPE_")
        activity = None
        if raw.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            activity = raw.activity_task_scheduled_event_attributes.activity_type.name
            scheduled[raw.event_id] = activity
        elif kind.startswith("ACTIVITY_TASK_"):
            attrs = getattr(raw, _attr_name(kind))
            activity = scheduled.get(attrs.scheduled_event_id)
        at = raw.event_time.seconds + raw.event_time.nanos / 1e9
        found.append(Event(raw.event_id, kind, at, activity, raw))
    return found


def _attr_name(kind: str) -> str:
    return "".join(part.lower() + "_" for part in kind.split("_")) + "event_attributes"


async def holder(handle: WorkflowHandle, workers: list[WorkerProcess]) -> WorkerProcess:
    """The worker process the session is on: its running activity's, else its last workflow task's."""
    description = await handle.describe()
    identities = [a.last_worker_identity for a in description.raw_description.pending_activities]
    if not any(identities):
        events = await events_of(handle)
        tasks = [e for e in events if e.type == "WORKFLOW_TASK_STARTED"]
        identities = [tasks[-1].raw.workflow_task_started_event_attributes.identity]
    pid = int([i for i in identities if i][-1].split("@")[0])
    return next(w for w in workers if w.pid == pid)


def first_after(events: list[Event], epoch: float, type: str, activity: str | None = None) -> Event:
    for event in events:
        if event.type == type and (activity is None or event.activity == activity) and event.epoch >= epoch:
            return event
    raise AssertionError(f"no {type} {activity or ''} after {epoch}")


# ---- a test's processes and sessions -----------------------------------------------------


class ProcessHarness:
    """Worker processes on one task queue, the fake model, and the sessions a test starts."""

    def __init__(self, client: Client, fake_model: Any, workers: Workers):
        self.client = client
        self.fake_model = fake_model
        self.workers = workers
        self.handles: list[WorkflowHandle] = []

    @property
    def task_queue(self) -> str:
        return self.workers.task_queue

    async def worker(self, *args: str, ready: bool = True) -> WorkerProcess:
        """Start a worker process (`args`: more flags); with `ready`, wait until it polls the task queue."""
        worker = self.workers.start(*args)
        if ready:
            await wait_polling(self.client, worker)
        return worker

    async def worker_pool(self, count: int, *args: str) -> list[WorkerProcess]:
        """Start `count` worker processes at once (`args`: more flags) and wait until every one polls."""
        started = [self.workers.start(*args) for _ in range(count)]
        await asyncio.gather(*(wait_polling(self.client, w) for w in started))
        return started

    async def start(self, turns: list[dict[str, Any]] | None, **kwargs: Any) -> WorkflowHandle:
        handle = await start_session(self.client, self.fake_model, self.task_queue, turns, **kwargs)
        self.handles.append(handle)
        return handle

    def requests(self, session_id: str, step: int | None = None) -> list[dict[str, Any]]:
        return model_requests(self.fake_model, session_id, step)

    async def close(self) -> None:
        for handle in self.handles:
            await end_if_running(handle)
        self.workers.close()
