"""`python -m bench.profile [--contender project] [--sessions 200] [--steps 10] [--out DIR]`:
where a contender's worker spends its time under the `many` scenario's load.

Starts what `python -m bench` starts (a dev server with the tuned settings, the fake
model server, the contender's worker process as bench/bench_worker.py runs it), then runs
SESSIONS sessions of STEPS steps at once while `py-spy record --gil` samples the worker
(the thread holding the GIL: the Python work; the `bench` extra installs py-spy). It writes
the samples as collapsed stacks (`profile.txt`, for flame graph tools) and prints the
functions that hold the most samples, by their own samples and with what they call, and
the worker's and the server's CPU a step. Every process it starts is stopped by its PID.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from bench.contenders import CORE, OPTIONAL, FakeModel, TemporalContender, make, new_session
from bench.procs import ROOT, Child
from devservers import processes, temporal_server

TOP = 25


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.profile", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument(
        "--contender", default="project", choices=[k for k in CORE + OPTIONAL if k != "plain"]
    )
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples a second")
    parser.add_argument("--out", type=Path, default=Path("profile-out"), help="where profile.txt goes")
    return parser.parse_args()


async def run(args: argparse.Namespace) -> None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        raise SystemExit("py-spy is not installed: pip install -e '.[bench]'")
    work = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    env = {**os.environ, "AGENT_DATA_DIR": str(work / "data"), "PYTHONPATH": str(ROOT),
           "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
    os.environ["AGENT_DATA_DIR"] = env["AGENT_DATA_DIR"]
    args.out.mkdir(parents=True, exist_ok=True)
    samples = args.out / "profile.txt"
    fake_child = Child("fake model", ["-m", "bench.fakeserver"], env, work / "fake.log")
    server = contender = recorder = None
    try:
        fake = FakeModel(await asyncio.to_thread(fake_child.wait_line))
        server = temporal_server.start(log_file=work / "temporal.log", tuned=True)
        contender = await make(args.contender, server.address, fake.url, env, work, server.pid)
        assert isinstance(contender, TemporalContender)
        warm = [(new_session("warm"), 2, 200) for _ in range(5)]
        await contender.run(warm, fake, timeout=120)
        recorder = subprocess.Popen(
            [spy, "record", "--pid", str(contender.child.pid), "--gil", "--rate", str(args.rate),
             "--format", "raw", "--output", str(samples), "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        await asyncio.sleep(1.0)  # py-spy attaches
        sessions = [(new_session("profile"), args.steps, 200) for _ in range(args.sessions)]
        batch = await contender.run(sessions, fake, timeout=600)
        steps = args.sessions * args.steps
        failed = sum(not o.ok for o in batch.outcomes)
        print(f"{args.contender}: {steps} steps in {batch.wall_s:.1f} s ({steps / batch.wall_s:.1f} steps/s)"
              f"{f', {failed} sessions failed' if failed else ''}; worker CPU {(batch.worker_cpu_s or 0) / steps * 1000:.1f} "
              f"ms a step, server {(batch.server_cpu_s or 0) / steps * 1000:.1f} ms")  # fmt: skip
    finally:
        if recorder is not None:
            recorder.send_signal(2)  # py-spy writes its file on SIGINT
            try:
                recorder.wait(timeout=60)
            except subprocess.TimeoutExpired:
                processes.stop(recorder, grace=5)
        if contender is not None:
            contender.stop()
        if server is not None:
            server.stop()
        fake_child.stop()
        shutil.rmtree(work, ignore_errors=True)
    if samples.exists():
        report(samples)


def report(samples: Path) -> None:
    """The functions with the most samples, by own samples and inclusive of what they call."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    all_samples = 0
    for line in samples.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        all_samples += n
        frames = [_short(f) for f in stack.split(";")]
        own[frames[-1]] += n
        for frame in set(frames):
            total[frame] += n
    if not all_samples:
        print("no samples")
        return
    print(f"\n{all_samples} samples holding the GIL; {samples}")
    for title, counts in (("own", own), ("with what it calls", total)):
        print(f"\nby {title}:")
        for frame, n in counts.most_common(TOP):
            print(f"  {n / all_samples:6.1%}  {frame}")


def _short(frame: str) -> str:
    """`function (path:line)` without the line and with the path from site-packages or the project."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", str(ROOT) + "/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{name} ({path})"


def main() -> None:
    asyncio.run(run(parse()))


if __name__ == "__main__":
    main()
