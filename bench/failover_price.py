"""`python -m bench.failover_price`: how fast a killed worker's call moves on, against what
each step costs in Temporal Cloud's billable actions, per heartbeat setting.

For each setting in `--settings` (default `off,watch,3`): `off`, the worker without the
failover watch and without a heartbeat timeout (`--no-failover-watch`); `watch`, the
worker's default (the failover watch, infra/failover.py, no heartbeat timeout); a number,
that `--heartbeat-timeout` with the watch off. On one dev server with two `python worker.py`
processes of that setting (the tool `lookup` a regular activity, bench/project_tools.py):

- **actions a step**: `--sessions` sessions one at a time, each `--calls` model calls that
  write `--words` words at `--pace` seconds a word (about 6 s a turn, streamed), with one
  tool call between them, nobody watching (the economy scenario's steps). Actions are
  counted in the histories by Cloud's rules (bench/billing.py), heartbeats from the dev
  server's request counter; the sessions' own `temporal_actions` beside them.
- **detection after kill -9**: a session whose model call writes for `--kill-call-seconds`;
  2 s into it the worker process that runs it is killed (by its PID). Detection is the
  kill to the server handing the retry to the other worker (the retried attempt's
  ActivityTaskStarted); the next request is the kill to the retried call reaching the
  model server.
- **worker heartbeats and lists**: the RecordWorkerHeartbeat and ListWorkers requests the
  server took a second while the sessions ran (every worker process sends the first; the
  watch makes the second), and any of the server's own action counts that name a worker.

Prints a markdown table. Takes about 3 minutes plus, for the default, the model call's
start-to-close timeout (`--model-timeout`, 120 s).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from bench import billing
from bench.common import GOAL, MODEL, SYSTEM, paced_turns, prose
from bench.contenders import FakeModel
from bench.economy import HEARTBEATS, diff, metrics_url, scrape
from bench.procs import ROOT, Child
from devservers import processes, temporal_server

COUNTER_SETTLE_S = 1.0
KILL_AFTER_S = 2.0


@dataclass
class Measured:
    setting: str
    actions_a_step: float
    heartbeats_a_step: float
    counted_a_step: float  # the sessions' own temporal_actions
    detection_s: float
    next_request_s: float
    worker_beats_a_second: float
    lists_a_second: float
    worker_actions: dict[str, int]


class Workers:
    """Two `worker.py` processes of one setting on a task queue of their own."""

    def __init__(self, setting: str, address: str, fake_url: str, work: Path):
        self.queue = f"failover-{setting}-{uuid.uuid4().hex[:6]}"
        definitions = work / "agents.toml"
        definitions.write_text("")  # no agents: the bench tool is the worker's only one
        env = {
            **os.environ, "TEMPORAL_ADDRESS": address, "TEMPORAL_TASK_QUEUE": self.queue,
            "ANTHROPIC_BASE_URL": fake_url, "ANTHROPIC_API_KEY": "bench-key",
            "AGENT_DATA_DIR": str(work / "data"), "AGENT_DEFINITIONS": str(definitions), "PYTHONUNBUFFERED": "1",
        }  # fmt: skip
        flags = {"off": ["--no-failover-watch"], "watch": []}.get(
            setting, ["--heartbeat-timeout", setting, "--no-failover-watch"]
        )
        self.procs = []
        for n in range(2):
            with open(work / f"worker-{setting}-{n}.log", "ab") as log:
                self.procs.append(subprocess.Popen(
                    [sys.executable, "worker.py", "--tools", "bench.project_tools:REGULAR", *flags], cwd=ROOT,
                    env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True))  # fmt: skip

    def by_identity(self, identity: str) -> subprocess.Popen[bytes]:
        pid = int(identity.split("@")[0])
        return next(p for p in self.procs if p.pid == pid)

    def stop(self) -> None:
        for proc in self.procs:
            processes.stop(proc, grace=10)


async def start(client: Client, queue: str, session: str) -> WorkflowHandle[Any, Any]:
    from sessions import control
    from workflows.contract import SessionInput

    session_input = SessionInput(goal=GOAL, model=MODEL, system=SYSTEM,
                                 search_attributes=await control.has_search_attributes(client))  # fmt: skip
    return await control.start(client, session_input, session, task_queue=queue)


async def runs_of(client: Client, session: str) -> list[list[Any]]:
    runs: list[list[Any]] = []
    run_id: str | None = None
    while True:
        events = [e async for e in client.get_workflow_handle(session, run_id=run_id).fetch_history_events()]
        runs.insert(0, events)
        run_id = events[0].workflow_execution_started_event_attributes.continued_execution_run_id or None
        if run_id is None:
            return runs


@dataclass
class Priced:
    actions: float  # a step
    heartbeats: float  # a step
    own: float  # a step
    worker_beats: float  # a second
    lists: float  # a second
    worker_actions: dict[str, int]


async def price(
    client: Client, fake: FakeModel, queue: str, metrics: str, args: argparse.Namespace
) -> Priced:
    """Actions, heartbeats and the sessions' own count, a step (one model call and its tool);
    worker heartbeats and worker lists, a second."""
    total = beats = own = 0.0
    first = await asyncio.to_thread(scrape, metrics)
    began = time.monotonic()
    for _ in range(args.sessions):
        session = f"price-{uuid.uuid4().hex[:10]}"
        fake._call(
            "POST",
            "/_script",
            {"session": session, "turns": paced_turns(session, args.calls, args.words, args.pace)},
        )
        before = await asyncio.to_thread(scrape, metrics)
        handle = await start(client, queue, session)
        result = await asyncio.wait_for(handle.result(), args.calls * (args.words * args.pace + 30) + 60)
        await asyncio.sleep(COUNTER_SETTLE_S)
        counters = diff(before, await asyncio.to_thread(scrape, metrics))
        sent = sum(counters.get(k, 0) for k in HEARTBEATS)
        found = billing.Actions(heartbeats=sent)
        for events in await runs_of(client, session):
            found = found + billing.count(events)
        total, beats, own = total + found.total, beats + sent, own + result.temporal_actions
    steps = args.sessions * args.calls
    took = time.monotonic() - began
    grew = diff(first, await asyncio.to_thread(scrape, metrics))
    return Priced(
        total / steps, beats / steps, own / steps,
        grew.get("requests:RecordWorkerHeartbeat", 0) / took, grew.get("requests:ListWorkers", 0) / took,
        {k: v for k, v in grew.items() if k.startswith("action:") and "worker" in k.lower()},
    )  # fmt: skip


async def detection(
    client: Client, fake: FakeModel, workers: Workers, queue: str, args: argparse.Namespace
) -> tuple[float, float]:
    """Seconds from a kill -9 during a model call to the retry handed to the other worker,
    and to the retried call reaching the model server."""
    session = f"kill-{uuid.uuid4().hex[:10]}"
    words = int(args.kill_call_seconds / args.pace)
    turns = [{"text": prose(words, 1), "pace": args.pace}, {"text": "Done."}]
    fake._call("POST", "/_script", {"session": session, "turns": turns})
    handle = await start(client, queue, session)
    while not fake._call("GET", f"/_requests?session={session}"):
        await asyncio.sleep(0.05)
    await asyncio.sleep(KILL_AFTER_S)
    pending = (await handle.describe()).raw_description.pending_activities
    victim = workers.by_identity(pending[0].last_worker_identity)
    killed_at = time.time()
    processes.kill(victim)
    await asyncio.wait_for(handle.result(), args.model_timeout + 120)
    handed = next(e for e in [e async for e in handle.fetch_history_events()]
                  if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
                  and e.activity_task_started_event_attributes.attempt == 2)  # fmt: skip
    requests = sorted(r["at"] for r in fake._call("GET", f"/_requests?session={session}"))
    return handed.event_time.ToDatetime().timestamp() - killed_at, requests[1] - killed_at


async def measure(setting: str, address: str, fake: FakeModel, metrics: str, args: argparse.Namespace,
                  work: Path) -> Measured:  # fmt: skip
    from infra.connection import connect

    client = await connect(target_host=address)
    workers = Workers(setting, address, fake.url, work)
    try:
        await asyncio.sleep(5)  # both poll
        priced = await price(client, fake, workers.queue, metrics, args)
        detected, requested = await detection(client, fake, workers, workers.queue, args)
    finally:
        workers.stop()
    return Measured(setting, priced.actions, priced.heartbeats, priced.own, detected, requested,
                    priced.worker_beats, priced.lists, priced.worker_actions)  # fmt: skip


def report(found: list[Measured], args: argparse.Namespace) -> str:
    lines = [
        f"{args.sessions} sessions of {args.calls} model calls ({args.words} words at {args.pace * 1000:g} ms a word) "
        f"and a regular tool call a step; a kill -9 {KILL_AFTER_S:g} s into a {args.kill_call_seconds:g} s model call; "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}",
        "",
        "| worker | kill to retry handed over | kill to next model request | actions a step | of which heartbeats "
        "| the sessions' own count a step | worker heartbeats a second | worker lists a second |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in found:
        name = {
            "off": "--no-failover-watch (no heartbeat timeout)",
            "watch": "default (the failover watch)",
        }.get(m.setting, f"--heartbeat-timeout {m.setting} --no-failover-watch")
        lines.append(f"| {name} | {m.detection_s:.1f} s | {m.next_request_s:.1f} s | {m.actions_a_step:.1f} "
                     f"| {m.heartbeats_a_step:.1f} | {m.counted_a_step:.1f} | {m.worker_beats_a_second:.1f} "
                     f"| {m.lists_a_second:.1f} |")  # fmt: skip
    actions = {k: v for m in found for k, v in m.worker_actions.items()}
    lines += ["", f"The server's action counts that name a worker: {actions or 'none'}"]
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="failover-price-") as tmp:
        work = Path(tmp)
        env = {**os.environ}
        fake_child = Child("fake model", ["-m", "bench.fakeserver"], env, work / "fake.log")
        server = temporal_server.start(log_file=work / "temporal.log")
        try:
            fake = FakeModel(await asyncio.to_thread(fake_child.wait_line))
            found = [
                await measure(s, server.address, fake, metrics_url(server), args, work) for s in args.settings
            ]
        finally:
            server.stop()
            fake_child.stop()
    print(report(found, args))


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.failover_price", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument(
        "--settings",
        default="off,watch,3",
        type=lambda s: s.split(","),
        help="comma-separated: off (no watch, no heartbeat timeout), watch (the default) or a --heartbeat-timeout "
        "in seconds (default: %(default)s)",
    )
    parser.add_argument("--sessions", type=int, default=2)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--words", type=int, default=120)
    parser.add_argument("--pace", type=float, default=0.05)
    parser.add_argument("--kill-call-seconds", type=float, default=60.0)
    parser.add_argument(
        "--model-timeout",
        type=float,
        default=120.0,
        help="the sessions' model call timeout, which bounds the default's detection (default 120)",
    )
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
