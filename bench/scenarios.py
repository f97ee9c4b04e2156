"""The scenarios. Each repetition runs every contender on the same work, in a rotating
order, so that ratios are taken between runs made moments apart. `scale` runs this
project alone: 1,000 sessions at once against a model that takes a second to answer."""

from __future__ import annotations

import asyncio
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import SMALL_OUTPUT, intervals, percentile
from bench.contenders import Batch, Contender, FakeModel, TemporalContender, new_session


@dataclass
class Config:
    single_steps: int = 50
    single_reps: int = 3
    many_sessions: int = 200
    many_steps: int = 10
    many_reps: int = 3
    history_steps: tuple[int, ...] = (50, 100, 200)
    history_output: int = 5000
    timeout_s: float = 300
    scale_sessions: int = 1000
    scale_steps: int = 10
    scale_delay_s: float = 1.0
    scale_timeout_s: float = 1800
    # The scale scenario (bench/waiting.py): sessions waiting for a person, then approved.
    waiting_sizes: tuple[int, ...] = (100, 1000, 10_000)
    # With Temporal's default poll limits, the server's queues allow a burst of polls and
    # then 20 a second: a closing workflow spends some of that burst, and the next run's
    # steps show a 50 ms quantum. Every measured run starts after this pause, so each
    # starts alike on either server.
    settle_s: float = 3.0
    # The economy scenario (bench/economy.py): model calls a session (each but the last
    # asks for one tool call), words a turn, seconds a word, sessions per contender,
    # followers of the watched session.
    economy_calls: int = 5
    economy_words: int = 120
    economy_pace_s: float = 0.05
    economy_reps: int = 3
    economy_watchers: int = 5


# The quick mode runs beside a whole test suite on two cores: its sessions at once got
# 19 s steps there, so its limit is the full mode's, not a quick one.
QUICK = Config(single_steps=5, single_reps=1, many_sessions=10, many_steps=3, many_reps=1,
               history_steps=(5, 10), history_output=5000, timeout_s=300, settle_s=1.0,
               scale_sessions=100, scale_steps=3, scale_delay_s=0.5, scale_timeout_s=120, waiting_sizes=(20,),
               economy_calls=3, economy_words=30, economy_reps=1, economy_watchers=2)  # fmt: skip

# This project's worker for the scale scenario (bench/bench_worker.py flags). Every session in
# flight stays in the workflow cache (an evicted one is replayed from its history at its
# next step), and every one can have its model call in flight: a call waiting on the
# model holds an activity slot, and with the SDK's default of 100 slots the tool calls
# queue behind the model calls. Async activities make a slot cheap. A session's next
# workflow task waits in the worker's own (sticky) queue, served in order; after the
# sticky timeout it moves to the shared queue, where it waits behind that queue's whole
# backlog: under overload the timeout must outlast the wait, or the moved tasks make the
# gap's tail (with the default 1 s, p99 84 s against a p50 of 1.1 s).
SCALE_WORKER = (
    "--sticky-timeout", "60",
    "--max-cached-workflows", "1500",
    "--max-concurrent-activities", "1500",
    "--max-concurrent-workflow-tasks", "200",
    "--workflow-pollers", "10",
    "--activity-pollers", "10",
)  # fmt: skip


@dataclass
class Results:
    # figure name -> contender -> one value per repetition
    single: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    many: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    # contender -> steps -> {"json": bytes, "proto": bytes, "events": n, "transcript": bytes, "error": str}
    history: dict[str, dict[int, dict[str, Any]]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    # server settings ("tuned", "default") -> round trip kind -> median ms
    probe: dict[str, dict[str, float]] = field(default_factory=dict)
    # one session on a dev server with Temporal's default settings: figure -> contender -> values
    reference: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    scale: dict[str, Any] = field(default_factory=dict)  # the load scenario's
    # the scale scenario's: sessions (as text) -> figures (bench/waiting.py)
    waiting: dict[str, dict[str, Any]] = field(default_factory=dict)
    # row (bench/economy.py ROWS) -> one measurement per session
    economy: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def _put(table: dict[str, dict[str, list[float]]], figure: str, key: str, value: float | None) -> None:
    table.setdefault(figure, {}).setdefault(key, []).append(float("nan") if value is None else value)


def _put_cpu(table: dict[str, dict[str, list[float]]], key: str, batch: Batch, steps: int) -> None:
    """CPU milliseconds per step: the worker's, the server's and both."""
    worker = None if batch.worker_cpu_s is None else batch.worker_cpu_s * 1000 / steps
    server = None if batch.server_cpu_s is None else batch.server_cpu_s * 1000 / steps
    _put(table, "worker_cpu_ms", key, worker)
    _put(table, "server_cpu_ms", key, server)
    _put(table, "cpu_ms", key, None if worker is None else worker + (server or 0))


def _rotated(contenders: list[Contender], rep: int) -> list[Contender]:
    k = rep % len(contenders)
    return contenders[k:] + contenders[:k]


def _note_errors(results: Results, contender: Contender, batch: Batch, what: str) -> int:
    failed = [o for o in batch.outcomes if not o.ok]
    for o in failed[:3]:
        results.errors.append(f"{contender.key}, {what}: {o.error}")
    return len(failed)


async def warm_up(contenders: list[Contender], fake: FakeModel, log) -> None:
    for c in contenders:
        batch = await c.run([(new_session(f"warm-{c.key}"), 3, SMALL_OUTPUT) for _ in range(4)], fake, 120)
        bad = [o.error for o in batch.outcomes if not o.ok]
        if bad:
            raise RuntimeError(f"{c.key} failed its warm-up session: {bad[0]}")
        log(f"  warm: {c.key} ok")


async def single(contenders: list[Contender], fake: FakeModel, cfg: Config, results: Results, log) -> None:
    """One session of N steps, one tool call per step: the time per step."""
    for rep in range(cfg.single_reps):
        medians: dict[str, float] = {}
        for c in _rotated(contenders, rep):
            await asyncio.sleep(cfg.settle_s)
            batch = await c.run(
                [(new_session(f"one-{c.key}"), cfg.single_steps, SMALL_OUTPUT)], fake, cfg.timeout_s
            )
            if _note_errors(results, c, batch, "single session"):
                _put(results.single, "median_ms", c.key, None)
                _put(results.single, "p99_ms", c.key, None)
                _put(results.single, "mean_ms", c.key, None)
                continue
            steps = intervals(batch.outcomes[0].step_starts)
            medians[c.key] = statistics.median(steps) * 1000
            _put(results.single, "median_ms", c.key, medians[c.key])
            _put(results.single, "p99_ms", c.key, percentile(steps, 99) * 1000)
            _put(results.single, "mean_ms", c.key, batch.wall_s / cfg.single_steps * 1000)
            _put(results.single, "streamed", c.key, batch.streamed_share)  # of its model requests
            _put_cpu(results.single, c.key, batch, cfg.single_steps)
        plain = medians.get("plain")
        for c in contenders:
            if c.key != "plain":
                value = medians.get(c.key)
                _put(results.single, "overhead_ms", c.key,
                     None if value is None or plain is None else value - plain)  # fmt: skip
        log(f"  single rep {rep + 1}: " + ", ".join(f"{k} {v:.1f} ms" for k, v in medians.items()))


async def many(contenders: list[Contender], fake: FakeModel, cfg: Config, results: Results, log) -> None:
    """Many sessions at once: throughput, step latency, the worker's peak memory."""
    total = cfg.many_sessions * cfg.many_steps
    for rep in range(cfg.many_reps):
        line = []
        for c in _rotated(contenders, rep):
            await asyncio.sleep(cfg.settle_s)
            sessions = [
                (new_session(f"many-{c.key}"), cfg.many_steps, SMALL_OUTPUT) for _ in range(cfg.many_sessions)
            ]
            batch = await c.run(sessions, fake, cfg.timeout_s)
            failed = _note_errors(results, c, batch, "many sessions")
            steps = [s for o in batch.outcomes if o.ok for s in intervals(o.step_starts)]
            done = total - failed * cfg.many_steps
            _put(results.many, "steps_per_s", c.key, done / batch.wall_s if not failed else None)
            _put(results.many, "p99_ms", c.key, percentile(steps, 99) * 1000 if steps else None)
            _put(results.many, "median_ms", c.key, statistics.median(steps) * 1000 if steps else None)
            _put(results.many, "peak_rss_mb", c.key, batch.peak_rss_mb)
            _put(results.many, "wall_s", c.key, batch.wall_s)
            _put_cpu(results.many, c.key, batch, done)
            line.append(f"{c.key} {done / batch.wall_s:.0f}/s")
        log(f"  many rep {rep + 1}: " + ", ".join(line))


async def history(contenders: list[Contender], fake: FakeModel, cfg: Config, results: Results, log) -> None:
    """Sessions of growing length with large tool outputs: what each records."""
    for c in contenders:
        sessions = [(new_session(f"hist{n}-{c.key}"), n, cfg.history_output) for n in cfg.history_steps]
        batch = await c.run(sessions, fake, cfg.timeout_s * 2, history=True)
        found = results.history.setdefault(c.key, {})
        for (_, n, _), o in zip(sessions, batch.outcomes, strict=False):
            found[n] = {
                "json": o.history_json_bytes,
                "proto": o.history_proto_bytes,
                "events": o.history_events,
                "largest_run_json": getattr(o, "largest_run_json", None),
                "runs": getattr(o, "runs", None),
                "transcript": o.transcript_bytes,
                "error": o.error,
            }
        log(f"  history: {c.key} " + ", ".join(
            f"{n} steps {(v['json'] or v['transcript'] or 0) / 1e6:.2f} MB" + (" (failed)" if v["error"] else "")
            for n, v in found.items()))  # fmt: skip


async def reference(contenders: list[Contender], fake: FakeModel, cfg: Config, results: Results, log) -> None:
    """One session of N steps per contender, once: the figures on a server with default settings."""
    medians: dict[str, float] = {}
    for c in contenders:
        await asyncio.sleep(cfg.settle_s)
        batch = await c.run(
            [(new_session(f"ref-{c.key}"), cfg.single_steps, SMALL_OUTPUT)], fake, cfg.timeout_s
        )
        if _note_errors(results, c, batch, "reference session"):
            continue
        steps = intervals(batch.outcomes[0].step_starts)
        medians[c.key] = statistics.median(steps) * 1000
        _put(results.reference, "median_ms", c.key, medians[c.key])
        _put(results.reference, "p99_ms", c.key, percentile(steps, 99) * 1000)
        _put_cpu(results.reference, c.key, batch, cfg.single_steps)
    for key, value in medians.items():
        if key != "plain" and "plain" in medians:
            _put(results.reference, "overhead_ms", key, value - medians["plain"])
    log("  reference: " + ", ".join(f"{k} {v:.1f} ms" for k, v in medians.items()))


def _tool_results(tool_log: Path) -> dict[tuple[str, int], float]:
    """(session, step) -> when the tool call of that step returned, from the tool's log."""
    found: dict[tuple[str, int], float] = {}
    if not tool_log.exists():
        return found
    for line in tool_log.read_text().splitlines():
        at, session, step = line.split(" ")
        found[(session, int(step.lstrip("q")))] = float(at)
    return found


async def _task_waits(c: TemporalContender, session: str) -> list[tuple[float, bool]]:
    """Per tool result, in order: how long the next workflow task waited to be picked up
    (scheduled to started, by the server's clock), and whether it timed out on the way."""
    from temporalio.api.enums.v1 import EventType

    events = (await c.client.get_workflow_handle(session).fetch_history()).events
    model = {e.event_id for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
             and e.activity_task_scheduled_event_attributes.activity_type.name == "call_model"}  # fmt: skip
    waits: list[tuple[float, bool]] = []
    after_tool = False  # a tool's result came in; its workflow task is next
    scheduled: float | None = None
    moved = False
    for e in events:
        t = e.event_time.ToNanoseconds() / 1e9
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            after_tool = e.activity_task_completed_event_attributes.scheduled_event_id not in model
        elif (
            e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED and after_tool and scheduled is None
        ):
            scheduled, moved = t, False
        elif e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT and scheduled is not None:
            moved = True
        elif e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED and scheduled is not None:
            waits.append((t - scheduled, moved))
            after_tool, scheduled = False, None
    return waits


async def scale(c: Contender, fake: FakeModel, cfg: Config, results: Results, log, tool_log: Path) -> None:
    """Many sessions at once with a slow model: nothing lost, memory per session, the
    orchestration gap (a tool's result to the session's next model request) under load."""
    n, steps = cfg.scale_sessions, cfg.scale_steps
    sessions = [(new_session("scale"), steps, SMALL_OUTPUT) for _ in range(n)]
    batch = await c.run(sessions, fake, cfg.scale_timeout_s, delay=cfg.scale_delay_s)
    failed = _note_errors(results, c, batch, "scale")
    tools = _tool_results(tool_log)
    gaps: list[float] = []
    queued: list[float] = []  # of each gap, the workflow task's wait (ms)
    moved = 0  # steps whose task timed out on the worker's sticky queue
    for o in batch.outcomes:
        waits = await _task_waits(c, o.session) if o.ok and isinstance(c, TemporalContender) else []
        for step, start in enumerate(sorted(o.step_starts)[1:], start=1):
            if (o.session, step) in tools:
                gaps.append((start - tools[(o.session, step)]) * 1000)
                if step <= len(waits):
                    queued.append(waits[step - 1][0] * 1000)
                    moved += waits[step - 1][1]
    done = (n - failed) * steps
    grown = (
        None
        if batch.peak_rss_mb is None or batch.rss_before_mb is None
        else batch.peak_rss_mb - batch.rss_before_mb
    )
    results.scale = {
        "sessions": n, "steps": steps, "delay_s": cfg.scale_delay_s, "completed": n - failed, "failed": failed,
        "wall_s": batch.wall_s, "steps_per_s": done / batch.wall_s,
        "gap_p50_ms": percentile(gaps, 50), "gap_p99_ms": percentile(gaps, 99),
        "gap_max_ms": max(gaps) if gaps else float("nan"), "gaps": len(gaps),
        "rss_before_mb": batch.rss_before_mb, "peak_rss_mb": batch.peak_rss_mb,
        "kb_per_session": None if grown is None else grown * 1024 / n,
        "worker_cpu_s": batch.worker_cpu_s, "server_cpu_s": batch.server_cpu_s,
        "worker_cpu_ms": None if batch.worker_cpu_s is None else batch.worker_cpu_s * 1000 / max(done, 1),
        "server_cpu_ms": None if batch.server_cpu_s is None else batch.server_cpu_s * 1000 / max(done, 1),
        "worker_flags": " ".join(SCALE_WORKER),
        "queued_p50_ms": percentile(queued, 50), "queued_p99_ms": percentile(queued, 99), "moved": moved,
    }  # fmt: skip
    r = results.scale
    log(f"  scale: {r['completed']}/{n} completed, {r['steps_per_s']:.0f} steps/s, gap p50 {r['gap_p50_ms']:.0f} ms "
        f"p99 {r['gap_p99_ms']:.0f} ms, peak RSS {r['peak_rss_mb']:.0f} MB")  # fmt: skip
