"""The economy scenario: what a step costs, in Temporal Cloud's billable actions and in
history, when the model writes at a real model's pace.

Each session makes `economy_calls` model calls; each turn writes `economy_words` words at
`economy_pace_s` seconds a word (about 6 s for 120 words at 50 ms), and each but the last
asks for one regular tool call (`lookup`); the last answers. A step is one model call and
the tool call it asks for. The rows:

- `floor`: one activity per model call (a plain request to the same model server, at the
  same pace, no streaming, no heartbeat) and one per tool call (bench/floor.py);
- `project`, `project-local`: this project as a user runs it: the worker with its own
  defaults (bench/bench_worker.py without flags), the session started as `client.py start`
  starts it (streaming on, search attributes on), the tool a regular or a local activity;
- `project-watched`: `project`, each session followed from its start by
  `economy_watchers` `client.py watch ID --json` processes;
- `project-instant`: `project` with the same steps answered at once and without text: the
  history a step needs without streamed text;
- `pydantic-ai`, `pydantic-ai-stream`: Pydantic AI's `TemporalAgent` with its defaults (no
  event stream handler: its `AnthropicModel` still streams the request, since its default
  `max_tokens` is above the `anthropic` SDK's non-streaming limit, and reads the whole
  stream in the model activity), and with an event stream handler (bench/pai.py).

Sessions run one at a time. Around each, the harness reads the dev server's Prometheus
counters (`--metrics-port`): activity heartbeats that reached the server
(`service_requests{operation="RecordActivityTaskHeartbeat"}`, frontend, namespace
`default`), rejected updates and queries (never in history), and the server's own `action`
counter. The other actions come from the session's history with Temporal Cloud's rules
(bench/billing.py); the history's bytes are the length of `temporal workflow show --output
json`. Step time is from one model request's arrival at the model server to the next; the
gap is from a turn's last byte to the next request (the tool call and the orchestration).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowHandle

from bench import billing
from bench.common import GOAL, MODEL, SMALL_OUTPUT, SYSTEM, paced_turns
from bench.contenders import FakeModel, TemporalContender, make, new_session
from bench.procs import ROOT
from devservers import processes


@dataclass(frozen=True)
class Row:
    key: str
    worker: str  # the bench_worker contender that runs it
    label: str
    watched: bool = False
    instant: bool = False


ROWS = [
    Row("floor", "floor", "Temporal floor: one activity per model call and per tool call"),
    Row("project", "project", "this project, tool as a regular activity"),
    Row("project-local", "project-local", "this project, tool as a local activity"),
    Row(
        "project-watched",
        "project",
        "this project, regular tool, followed by `watch --json` processes",
        watched=True,
    ),
    Row(
        "project-instant",
        "project",
        "this project, the same steps answered at once without text",
        instant=True,
    ),
    Row("pydantic-ai", "pydantic-ai", "Pydantic AI TemporalAgent, its defaults (no event stream handler)"),
    Row("pydantic-ai-stream", "pydantic-ai-stream", "Pydantic AI TemporalAgent with an event stream handler"),
]
# Which rows each contender of `--only` brings.
BY_CONTENDER = {
    "floor": ["floor"],
    "project": ["project", "project-watched", "project-instant"],
    "project-local": ["project-local"],
    "pydantic-ai": ["pydantic-ai", "pydantic-ai-stream"],
}
HEARTBEATS = ("requests:RecordActivityTaskHeartbeat", "requests:RecordActivityTaskHeartbeatById")
# The server names it `message_UpdateWorkflowExecution:Rejection`; its Prometheus exporter, with "_".
REJECTED = (
    "action:message_UpdateWorkflowExecution_Rejection",
    "action:message_UpdateWorkflowExecution:Rejection",
)
QUERY_ACTION = "action:grpc_QueryWorkflow"
COUNTER_SETTLE_S = 1.0  # after a session, before reading the counters again


def rows_for(keys: list[str]) -> list[Row]:
    wanted = {r for k in keys for r in BY_CONTENDER.get(k, [])}
    return [r for r in ROWS if r.key in wanted]


def metrics_url(server: Any) -> str:
    """The dev server's Prometheus endpoint, from the `--metrics-port` it was started with."""
    args = [str(a) for a in server.process.args]
    return f"http://127.0.0.1:{args[args.index('--metrics-port') + 1]}/metrics"


def scrape(url: str) -> dict[str, float]:
    """The frontend's request and action counters of namespace `default`:
    `requests:<operation>` and `action:<action type>`."""
    with urllib.request.urlopen(url, timeout=30) as resp:
        text = resp.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(("service_requests{", "action{")):
            continue
        head, _, value = line.rpartition(" ")
        labels = dict(re.findall(r'(\w+)="([^"]*)"', head))
        if labels.get("namespace") != "default" or labels.get("service_name") != "frontend":
            continue
        key = f"requests:{labels.get('operation')}" if head.startswith("service_requests") else (
            f"action:{labels.get('action_type')}")  # fmt: skip
        found[key] = found.get(key, 0) + float(value)
    return found


def diff(before: dict[str, float], after: dict[str, float]) -> dict[str, int]:
    return {k: int(after[k] - before.get(k, 0)) for k in after if after[k] - before.get(k, 0)}


async def start(row: Row, c: TemporalContender, session: str, calls: int) -> WorkflowHandle[Any, Any]:
    if row.worker == "floor":
        return await c.client.start_workflow("FloorWorkflow", args=[calls - 1, SMALL_OUTPUT, True], id=session,
                                             task_queue=c.queue)  # fmt: skip
    if row.worker.startswith("project"):
        from sessions import control
        from workflows.contract import SessionInput

        # As `client.py start` starts a session: streaming on (the default), search
        # attributes when the namespace has them, the summary and details it sets.
        session_input = SessionInput(goal=GOAL, model=MODEL, system=SYSTEM,
                                     search_attributes=await control.has_search_attributes(c.client))  # fmt: skip
        return await control.start(c.client, session_input, session, task_queue=c.queue)
    from bench.pai_workflow import PaiInput, PydanticAIBenchWorkflow, PydanticAIStreamBenchWorkflow

    workflow = (
        PydanticAIStreamBenchWorkflow if row.worker == "pydantic-ai-stream" else PydanticAIBenchWorkflow
    )
    return await c.client.start_workflow(workflow.run, PaiInput(goal=GOAL, session=session), id=session,
                                         task_queue=c.queue)  # fmt: skip


def check(row: Row, c: TemporalContender, result: Any, calls: int) -> str | None:
    if row.worker == "floor":
        return None if len(result) == calls else f"{len(result)} model calls, expected {calls}"
    return c.check(result, calls - 1)


class Watchers:
    """`client.py watch ID --json` processes, started and ended by their PID."""

    def __init__(self, n: int, session: str, address: str, env: dict[str, str], work: Path):
        self.outputs = [work / f"watch-{session}-{i}.jsonl" for i in range(n)]
        env = {**env, "TEMPORAL_ADDRESS": address}
        self.procs: list[subprocess.Popen[bytes]] = []
        for out in self.outputs:
            with open(out, "wb") as stdout, open(out.with_suffix(".log"), "wb") as stderr:
                self.procs.append(subprocess.Popen(
                    [sys.executable, "client.py", "watch", session, "--json"], cwd=ROOT, env=env,
                    stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, start_new_session=True))  # fmt: skip

    def wait(self, timeout: float) -> tuple[int, int]:
        """(followers that ended by themselves with status 0, lines they printed in all)."""
        deadline = time.monotonic() + timeout
        ok = 0
        for proc in self.procs:
            try:
                ok += proc.wait(timeout=max(0.1, deadline - time.monotonic())) == 0
            except subprocess.TimeoutExpired:
                self.stop()
        lines = sum(len(out.read_bytes().splitlines()) for out in self.outputs if out.exists())
        return ok, lines

    def stop(self) -> None:
        for proc in self.procs:
            processes.stop(proc, grace=5)


async def session_once(row: Row, c: TemporalContender, fake: FakeModel, cfg: Any, metrics: str, address: str,
                       env: dict[str, str], work: Path) -> dict[str, Any]:  # fmt: skip
    """One session of the row, measured alone."""
    calls = cfg.economy_calls
    words = 0 if row.instant else cfg.economy_words
    session = new_session(f"eco-{row.key}")
    fake._call(
        "POST",
        "/_script",
        {"session": session, "turns": paced_turns(session, calls, words, cfg.economy_pace_s)},
    )
    timeout = calls * (words * cfg.economy_pace_s + 30) + 60
    before = await asyncio.to_thread(scrape, metrics)
    began = time.monotonic()
    handle = await start(row, c, session, calls)
    watchers = Watchers(cfg.economy_watchers, session, address, env, work) if row.watched else None
    error: str | None = None
    try:
        try:
            result = await asyncio.wait_for(handle.result(), timeout)
            error = check(row, c, result, calls)
        except Exception as err:  # a failed or stuck session is reported, not fatal
            error = f"{type(err).__name__}: {err}"[:300]
            with contextlib.suppress(Exception):
                await handle.terminate("benchmark: failed or timed out")
        wall = time.monotonic() - began
        followed = await asyncio.to_thread(watchers.wait, 60) if watchers else None
    finally:
        if watchers:
            watchers.stop()  # the followers end with the session; any still running, now
    await asyncio.sleep(COUNTER_SETTLE_S)
    counters = diff(before, await asyncio.to_thread(scrape, metrics))
    requests = sorted(fake._call("GET", f"/_requests?session={session}"), key=lambda r: r["at"])
    fake.reset()
    events = (await handle.fetch_history()).events
    found = billing.count(events, heartbeats=sum(counters.get(k, 0) for k in HEARTBEATS),
                          rejected_updates=sum(counters.get(k, 0) for k in REJECTED))  # fmt: skip
    starts = [r["at"] for r in requests]
    gaps = [b["at"] - a["done"] for a, b in itertools.pairwise(requests) if a.get("done")]
    measured: dict[str, Any] = {
        "session": session,
        "error": error,
        "calls": len(requests),
        "actions": found.as_dict(),
        "events": len(events),
        "json_bytes": await asyncio.to_thread(show_json_bytes, address, session),
        "step_s": statistics.median([b - a for a, b in itertools.pairwise(starts)])
        if len(starts) > 1
        else None,
        "gap_ms": statistics.median(gaps) * 1000 if gaps else None,
        "wall_s": wall,
        "server_actions": sum(
            v for k, v in counters.items() if k.startswith("action:") and k != QUERY_ACTION
        ),
        "queries": counters.get("requests:QueryWorkflow", 0),
        "counters": counters,
    }
    if followed is not None:
        measured["watchers"], measured["watcher_lines"] = cfg.economy_watchers, followed[1]
        measured["watchers_ok"] = followed[0]
        if followed[0] != cfg.economy_watchers and error is None:
            measured["error"] = (
                f"{cfg.economy_watchers - followed[0]} of {cfg.economy_watchers} followers failed"
            )
    return measured


def show_json_bytes(address: str, session: str) -> int | None:
    """The length of the history as `temporal workflow show --output json` prints it."""
    from devservers import temporal_server

    out = subprocess.run([temporal_server.temporal_binary(), "workflow", "show", "--workflow-id", session,
                          "--address", address, "--output", "json"], capture_output=True, timeout=60, check=False)  # fmt: skip
    return len(out.stdout) if out.returncode == 0 else None


async def warm_up(row: Row, c: TemporalContender, fake: FakeModel) -> None:
    """One short session, instant answers, so that the measured ones find the worker warm."""
    session = new_session(f"eco-warm-{row.worker}")
    fake._call("POST", "/_script", {"session": session, "turns": paced_turns(session, 2, 0, 0)})
    handle = await start(row, c, session, 2)
    await asyncio.wait_for(handle.result(), 120)
    fake.reset()


async def run(keys: list[str], address: str, server: Any, fake: FakeModel, env: dict[str, str], work: Path,
              cfg: Any, results: Any, log) -> None:  # fmt: skip
    """Every row's sessions, one at a time, each row's in turn (a rotating order per repetition)."""
    rows = rows_for(keys)
    metrics = metrics_url(server)
    workers: dict[str, TemporalContender] = {}
    try:
        for row in rows:
            if row.worker not in workers:
                c = await make(row.worker, address, fake.url, env, work, server.pid, log_name=f"economy-{row.worker}")  # fmt: skip
                assert isinstance(c, TemporalContender)
                workers[row.worker] = c
                await warm_up(row, c, fake)
                log(f"  economy: started {row.worker} (pid {c.child.pid})")
        await asyncio.sleep(COUNTER_SETTLE_S)  # the warm-ups' last counts, before the first reading
        for rep in range(cfg.economy_reps):
            shift = rep % len(rows)
            for row in rows[shift:] + rows[:shift]:
                found = await session_once(row, workers[row.worker], fake, cfg, metrics, address, env, work)
                results.economy.setdefault(row.key, []).append(found)
                if found["error"]:
                    results.errors.append(f"economy, {row.key}: {found['error']}")
                n = max(1, cfg.economy_calls)
                log(f"  economy rep {rep + 1}: {row.key} {found['actions']['total'] / n:.1f} actions, "
                    f"{found['events'] / n:.1f} events, {(found['json_bytes'] or 0) / n / 1000:.1f} KB a step, "
                    f"step {found['step_s'] or float('nan'):.2f} s" + (f" ({found['error']})" if found["error"] else ""))  # fmt: skip
    finally:
        for c in workers.values():
            c.stop()
