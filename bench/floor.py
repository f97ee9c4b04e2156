"""The Temporal floor: one no-op activity per model call and one per tool call, nothing else.

The "model" activity does no I/O; it returns the time it ran (the step's start, as the
fake server's log gives it for the other contenders) and a small tool-use block. The
"tool" activity returns the tool's output, so that history holds each output once: the
least any durable loop records.

With `paced` (the economy scenario), the model activity asks the fake model server for
the session's next turn instead (one plain request, no streaming, no heartbeat: it takes
the model's time and returns only the tool call), so the floor runs at the model's pace.
The server's URL comes from `BENCH_FAKE_URL`, set by the worker process.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from bench.common import GOAL, MODEL, TOOL_NAME, lookup_text

TIMEOUT = timedelta(minutes=2)


def _ask(session: str) -> dict[str, Any]:
    body = {"model": MODEL, "max_tokens": 1024, "messages": [{"role": "user", "content": GOAL}]}
    url = os.environ.get("BENCH_FAKE_URL", "http://127.0.0.1:9") + "/v1/messages"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    for key, value in {"content-type": "application/json", "x-api-key": "bench-key", "x-agent-session": session,
                       "anthropic-version": "2023-06-01"}.items():  # fmt: skip
        req.add_header(key, value)
    with urllib.request.urlopen(req, timeout=100) as resp:
        return json.loads(resp.read())


@activity.defn(name="floor_model")
async def floor_model(step: int, session: str, size: int, last: bool, paced: bool = False) -> dict[str, Any]:
    at = time.time()
    if paced:
        reply = await asyncio.to_thread(_ask, session)
        for block in reply["content"]:
            if block["type"] == "tool_use":
                return {"at": at, "tool_use": {"name": block["name"], "input": block["input"]}}
        return {"at": at, "text": "Done."}
    if last:
        return {"at": at, "text": "Done."}
    return {"at": at, "tool_use": {"name": TOOL_NAME, "input": {"query": f"{session} q{step}", "size": size}}}


@activity.defn(name="floor_tool")
async def floor_tool(query: str, size: int) -> str:
    return lookup_text(query, size)


@workflow.defn(name="FloorWorkflow")
class FloorWorkflow:
    @workflow.run
    async def run(self, steps: int, size: int, paced: bool = False) -> list[float]:
        session = workflow.info().workflow_id
        started: list[float] = []
        for step in range(1, steps + 2):
            reply = await workflow.execute_activity(
                floor_model, args=[step, session, size, step > steps, paced], start_to_close_timeout=TIMEOUT
            )
            started.append(reply["at"])
            use = reply.get("tool_use")
            if use:
                await workflow.execute_activity(
                    floor_tool,
                    args=[use["input"]["query"], use["input"]["size"]],
                    start_to_close_timeout=TIMEOUT,
                )
        return started
