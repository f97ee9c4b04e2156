"""`python -m bench [--quick] [--scale] [--out DIR] [--only a,b]`: the benchmarks, side by side.

Starts its own Temporal dev server (headless, a fresh database, the bundled server's
tuned settings), the fake Messages API server in its own process, one worker process
per contender, then runs the scenarios and writes `benchmarks.md` and the history plot
to `--out` (default docs/generated/). Then, for reference, the same contenders once more on a
dev server with Temporal's default settings (one session; round trips of the server
alone on both). The economy scenario measures what a step costs in Temporal Cloud's
billable actions and in history with a model writing at a real model's pace
(bench/economy.py). `--scale` adds the load scenario, 1,000 sessions at once with a slow
model. The scale scenario (`--scenarios scale`, bench/waiting.py) runs 100, 1,000 and
10,000 sessions waiting for a person on this project's defaults (the dev server, one
`worker.py` without flags, `api.py`), approves them all, and writes what it measured into
docs/operations/sizing.md (with `--quick`: 20 sessions, into `--out`). Every
process it starts is stopped by its PID at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path

from bench import economy, probe, report, scenarios, waiting
from bench.contenders import CORE, OPTIONAL, Contender, FakeModel, ProjectContender, make
from bench.procs import ROOT, Child
from devservers import temporal_server
from worker import add_capacity_flags

DEFAULT_SCENARIOS = "single,many,history,economy"


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "docs" / "generated", help="where the page and plot go"
    )
    parser.add_argument("--only", help="comma-separated contenders (default: all available)")
    parser.add_argument("--scenarios", default=DEFAULT_SCENARIOS,
                        help="which scenarios to run (single, many, history, load, scale, economy)")  # fmt: skip
    parser.add_argument(
        "--scale", action="store_true", help="add the load scenario (1,000 sessions at once, slow model)"
    )
    parser.add_argument("--server", choices=("tuned", "default"), default="tuned",
                        help="the dev server's settings for the main run (default: tuned)")  # fmt: skip
    parser.add_argument(
        "--gomaxprocs", type=int, help="GOMAXPROCS for the dev server (default: the runtime's)"
    )
    parser.add_argument(
        "--no-reference", action="store_true", help="skip the reference run on a default server"
    )
    parser.add_argument("--render", type=Path, metavar="RESULTS_JSON",
                        help="write the page again from a kept run's results.json, running nothing")  # fmt: skip
    parser.add_argument("--project-flags", default="", metavar="FLAGS",
                        help="worker.py flags for this project's worker in single, many, history and the reference "
                             "run, e.g. '--sticky-timeout 10' (default: none, its own defaults)")  # fmt: skip
    parser.add_argument("--no-stream", action="store_true",
                        help="start this project's sessions with stream=False in single, many, history and the "
                             "reference run (no CLI or API setting offers it; it measures what streaming costs)")  # fmt: skip
    parser.add_argument("--sessions", metavar="N,N", help="the scale scenario's sizes (default 100,1000,10000; "
                        "quick: 20); other sizes write the measured section into --out, not the docs")  # fmt: skip
    parser.add_argument("--reps", type=int, help="repetitions of the timed scenarios")
    parser.add_argument("--many-reps", type=int, help="repetitions of the many-sessions scenario")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    return parser.parse_args()


def available(only: str | None) -> tuple[list[str], str]:
    wanted = [k.strip() for k in only.split(",")] if only else CORE + OPTIONAL
    unknown = set(wanted) - set(CORE + OPTIONAL)
    if unknown:
        raise SystemExit(
            f"unknown contenders: {', '.join(sorted(unknown))}; choose from {', '.join(CORE + OPTIONAL)}"
        )
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
    if args.sessions:
        cfg = replace(cfg, waiting_sizes=tuple(int(n) for n in args.sessions.split(",")))
    check_flags(args.project_flags)
    which = {s.strip() for s in args.scenarios.split(",")} | ({"load"} if args.scale else set())
    known = ("single", "many", "history", "load", "scale", "economy")
    if unknown := which - set(known):
        raise SystemExit(f"unknown scenarios: {', '.join(sorted(unknown))}; choose from {', '.join(known)}")
    main_run = bool(which & {"single", "many", "history"})  # the contenders side by side, then the reference
    work = Path(tempfile.mkdtemp(prefix="bench-"))
    env = {**os.environ, "AGENT_DATA_DIR": str(work / "data"), "PYTHONPATH": str(ROOT),
           "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
    os.environ["AGENT_DATA_DIR"] = env["AGENT_DATA_DIR"]
    started = time.monotonic()
    load_start = _load()

    def log(text: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {text}", flush=True)

    server = fake_child = None
    contenders = []
    results = scenarios.Results()
    tuned = args.server == "tuned"
    try:
        log(f"work directory {work}")
        fake_child = Child(
            "devservers.fakemodel", ["-m", "bench.fakeserver"], env, work / "devservers.fakemodel.log"
        )
        fake = FakeModel(await asyncio.to_thread(fake_child.wait_line))
        # The dev server's default in-memory store: no disk fsync per transaction, so the
        # figures are the orchestration's, not this machine's disk latency.
        server = temporal_server.start(
            log_file=work / "temporal.log", tuned=tuned, gomaxprocs=args.gomaxprocs
        )
        log(f"dev server {server.address} (pid {server.pid}, {args.server} settings), "
            f"fake model {fake.url} (pid {fake_child.pid})")  # fmt: skip
        results.probe[args.server] = await probe.round_trips(server.address)
        log(f"  server round trips: {_round_trips(results.probe[args.server])}")
        for key in keys if main_run else []:
            contenders.append(await _make(key, server.address, fake.url, env, work, server.pid, args))
            log(f"started {key} (pid {contenders[-1].child.pid})")
        if main_run:
            await scenarios.warm_up(contenders, fake, log)
        if "single" in which:
            log(f"one session of {cfg.single_steps} steps, {cfg.single_reps} repetitions")
            await scenarios.single(contenders, fake, cfg, results, log)
        if "many" in which:
            log(
                f"{cfg.many_sessions} sessions of {cfg.many_steps} steps at once, {cfg.many_reps} repetitions"
            )
            await scenarios.many(contenders, fake, cfg, results, log)
        if "history" in which:
            log(f"history: sessions of {cfg.history_steps} steps with {cfg.history_output} character outputs")
            await scenarios.history(contenders, fake, cfg, results, log)
        _stop(contenders)
        if "load" in which:
            log(f"load: {cfg.scale_sessions} sessions of {cfg.scale_steps} steps at once, "
                f"the model answering after {cfg.scale_delay_s:g} s")  # fmt: skip
            scale_env = {**env, "BENCH_TOOL_LOG": str(work / "tool-calls.log")}
            contenders.append(await make("project", server.address, fake.url, scale_env, work, server.pid,
                                         scenarios.SCALE_WORKER, log_name="project-scale"))  # fmt: skip
            await scenarios.scale(contenders[-1], fake, cfg, results, log, work / "tool-calls.log")
            _stop(contenders)
        if "scale" in which:
            await waiting.run(
                server.address, server, fake, env, work, cfg.waiting_sizes, results.waiting, log
            )
        if "economy" in which:
            log(f"economy: {cfg.economy_calls} model calls a session, {cfg.economy_words} words a turn at "
                f"{cfg.economy_pace_s * 1000:g} ms a word, {cfg.economy_reps} sessions per row, one at a time")  # fmt: skip
            await economy.run(keys, server.address, server, fake, env, work, cfg, results, log)
        server.stop()
        if tuned and not args.no_reference and main_run:
            server = temporal_server.start(
                log_file=work / "temporal-default.log", tuned=False, gomaxprocs=args.gomaxprocs
            )
            log(f"reference: dev server {server.address} (pid {server.pid}) with Temporal's default settings")
            results.probe["default"] = await probe.round_trips(server.address)
            log(f"  server round trips: {_round_trips(results.probe['default'])}")
            for key in keys:
                contenders.append(await _make(key, server.address, fake.url, env, work, server.pid, args,
                                              log_name=f"{key}-default"))  # fmt: skip
            await scenarios.warm_up(contenders, fake, log)
            await scenarios.reference(contenders, fake, cfg, results, log)
    finally:
        _stop(contenders)
        if fake_child is not None:
            fake_child.stop()
        if server is not None:
            server.stop()
    meta = {
        "command": "python -m bench"
        + (" --quick" if args.quick else "")
        + (" --scale" if args.scale else "")
        + (f" --many-reps {args.many_reps}" if args.many_reps else "")
        + (f" --sessions {args.sessions}" if args.sessions else "")
        + (f" --only {args.only}" if args.only else "")
        + (f" --project-flags '{args.project_flags}'" if args.project_flags else "")
        + (" --no-stream" if args.no_stream else "")
        + (f" --scenarios {args.scenarios}" if args.scenarios != DEFAULT_SCENARIOS else ""),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "duration_s": time.monotonic() - started,
        "quick": args.quick,
        "skipped": skipped,
        "server": args.server,
        "gomaxprocs": args.gomaxprocs,
        "load_start": load_start,
        "load": _load(),
        "project_flags": args.project_flags,
        "no_stream": args.no_stream,
        "versions": report.versions(),  # the measured code's commit, kept for --render
    }
    page = report.write(results, cfg, keys, args.out, meta)
    if results.waiting:
        own = args.quick or args.sessions
        sizing = args.out / "sizing.md" if own else ROOT / "docs" / "operations" / "sizing.md"
        log(f"wrote {report.write_sizing(results.waiting, meta, sizing)}")
    saved = {"config": asdict(cfg), "results": asdict(results), "keys": keys, "meta": meta}
    (work / "results.json").write_text(json.dumps(saved, default=str))
    log(f"wrote {page}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return page


def _flags(key: str, args: argparse.Namespace) -> tuple[str, ...]:
    """`--project-flags` for this project's worker; every other contender runs its defaults."""
    return tuple(shlex.split(args.project_flags)) if key.startswith("project") else ()


async def _make(key: str, address: str, fake_url: str, env: dict[str, str], work: Path, server_pid: int,
                args: argparse.Namespace, log_name: str | None = None) -> Contender:  # fmt: skip
    """A contender of the main or the reference run, with `--project-flags` and `--no-stream`."""
    contender = await make(
        key, address, fake_url, env, work, server_pid, _flags(key, args), log_name=log_name
    )
    if isinstance(contender, ProjectContender):
        contender.stream = not args.no_stream
    return contender


def check_flags(flags: str) -> None:
    """`--project-flags` must be `worker.py`'s capacity flags: a clear error before anything starts."""
    parser = argparse.ArgumentParser(prog="--project-flags", add_help=False, exit_on_error=False)
    add_capacity_flags(parser)
    try:
        _, unknown = parser.parse_known_args(shlex.split(flags))
    except (argparse.ArgumentError, ValueError) as err:
        raise SystemExit(f"--project-flags: {err}") from None
    if unknown:
        raise SystemExit(f"--project-flags: not a worker.py capacity flag: {' '.join(unknown)}")


def _stop(contenders: list) -> None:
    while contenders:
        contenders.pop().stop()


def _round_trips(found: dict[str, float]) -> str:
    return ", ".join(f"{kind} {ms:.1f} ms" for kind, ms in found.items())


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def render(saved: Path, out: Path) -> Path:
    """The page again from a run's results.json (kept with `--keep`), e.g. after editing bench/analysis.md."""
    data = json.loads(saved.read_text())
    results = scenarios.Results(**data["results"])
    results.history = {k: {int(n): v for n, v in found.items()} for k, found in results.history.items()}
    cfg = scenarios.Config(**{k: tuple(v) if isinstance(v, list) else v for k, v in data["config"].items()})
    return report.write(results, cfg, data["keys"], out, data["meta"])


def main() -> None:
    args = parse()
    if args.render:
        print(f"wrote {render(args.render, args.out)}")
        return
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
