"""`python -m bench.failover_load`: what shorter failover timeouts cost at 200 sessions.

Failover after a kill -9 is bounded by the activity heartbeat timeout (a dead worker's
model call or tool is noticed when its heartbeats stop) and by the worker's sticky-queue
schedule-to-start timeout (a workflow task offered to a dead worker's sticky queue). Both
are timers the server keeps for every running activity and workflow task, whether a
worker dies or not. This runs the same load once per setting, each on its own dev server
and worker process: SESSIONS sessions at once, each STEPS steps of a model call that
takes MODEL_S seconds and a tool that takes TOOL_S seconds, and reads the CPU seconds the
server and the worker used from /proc/PID/stat, and the timeouts in the histories.

`python -m bench.failover_load worker ...` is the worker process it starts.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from bench.fakeserver import BenchHTTPServer
from bench.procs import Child
from devservers import temporal_server

# heartbeat timeout s, sticky timeout s: the SDK's and our old defaults, the new ones, and
# each change alone
SETTINGS = {"old": (10.0, 10.0), "new": (3.0, 1.0), "heartbeat-3": (3.0, 10.0), "sticky-1": (10.0, 1.0)}
DEFAULT_SETTINGS = "old,new"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


@dataclass
class Outcome:
    setting: str
    heartbeat_s: float
    sticky_s: float
    wall_s: float
    server_cpu_s: float
    worker_cpu_s: float
    completed: int
    timeouts: dict[str, int]
    load_before: float  # the machine's 1-minute load average when the setting's run began


def turns(steps: int, tool_s: float, model_s: float) -> list[dict]:
    call = {"name": "slow_upsert", "input": {"key": "k", "seconds": tool_s}}
    return [
        *({"text": "", "tool_calls": [{**call, "id": f"u{i}"}], "delay": model_s} for i in range(steps)),
        {"text": "done", "delay": model_s},
    ]


async def run_sessions(
    address: str, queue: str, fake: BenchHTTPServer, args: argparse.Namespace, processes: list[int]
) -> tuple[float, list[float], int, dict[str, int]]:
    """Start the sessions at once and wait for all: the wall time and the CPU seconds of
    `processes` until the last one ended, the sessions completed, and the timeouts their
    histories record (read after the clock has stopped)."""
    from temporalio.api.enums.v1 import EventType, TimeoutType

    from infra.connection import connect
    from workflows.agent import AgentWorkflow
    from workflows.contract import SessionInput

    client = await connect(target_host=address)
    before, started = [cpu_seconds(pid) for pid in processes], time.monotonic()
    handles = []
    for _ in range(args.sessions):
        session = f"load-{uuid.uuid4().hex[:10]}"
        fake.script.set(session, turns(args.steps, args.tool_seconds, args.model_seconds))
        handles.append(
            await client.start_workflow(
                AgentWorkflow.run, SessionInput(goal="go"), id=session, task_queue=queue
            )
        )
    results = await asyncio.gather(*(h.result() for h in handles))
    wall = time.monotonic() - started
    cpu = [cpu_seconds(pid) - b for pid, b in zip(processes, before, strict=False)]
    timeouts: dict[str, int] = {}
    for handle in handles:
        async for event in handle.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
                kind = TimeoutType.Name(event.workflow_task_timed_out_event_attributes.timeout_type)
                key = "task " + kind.removeprefix("TIMEOUT_TYPE_").lower().replace("_", "-")
                timeouts[key] = timeouts.get(key, 0) + 1
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
                timeouts["activity"] = timeouts.get("activity", 0) + 1
    return wall, cpu, sum(1 for r in results if r.status == "completed"), timeouts


def measure(setting: str, args: argparse.Namespace, work: Path) -> Outcome:
    heartbeat_s, sticky_s = SETTINGS[setting]
    server = temporal_server.start(db_file=work / f"{setting}.db", log_file=work / f"{setting}-temporal.log")
    fake = BenchHTTPServer(("127.0.0.1", 0))
    threading.Thread(target=fake.serve_forever, daemon=True).start()
    fake_url = f"http://127.0.0.1:{fake.server_address[1]}"
    queue = f"load-{setting}"
    env = {**os.environ, "AGENT_DATA_DIR": str(work / setting), "PYTHONUNBUFFERED": "1"}
    worker = Child(
        f"worker-{setting}",
        [
            "-m",
            "bench.failover_load",
            "worker",
            server.address,
            queue,
            fake_url,
            str(heartbeat_s),
            str(sticky_s),
        ],
        env,
        work / f"{setting}-worker.log",
    )
    try:
        worker.wait_line()
        load = os.getloadavg()[0]
        wall, (server_cpu, worker_cpu), completed, timeouts = asyncio.run(
            run_sessions(server.address, queue, fake, args, [server.pid, worker.pid])
        )
        return Outcome(
            setting, heartbeat_s, sticky_s, wall, server_cpu, worker_cpu, completed, timeouts, load
        )
    finally:
        worker.stop()
        server.stop()
        fake.shutdown()
        fake.server_close()


def report(outcomes: list[Outcome], args: argparse.Namespace) -> str:
    lines = [
        f"{args.sessions} sessions at once, {args.steps} steps each (model {args.model_seconds:g} s, "
        f"tool {args.tool_seconds:g} s), on {os.cpu_count()} cores",
        "",
        "| setting | heartbeat timeout | sticky timeout | load average at start | wall | server CPU | worker CPU | completed | timeouts in the histories |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        lines.append(
            f"| {o.setting} | {o.heartbeat_s:g} s | {o.sticky_s:g} s | {o.load_before:.1f} | {o.wall_s:.1f} s | {o.server_cpu_s:.1f} s "
            f"| {o.worker_cpu_s:.1f} s | {o.completed} | {', '.join(f'{k}: {v}' for k, v in sorted(o.timeouts.items())) or 'none'} |"
        )
    return "\n".join(lines)


# ---- the worker process ---------------------------------------------------------------


async def worker_main(address: str, queue: str, fake_url: str, heartbeat_s: float, sticky_s: float) -> None:
    """A project worker with the given heartbeat timeout (`worker.py --heartbeat-timeout`)."""
    import signal

    import anthropic

    from activities.model import ModelActivities
    from activities.transcript import TranscriptStore
    from infra.connection import connect
    from infra.datadir import data_dir
    from tests.support.tools import TOOLS
    from worker import build_worker

    client = await connect(target_host=address)
    model = ModelActivities(
        store=TranscriptStore(data_dir() / "transcripts"),
        client=anthropic.AsyncAnthropic(base_url=fake_url, api_key="bench-key", max_retries=0),
    )
    worker = build_worker(
        client,
        TOOLS,
        queue=queue,
        model=model,
        heartbeat_timeout=timedelta(seconds=heartbeat_s),
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=sticky_s),
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with worker:
        print("ready", flush=True)
        await stop.wait()


def main() -> None:
    if sys.argv[1:2] == ["worker"]:
        address, queue, fake_url, heartbeat_s, sticky_s = sys.argv[2:7]
        asyncio.run(worker_main(address, queue, fake_url, float(heartbeat_s), float(sticky_s)))
        return
    parser = argparse.ArgumentParser(
        prog="python -m bench.failover_load", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--tool-seconds", type=float, default=10.0)
    parser.add_argument("--model-seconds", type=float, default=2.0)
    parser.add_argument(
        "--settings",
        default=DEFAULT_SETTINGS,
        help=f"comma-separated, of: {', '.join(SETTINGS)} (default: %(default)s)",
    )
    args = parser.parse_args()
    names = args.settings.split(",")
    if unknown := set(names) - set(SETTINGS):
        parser.error(f"unknown setting {sorted(unknown)[0]!r}; known: {', '.join(SETTINGS)}")
    with tempfile.TemporaryDirectory(prefix="failover-load-") as tmp:
        outcomes = [measure(name, args, Path(tmp)) for name in names]
    print(report(outcomes, args))


if __name__ == "__main__":
    main()
