"""The contenders as the harness drives them: start sessions, wait, collect what they did."""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle

from bench.common import GOAL, MODEL, SYSTEM, script_turns
from bench.procs import Child, cpu_seconds

LABELS = {
    "plain": "plain loop (no durability)",
    "floor": "Temporal floor",
    "project": "this project (its defaults: the tool a local activity)",
    "project-regular": "this project (the tool a regular activity, local=False)",
    "pydantic-ai": "Pydantic AI TemporalAgent",
}
SHORT = {
    "plain": "plain",
    "floor": "floor",
    "project": "project",
    "project-regular": "project-regular",
    "pydantic-ai": "pydantic-ai",
}
CORE = ["plain", "floor", "project", "project-regular"]
OPTIONAL = ["pydantic-ai"]
# How each contender runs: as its user runs it, with its own defaults. This project's
# worker runs as `python worker.py` does (bench/bench_worker.py: `worker.build_worker` with
# no flags, its 1 s sticky-queue timeout for quick failover after a kill -9, the worker
# heartbeat and the failover watch), its tool declared with the defaults (read-only and
# short: a local activity), and its sessions start as `client.py start` starts them,
# streaming on; `project-regular` is the same with the tool declared `local=False`; the floor's and Pydantic AI's workers have the SDK's default options
# (a 10 s sticky-queue timeout). The plain loop calls `messages.create`, unstreamed. Pydantic
# AI's `AnthropicModel` streams too, without an event stream handler: it leaves `max_tokens`
# at the model's maximum output, above the `anthropic` SDK's non-streaming limit, and then
# streams the request and reads the whole stream in its model activity. The floor's model
# activity makes no request. The fake server logs which requests streamed (`Batch`).


@dataclass
class Outcome:
    session: str
    ok: bool
    error: str | None = None
    step_starts: list[float] = field(default_factory=list)  # when each model call began
    history_json_bytes: int | None = None
    history_proto_bytes: int | None = None
    history_events: int | None = None
    transcript_bytes: int | None = None
    runs: int | None = None  # workflow runs in the chain (continue-as-new)
    largest_run_json: int | None = None


@dataclass
class Batch:
    wall_s: float
    outcomes: list[Outcome]
    peak_rss_mb: float | None
    worker_cpu_s: float | None = None  # CPU time of the contender's process during the batch
    server_cpu_s: float | None = None  # of the Temporal server (None for the plain loop)
    rss_before_mb: float | None = None
    model_requests: int = 0  # requests the fake model server had from the batch's sessions
    streamed_requests: int = 0  # of them, those that asked for a stream

    @property
    def streamed_share(self) -> float | None:
        return self.streamed_requests / self.model_requests if self.model_requests else None


class CpuMeter:
    """CPU seconds of the worker and of the server between `__init__` and `read()`."""

    def __init__(self, worker_pid: int, server_pid: int | None):
        self.pids = (worker_pid, server_pid)
        self.start = [cpu_seconds(p) for p in self.pids]

    def read(self) -> tuple[float | None, float | None]:
        now = [cpu_seconds(p) for p in self.pids]
        return tuple(None if a is None or b is None else b - a for a, b in zip(self.start, now, strict=False))  # type: ignore[return-value]


class FakeModel:
    def __init__(self, url: str):
        self.url = url

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("content-type", "application/json")
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.loads(resp.read())

    def script(self, sessions: list[tuple[str, int, int]], delay: float = 0) -> None:
        for session, steps, size in sessions:
            self._call(
                "POST", "/_script", {"session": session, "turns": script_turns(session, steps, size, delay)}
            )

    def set_turns(self, session: str, turns: list[dict[str, Any]]) -> None:
        """Script one session's turns as they are."""
        self._call("POST", "/_script", {"session": session, "turns": turns})

    def requests(self) -> list[dict[str, Any]]:
        """Every model request since the last reset: session, arrival time, whether it streamed."""
        return self._call("GET", "/_requests")

    def reset(self) -> None:
        self._call("POST", "/_reset", {})


def _starts(requests: list[dict[str, Any]]) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {}
    for r in requests:
        found.setdefault(r["session"], []).append(r["at"])
    return found


def _streamed(batch: Batch, requests: list[dict[str, Any]], sessions: list[tuple[str, int, int]]) -> Batch:
    """The batch with its sessions' model requests counted (the warm-up's are not theirs)."""
    ours = {s for s, _, _ in sessions}
    mine = [r for r in requests if r["session"] in ours]
    batch.model_requests, batch.streamed_requests = len(mine), sum(bool(r.get("stream")) for r in mine)
    return batch


class Contender:
    key: str

    def __init__(self, key: str, child: Child, queue: str):
        self.key, self.child, self.queue = key, child, queue
        self.server_pid: int | None = None

    @property
    def label(self) -> str:
        return LABELS[self.key]

    async def run(self, sessions: list[tuple[str, int, int]], fake: FakeModel, timeout: float,
                  history: bool = False, delay: float = 0) -> Batch:  # fmt: skip
        raise NotImplementedError

    def stop(self) -> None:
        self.child.stop()


class PlainContender(Contender):
    async def run(self, sessions, fake, timeout, history=False, delay=0):
        await asyncio.to_thread(fake.script, sessions, delay)
        self.child.reset_peak()
        rss_before = self.child.rss_mb()
        meter = CpuMeter(self.child.pid, None)
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert self.child.process.stdin and self.child.process.stdout
        self.child.process.stdin.write(json.dumps({"sessions": sessions}) + "\n")
        self.child.process.stdin.flush()
        line = await asyncio.wait_for(asyncio.to_thread(self.child.process.stdout.readline), timeout)
        wall = loop.time() - started
        worker_cpu, _ = meter.read()
        peak = self.child.peak_rss_mb()
        answer = json.loads(line)
        requests = await asyncio.to_thread(fake.requests)
        starts = _starts(requests)
        await asyncio.to_thread(fake.reset)
        outcomes = []
        for session, _, _ in sessions:
            error = answer["errors"].get(session)
            outcomes.append(
                Outcome(
                    session,
                    error is None,
                    error,
                    starts.get(session, []),
                    transcript_bytes=answer["transcript_bytes"].get(session),
                )
            )
        return _streamed(Batch(wall, outcomes, peak, worker_cpu, None, rss_before), requests, sessions)


class TemporalContender(Contender):
    def __init__(self, key: str, child: Child, queue: str, client: Client):
        super().__init__(key, child, queue)
        self.client = client

    async def start(self, session: str, steps: int, size: int) -> WorkflowHandle:
        raise NotImplementedError

    def check(self, result: Any, steps: int) -> str | None:
        return None

    def own_starts(self, result: Any) -> list[float] | None:
        return None

    async def _measure_history(self, session: str, outcome: Outcome) -> None:
        sizes = await _history_sizes(self.client, session)
        (outcome.history_json_bytes, outcome.history_proto_bytes, outcome.history_events,
         outcome.runs, outcome.largest_run_json) = sizes  # fmt: skip

    async def run(self, sessions, fake, timeout, history=False, delay=0):
        await asyncio.to_thread(fake.script, sessions, delay)
        self.child.reset_peak()
        rss_before = self.child.rss_mb()
        meter = CpuMeter(self.child.pid, self.server_pid)
        loop = asyncio.get_running_loop()
        started = loop.time()
        handles = await asyncio.gather(*(self.start(s, n, z) for s, n, z in sessions))

        async def wait(handle: WorkflowHandle) -> Any:
            try:
                return await asyncio.wait_for(handle.result(), timeout)
            except Exception as err:  # a failed or stuck session is reported, not fatal
                return err

        results = await asyncio.gather(*(wait(h) for h in handles))
        wall = loop.time() - started
        worker_cpu, server_cpu = meter.read()
        peak = self.child.peak_rss_mb()
        requests = await asyncio.to_thread(fake.requests)
        starts = _starts(requests)
        await asyncio.to_thread(fake.reset)
        outcomes = []
        for (session, steps, _), handle, result in zip(sessions, handles, results, strict=False):
            if isinstance(result, BaseException):
                error = _describe(result)
                with contextlib.suppress(Exception):
                    await handle.terminate("benchmark: failed or timed out")
            else:
                error = self.check(result, steps)
            own = None if isinstance(result, BaseException) else self.own_starts(result)
            outcome = Outcome(
                session, error is None, error, own if own is not None else starts.get(session, [])
            )
            if history:
                await self._measure_history(session, outcome)
            outcomes.append(outcome)
        return _streamed(Batch(wall, outcomes, peak, worker_cpu, server_cpu, rss_before), requests, sessions)


async def _history_sizes(client: Client, session: str) -> tuple[int, int, int, int, int]:
    """History of every run of the session (following continue-as-new back to the first):
    total JSON bytes, total protobuf bytes, events, runs, the largest run's JSON bytes."""
    from temporalio.api.history.v1 import History

    run_id: str | None = None
    total_json = total_proto = events = runs = largest = 0
    while True:
        fetched = await client.get_workflow_handle(session, run_id=run_id).fetch_history()
        size = len(fetched.to_json().encode())
        total_json += size
        largest = max(largest, size)
        total_proto += History(events=fetched.events).ByteSize()
        events += len(fetched.events)
        runs += 1
        first = fetched.events[0].workflow_execution_started_event_attributes
        run_id = first.continued_execution_run_id or None
        if run_id is None:
            return total_json, total_proto, events, runs, largest


def _describe(err: BaseException) -> str:
    if isinstance(err, asyncio.TimeoutError):
        return "timed out"
    parts = [str(err) or type(err).__name__]
    cause = err.__cause__
    while cause is not None:
        parts.append(str(cause) or type(cause).__name__)
        cause = cause.__cause__
    return ": ".join(parts)[:300]


class FloorContender(TemporalContender):
    async def start(self, session, steps, size):
        return await self.client.start_workflow("FloorWorkflow", args=[steps, size], id=session,
                                                task_queue=self.queue)  # fmt: skip

    def own_starts(self, result):
        return list(result)

    def check(self, result, steps):
        return None if len(result) == steps + 1 else f"{len(result)} model calls, expected {steps + 1}"


class ProjectContender(TemporalContender):
    stream = True  # the session input's default; the harness's `--no-stream` turns it off

    async def start(self, session, steps, size):
        from sessions import control
        from workflows.contract import Limits, SessionInput

        # As `client.py start` starts a session: streaming on (the default), search
        # attributes on (the bundled dev server registers them), the summary and details
        # it sets. Only the limits differ: the fake model emulates prompt caching, so with
        # 5 KB outputs the cache reads pass the default token budget (1M) near step 40,
        # and the default step limit is below the longest sessions here.
        session_input = SessionInput(goal=GOAL, model=MODEL, system=SYSTEM, search_attributes=True, stream=self.stream,
                                     limits=Limits(max_steps=steps + 1, token_budget=10**12))  # fmt: skip
        return await control.start(self.client, session_input, session, task_queue=self.queue)

    def check(self, result, steps):
        found = result if isinstance(result, dict) else vars(result) if hasattr(result, "__dict__") else {}
        status = found.get("status")
        if status != "completed":
            return f"ended {status}: {found.get('error') or found.get('stop_reason')}"
        return None


class PydanticAIContender(TemporalContender):
    async def start(self, session, steps, size):
        from bench.pai_workflow import PaiInput, PydanticAIBenchWorkflow

        return await self.client.start_workflow(
            PydanticAIBenchWorkflow.run,
            PaiInput(goal=GOAL, session=session),
            id=session,
            task_queue=self.queue,
        )

    def check(self, result, steps):
        return None if isinstance(result, str) and result.startswith("Done") else f"answer {result!r}"


def new_session(prefix: str) -> str:
    return f"bench-{prefix}-{uuid.uuid4().hex[:10]}"


async def make(key: str, address: str, fake_url: str, env: dict[str, str], logs: Path,
               server_pid: int | None = None, worker_args: tuple[str, ...] = (),
               log_name: str | None = None) -> Contender:  # fmt: skip
    """Start the contender's process and the client that drives it. `worker_args` are
    `worker.py`'s flags for this project's worker (none: its defaults)."""
    contender = await _make(key, address, fake_url, env, logs / f"{log_name or key}.log", worker_args)
    contender.server_pid = server_pid
    return contender


async def _make(key: str, address: str, fake_url: str, env: dict[str, str], log: Path,
                worker_args: tuple[str, ...]) -> Contender:  # fmt: skip
    queue = f"bench-{key}-{uuid.uuid4().hex[:6]}"
    if key == "plain":
        child = Child(key, ["-m", "bench.plain", fake_url], env, log, stdin=True)
    else:
        child = Child(
            key, ["-m", "bench.bench_worker", key, address, queue, fake_url, *worker_args], env, log
        )
    ready = await asyncio.wait_for(asyncio.to_thread(child.wait_line), 120)
    if ready != "ready":
        child.stop()
        raise RuntimeError(f"{key}: unexpected first line {ready!r}")
    if key == "plain":
        return PlainContender(key, child, queue)
    if key == "floor":
        return FloorContender(key, child, queue, await Client.connect(address))
    if key in ("project", "project-regular"):
        from infra.connection import connect

        return ProjectContender(key, child, queue, await connect(target_host=address))
    if key in ("pydantic-ai", "pydantic-ai-stream"):
        from pydantic_ai.durable_exec.temporal import PydanticAIPlugin

        client = await Client.connect(address, plugins=[PydanticAIPlugin()])
        return PydanticAIContender(key, child, queue, client)
    raise ValueError(key)
