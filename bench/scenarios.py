"""The three scenarios. Each repetition runs every contender on the same work, in a
rotating order, so that ratios are taken between runs made moments apart."""

from __future__ import annotations

import asyncio
import statistics
from dataclasses import dataclass, field
from typing import Any

from bench.common import SMALL_OUTPUT, intervals, percentile
from bench.contenders import Batch, Contender, FakeModel, new_session


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
    # Back to back, the dev server gives steps a 50 ms quantum for a few seconds after a
    # workflow closes; every measured run starts after this pause, so each starts alike.
    settle_s: float = 3.0


QUICK = Config(single_steps=10, single_reps=2, many_sessions=20, many_steps=3, many_reps=1,
               history_steps=(5, 10, 20), history_output=5000, timeout_s=60, settle_s=1.0)  # fmt: skip


@dataclass
class Results:
    # figure name -> contender -> one value per repetition
    single: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    many: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    # contender -> steps -> {"json": bytes, "proto": bytes, "events": n, "transcript": bytes, "error": str}
    history: dict[str, dict[int, dict[str, Any]]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def _put(table: dict[str, dict[str, list[float]]], figure: str, key: str, value: float | None) -> None:
    table.setdefault(figure, {}).setdefault(key, []).append(float("nan") if value is None else value)


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
            batch = await c.run([(new_session(f"one-{c.key}"), cfg.single_steps, SMALL_OUTPUT)], fake, cfg.timeout_s)
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
            sessions = [(new_session(f"many-{c.key}"), cfg.many_steps, SMALL_OUTPUT) for _ in range(cfg.many_sessions)]
            batch = await c.run(sessions, fake, cfg.timeout_s)
            failed = _note_errors(results, c, batch, "many sessions")
            steps = [s for o in batch.outcomes if o.ok for s in intervals(o.step_starts)]
            done = total - failed * cfg.many_steps
            _put(results.many, "steps_per_s", c.key, done / batch.wall_s if not failed else None)
            _put(results.many, "p99_ms", c.key, percentile(steps, 99) * 1000 if steps else None)
            _put(results.many, "median_ms", c.key, statistics.median(steps) * 1000 if steps else None)
            _put(results.many, "peak_rss_mb", c.key, batch.peak_rss_mb)
            _put(results.many, "wall_s", c.key, batch.wall_s)
            line.append(f"{c.key} {done / batch.wall_s:.0f}/s")
        log(f"  many rep {rep + 1}: " + ", ".join(line))


async def history(contenders: list[Contender], fake: FakeModel, cfg: Config, results: Results, log) -> None:
    """Sessions of growing length with large tool outputs: what each records."""
    for c in contenders:
        sessions = [(new_session(f"hist{n}-{c.key}"), n, cfg.history_output) for n in cfg.history_steps]
        batch = await c.run(sessions, fake, cfg.timeout_s * 2, history=True)
        found = results.history.setdefault(c.key, {})
        for (_, n, _), o in zip(sessions, batch.outcomes):
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
