"""`python -m bench [--quick] [--out DIR] [--only a,b]`: the benchmarks, side by side.

Starts its own Temporal dev server (headless, a fresh database), the fake Messages API
server in its own process, one worker process per contender, then runs the three
scenarios and writes `benchmarks.md` and the history plot to `--out` (default docs/).
Every process it starts is stopped by its PID at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, replace
from datetime import datetime, timezone
from pathlib import Path

from plumbing import devserver
from bench import report, scenarios
from bench.contenders import CORE, OPTIONAL, FakeModel, make
from bench.procs import ROOT, Child


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="where the page and plot go")
    parser.add_argument("--only", help="comma-separated contenders (default: all available)")
    parser.add_argument("--scenarios", default="single,many,history", help="which scenarios to run")
    parser.add_argument("--reps", type=int, help="repetitions of the timed scenarios")
    parser.add_argument("--many-reps", type=int, help="repetitions of the many-sessions scenario")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    return parser.parse_args()


def available(only: str | None) -> tuple[list[str], str]:
    wanted = [k.strip() for k in only.split(",")] if only else CORE + OPTIONAL
    unknown = set(wanted) - set(CORE + OPTIONAL)
    if unknown:
        raise SystemExit(f"unknown contenders: {', '.join(sorted(unknown))}; choose from {', '.join(CORE + OPTIONAL)}")
    skipped = ""
    if "pydantic-ai" in wanted and importlib.util.find_spec("pydantic_ai") is None:
        wanted.remove("pydantic-ai")
        skipped = "pydantic-ai (install the bench extra: pip install -e '.[bench]')"
        print(f"note: skipping {skipped}", file=sys.stderr)
    return [k for k in CORE + OPTIONAL if k in wanted], skipped


async def run(args: argparse.Namespace) -> Path:
    keys, skipped = available(args.only)
    cfg = scenarios.QUICK if args.quick else scenarios.Config()
    if args.reps:
        cfg = replace(cfg, single_reps=args.reps, many_reps=args.reps)
    if args.many_reps:
        cfg = replace(cfg, many_reps=args.many_reps)
    which = {s.strip() for s in args.scenarios.split(",")}
    work = Path(tempfile.mkdtemp(prefix="bench-"))
    env = {**os.environ, "AGENT_DATA_DIR": str(work / "data"), "PYTHONPATH": str(ROOT),
           "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
    os.environ["AGENT_DATA_DIR"] = env["AGENT_DATA_DIR"]
    started = time.monotonic()

    def log(text: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {text}", flush=True)

    server = fake_child = None
    contenders = []
    results = scenarios.Results()
    try:
        log(f"work directory {work}")
        # The dev server's default in-memory store: no disk fsync per transaction, so the
        # figures are the orchestration's, not this machine's disk latency.
        server = devserver.start(log_file=work / "temporal.log")
        fake_child = Child("fakemodel", ["-m", "bench.fakeserver"], env, work / "fakemodel.log")
        fake = FakeModel(await asyncio.to_thread(fake_child.wait_line))
        log(f"dev server {server.address} (pid {server.pid}), fake model {fake.url} (pid {fake_child.pid})")
        for key in keys:
            contenders.append(await make(key, server.address, fake.url, env, work))
            log(f"started {key} (pid {contenders[-1].child.pid})")
        await scenarios.warm_up(contenders, fake, log)
        if "single" in which:
            log(f"one session of {cfg.single_steps} steps, {cfg.single_reps} repetitions")
            await scenarios.single(contenders, fake, cfg, results, log)
        if "many" in which:
            log(f"{cfg.many_sessions} sessions of {cfg.many_steps} steps at once, {cfg.many_reps} repetitions")
            await scenarios.many(contenders, fake, cfg, results, log)
        if "history" in which:
            log(f"history: sessions of {cfg.history_steps} steps with {cfg.history_output} character outputs")
            await scenarios.history(contenders, fake, cfg, results, log)
    finally:
        for c in contenders:
            c.stop()
        if fake_child is not None:
            fake_child.stop()
        if server is not None:
            server.stop()
    meta = {
        "command": "python -m bench" + (" --quick" if args.quick else "")
        + (f" --many-reps {args.many_reps}" if args.many_reps else "") + (f" --only {args.only}" if args.only else ""),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "duration_s": time.monotonic() - started,
        "quick": args.quick,
        "skipped": skipped,
    }
    page = report.write(results, cfg, keys, args.out, meta)
    (work / "results.json").write_text(json.dumps({"config": asdict(cfg), "results": asdict(results)}, default=str))
    log(f"wrote {page}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return page


def main() -> None:
    args = parse()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
