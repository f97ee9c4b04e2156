"""What one long session costs as it goes: the state each continue-as-new hands to the next
run, the worker's memory and the time per step, for `python -m tests.measure_history`.

One session of many steps, each one model call (the fake model, scripted) and one tool
call, on a `python worker.py` process of its own, so that its resident memory is the
session's and the worker's alone. The carried input is read from history as Temporal
recorded it (the payload of each ContinuedAsNew event, after the codec); the time per
step from the trace turns (the end of one model call to the end of the next); the memory
from /proc while the session runs.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from devservers.fakemodel import FakeModelServer
from sessions import control
from tests.support.procs import Workers
from workflows.agent import AgentWorkflow
from workflows.contract import Limits, SessionInput

OUTPUT_CHARS = 1000
CONTEXT_TOKENS = 20_000
BUCKET = 100  # steps per row of time and memory


async def carried_sizes(client: Client, session_id: str, first_run: str) -> list[tuple[int, int]]:
    """(events in the run, bytes of the input each continue-as-new handed on), oldest run first."""
    sizes: list[tuple[int, int]] = []
    run_id: str | None = first_run
    while run_id:
        history = await client.get_workflow_handle(session_id, run_id=run_id).fetch_history()
        run_id = None
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                attributes = event.workflow_execution_continued_as_new_event_attributes
                sizes.append((len(history.events), sum(p.ByteSize() for p in attributes.input.payloads)))
                run_id = attributes.new_execution_run_id
    return sizes


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def measure_carried(
    client: Client, address: str, fake: FakeModelServer, data: Path, steps: int, every: int
) -> dict[str, Any]:
    workers = Workers(address=address, model_url=fake.url, data_dir=data, log_dir=data / "logs")
    worker = workers.start()
    session = f"carried-{steps}-{uuid.uuid4().hex[:6]}"
    turns = [
        {
            "text": f"step {i}",
            "tool_calls": [{"name": "big_output", "input": {"chars": OUTPUT_CHARS}, "id": f"c{i}"}],
        }
        for i in range(steps)
    ]
    fake.script.set(session, [*turns, {"text": "done"}])
    limits = Limits(
        max_steps=steps + 1, token_budget=10**12, continue_as_new_after_steps=every,
        context_tokens=CONTEXT_TOKENS, max_tokens=1000, timeout_seconds=24 * 3600,
    )  # fmt: skip
    memory: list[tuple[int, int]] = []  # (steps so far, worker RSS in KB)
    done = 0
    try:
        await asyncio.sleep(3)  # the worker's start
        handle = await client.start_workflow(
            AgentWorkflow.run,
            SessionInput(goal="measure", limits=limits),
            id=session,
            task_queue=workers.task_queue,
        )
        result_task = asyncio.ensure_future(handle.result())
        while not result_task.done():
            await asyncio.wait([result_task], timeout=1.0)
            with fake.script.lock:  # the fake keeps every request's body: count them and let go
                done += sum(1 for r in fake.script.requests if r["session"] == session)
                fake.script.requests.clear()
            memory.append((done, rss_kb(worker.pid)))
        result = result_task.result()
        assert result.status == "completed", result
        assert handle.first_execution_run_id is not None
        sizes = await carried_sizes(client, session, handle.first_execution_run_id)
        history = await control.history(client, session)
    finally:
        workers.close()
    ends = [t.ended_at.timestamp() for t in history.trace]
    step_ms = [(b - a) * 1000 for a, b in itertools.pairwise(ends)]
    # What the state would have been, carried whole: its messages, calls and turns so far.
    whole: list[int] = []
    for i in range(1, len(sizes) + 1):
        at = i * every
        whole.append(
            len(json.dumps([m.model_dump(mode="json") for m in history.messages[: 2 * at + 1]]))
            + sum(len(c.model_dump_json()) for c in history.tool_calls[:at])
            + sum(len(t.model_dump_json()) for t in history.trace[:at])
        )
    rows = []
    for start in range(0, steps, BUCKET):
        window = step_ms[start : start + BUCKET]
        rss = [kb for s, kb in memory if start < s <= start + BUCKET]
        rows.append({
            "steps": f"{start + 1}-{min(steps, start + BUCKET)}",
            "step_ms": sum(window) / max(1, len(window)),
            "rss_mb": max(rss) / 1024 if rss else None,
        })  # fmt: skip
    return {
        "steps": steps, "every": every, "output_chars": OUTPUT_CHARS, "context_tokens": CONTEXT_TOKENS,
        "carried": [{"step": (i + 1) * every, "events": e, "bytes": b, "whole": w}
                    for i, ((e, b), w) in enumerate(zip(sizes, whole, strict=True))],
        "buckets": rows, "runs": len(sizes) + 1, "measured": time.strftime("%Y-%m-%d", time.gmtime()),
    }  # fmt: skip
