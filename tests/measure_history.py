"""`python -m tests.measure_history`: history size by session length, and what a long
session carries from run to run; writes docs/generated/long-sessions.md.

Runs sessions of 50, 100, 200 and 400 steps, each step one tool call returning 5 KB,
through the fake model on a dev server of its own, and measures every run's event
history as `temporal workflow show --output json` prints it (the SDK's `to_json`). Then
one session of 3,000 steps (tests/measure_carried.py): the input of each continue-as-new,
the time per step and the worker's memory. The figures are kept in long-sessions.json, so
that `--steps ''` or `--carried-steps 0` measure one part and keep the other's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import tempfile
import time
import uuid
from pathlib import Path

from devservers import temporal_server
from devservers.fakemodel import FakeModelServer
from infra.connection import connect
from sessions import control
from tests.conftest import model_activities
from tests.measure_carried import BUCKET, measure_carried
from tests.support.tools import TOOLS
from worker import build_worker
from workflows.agent import AgentWorkflow
from workflows.contract import Limits, SessionInput

PAGE = Path(__file__).resolve().parents[1] / "docs" / "generated" / "long-sessions.md"
DATA = PAGE.with_suffix(".json")
OUTPUT_CHARS = 5000


async def measure(client, fake: FakeModelServer, queue: str, steps: int, can_every: int) -> dict:
    session = f"history-{steps}-{uuid.uuid4().hex[:6]}"
    turns = [
        {"tool_calls": [{"name": "big_output", "input": {"chars": OUTPUT_CHARS}, "id": f"b{i}"}]}
        for i in range(steps)
    ]
    fake.script.set(session, [*turns, {"text": "done"}])
    limits = Limits(max_steps=steps + 1, token_budget=10**12, continue_as_new_after_steps=can_every)
    started = time.monotonic()
    handle = await client.start_workflow(
        AgentWorkflow.run, SessionInput(goal="measure", limits=limits), id=session, task_queue=queue
    )
    result = await handle.result()
    seconds = time.monotonic() - started
    assert result.status == "completed", result
    history = await control.history(client, session)
    transcript = sum(len(json.dumps(m.model_dump(mode="json"))) for m in history.messages)
    total, stored, runs = 0, 0, 0
    async for execution in client.list_workflows(f"WorkflowId = '{session}'"):
        found = await client.get_workflow_handle(session, run_id=execution.run_id).fetch_history()
        total += len(found.to_json())
        stored += sum(e.ByteSize() for e in found.events)
        runs += 1
    # What re-sending the whole transcript with every model call would have recorded.
    resend = sum(
        len(json.dumps([m.model_dump(mode="json") for m in history.messages[: 2 * i + 1]]))
        for i in range(steps + 1)
    )
    return {"steps": steps, "can_every": can_every, "runs": runs, "history": total, "stored": stored,
            "transcript": transcript,
            "resend": resend, "seconds": seconds}  # fmt: skip


async def main(sizes: list[int], carried_steps: int, carried_every: int) -> None:
    data = Path(tempfile.mkdtemp(prefix="agent-history-"))
    os.environ["AGENT_DATA_DIR"] = str(data)
    server = temporal_server.start(db_file=data / "temporal.db")
    fake = FakeModelServer().start()
    found = json.loads(DATA.read_text()) if DATA.exists() else {}
    try:
        client = await connect(target_host=server.address)
        if sizes:
            model = model_activities(fake, data)
            queue = f"history-{uuid.uuid4().hex[:6]}"
            rows = []
            async with build_worker(client, TOOLS, queue=queue, model=model):
                for steps in sizes:
                    rows.append(await measure(client, fake, queue, steps, can_every=10_000))
                    print(rows[-1], flush=True)
                rows.append(await measure(client, fake, queue, max(sizes), can_every=150))
                print(rows[-1], flush=True)
            found["history"] = rows
            found["history_measured"] = time.strftime("%Y-%m-%d", time.gmtime())
        if carried_steps:
            found["carried"] = await measure_carried(
                client, server.address, fake, data, carried_steps, carried_every
            )
            print(found["carried"]["carried"][-1], flush=True)
        found["machine"] = f"{platform.machine()}, {os.cpu_count()} cores"
        DATA.write_text(json.dumps(found, indent=1) + "\n")
        write_page(found)
    finally:
        fake.stop()
        server.stop()


def write_page(found: dict) -> None:
    mb = lambda n: f"{n / 1e6:.2f} MB"  # noqa: E731
    lines = [
        "# Long sessions: history size against steps, and what each run hands to the next",
        "",
        "Written by `python -m tests.measure_history` (not by hand) from the figures it keeps in",
        "[long-sessions.json](long-sessions.json).",
        "",
        "## History size",
        "",
        "Each step is one model call",
        f"and one tool call returning {OUTPUT_CHARS // 1000} KB, through the fake model on the bundled dev server.",
        "History is every run's event history, both as Temporal stores it (protobuf bytes, what",
        "its 50 MB history limit counts) and as `temporal workflow show --output json` prints it",
        "(indented, payloads base64-encoded). The transcript is the conversation itself as JSON. The last",
        "column is computed, not run: what a design that re-sends the whole conversation with every",
        "model call would record for the same session (it grows with the square of the steps).",
        "",
        f"Measured {found.get('history_measured', '?')} on {found.get('machine', '?')}.",
        "",
        "| steps | continue-as-new | runs | stored history | per step | / transcript | history as JSON | per step | / transcript | transcript | re-sending design (JSON) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in found.get("history", []):
        can = "when Temporal suggests" if r["can_every"] >= 10_000 else f"every {r['can_every']} steps"
        lines.append(
            f"| {r['steps']} | {can} | {r['runs']} | {mb(r['stored'])} | {r['stored'] / r['steps'] / 1000:.1f} KB "
            f"| {r['stored'] / r['transcript']:.2f} | {mb(r['history'])} | {r['history'] / r['steps'] / 1000:.1f} KB "
            f"| {r['history'] / r['transcript']:.2f} | {mb(r['transcript'])} | {mb(r['resend'])} |"
        )
    lines += [
        "",
        "How: the model activity reads the transcript from a content-addressed store",
        "(`activities/transcript.py`, a folder under the data directory) and gets only the new",
        "messages; a tool output longer than 1 KB is stored by the tool activity and the next model",
        "call names it by hash, so it is recorded once (in the tool activity's result); the tool specs",
        "go inline once per run. Payloads over 256 KB go to Temporal external storage. Temporal's",
        "history limits (50 MB, 51,200 events) are then reached only after thousands of steps, and",
        "continue-as-new (every 500 steps by default, or when Temporal suggests it) starts a fresh history.",
        "",
    ]
    if carried := found.get("carried"):
        lines += carried_section(carried, found.get("machine", "?"))
    PAGE.write_text("\n".join(lines))
    print(f"wrote {PAGE}")


def carried_section(c: dict, machine: str) -> list[str]:
    kb = lambda n: f"{n / 1024:.1f} KB"  # noqa: E731
    sizes = [r["bytes"] for r in c["carried"]]
    lines = [
        f"## One session of {c['steps']:,} steps: what each run hands to the next",
        "",
        f"One session of {c['steps']:,} steps, each a model call (the fake model, scripted) and a tool call",
        f"returning {c['output_chars']:,} characters, with `--context-tokens {c['context_tokens']:,}` and",
        f"continue-as-new every {c['every']} steps ({c['runs']} runs), on one `python worker.py` process of its",
        "own (tests/measure_carried.py). *Carried* is the input each continue-as-new handed to the next",
        "run as Temporal recorded it (the ContinuedAsNew event's payload, after the codec); Temporal",
        "moves a payload above 256 KB to external storage. *Carried whole* is computed, not run: the",
        "messages, call records and trace turns so far as JSON, what the state held before each run",
        "handed its older part to the store (workflows/archive.py).",
        "",
        f"Measured {c['measured']} on {machine}. Carried: {kb(min(sizes))} to {kb(max(sizes))} over the",
        f"{len(sizes)} handovers.",
        "",
        "| continue-as-new after step | carried | carried whole (computed) | events in the run |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r['step']:,} | {kb(r['bytes'])} | {kb(r['whole'])} | {r['events']:,} |" for r in c["carried"]
    ]
    lines += [
        "",
        "Time per step (the end of one model call to the end of the next, mean over the steps) and",
        "the worker process's resident memory (the largest sampled, once a second) as the session goes:",
        "",
        "| steps | time per step | worker memory |",
        "|---|---|---|",
    ]
    for b in c["buckets"]:
        memory = "" if b["rss_mb"] is None else f"{b['rss_mb']:.0f} MB"
        lines.append(f"| {b['steps']} | {b['step_ms']:.0f} ms | {memory} |")
    buckets = c["buckets"]
    third = max(1, len(buckets) // 3)
    first_ms = sum(b["step_ms"] for b in buckets[:third]) / third
    last_ms = sum(b["step_ms"] for b in buckets[-third:]) / third
    rss = [b["rss_mb"] for b in buckets if b["rss_mb"] is not None]
    lines += [
        "",
        f"Time per step: {first_ms:.0f} ms a step over the first third of the session, {last_ms:.0f} ms over",
        "the last (the machine's two cores were shared with other work: the spread between rows is",
        "its load, not the session's length).",
        f"Worker memory: {memory_text(rss)}",
        "The workflow's state stays the size it carries, and the model activity keeps in memory,",
        "for the session's next call, only the tail of the transcript that its context budget can",
        "send (the goal and the recent messages, about `--context-tokens` of them), not the whole",
        "transcript: neither grows with the session's length. The worker's first rows grow while",
        "it warms up (its caches, the heap's first high-water mark, the first full collections of",
        "Python's garbage collector); `python worker.py` keeps its heap from growing on afterwards",
        "(infra/memory.py).",
        "",
        "What stays in the state at each handover, and what goes to the store, is in",
        "[reference/long-sessions.md](../reference/long-sessions.md#what-each-run-hands-to-the-next).",
        "",
    ]
    return lines


def memory_text(rss: list[float]) -> str:
    if not rss:
        return "not sampled."
    if len(rss) < 3:
        return f"{rss[0]:.0f} MB over the first {BUCKET} steps, {rss[-1]:.0f} MB over the last."
    later = rss[len(rss) // 3 :]
    return (
        f"{rss[0]:.0f} MB over the first {BUCKET} steps, at most {max(rss):.0f} MB a row; over the last "
        f"two thirds of the session {min(later):.0f} to {max(later):.0f} MB a row, {rss[-1]:.0f} MB over the last {BUCKET}."
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        prog="python -m tests.measure_history", description=(__doc__ or "").partition("\n")[0]
    )
    parser.add_argument(
        "--steps", default="50,100,200,400", help="comma-separated session lengths ('' to skip)"
    )
    parser.add_argument(
        "--carried-steps", type=int, default=3000, help="the long session's steps (0 to skip)"
    )
    parser.add_argument("--carried-every", type=int, default=100, help="its continue-as-new interval")
    args = parser.parse_args()
    sizes = [int(s) for s in args.steps.split(",") if s.strip()]
    asyncio.run(main(sizes, args.carried_steps, args.carried_every))
