"""The Temporal floor: one no-op activity per model call and one per tool call, nothing else.

The "model" activity does no I/O; it returns the time it ran (the step's start, as the
fake server's log gives it for the other contenders) and a small tool-use block. The
"tool" activity returns the tool's output, so that history holds each output once: the
least any durable loop records.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from bench.common import TOOL_NAME, lookup_text

TIMEOUT = timedelta(minutes=2)


@activity.defn(name="floor_model")
async def floor_model(step: int, session: str, size: int, last: bool) -> dict[str, Any]:
    if last:
        return {"at": time.time(), "text": "Done."}
    return {"at": time.time(), "tool_use": {"name": TOOL_NAME, "input": {"query": f"{session} q{step}", "size": size}}}


@activity.defn(name="floor_tool")
async def floor_tool(query: str, size: int) -> str:
    return lookup_text(query, size)


@workflow.defn(name="FloorWorkflow")
class FloorWorkflow:
    @workflow.run
    async def run(self, steps: int, size: int) -> list[float]:
        session = workflow.info().workflow_id
        started: list[float] = []
        for step in range(1, steps + 2):
            reply = await workflow.execute_activity(
                floor_model, args=[step, session, size, step > steps], start_to_close_timeout=TIMEOUT
            )
            started.append(reply["at"])
            use = reply.get("tool_use")
            if use:
                await workflow.execute_activity(
                    floor_tool, args=[use["input"]["query"], use["input"]["size"]], start_to_close_timeout=TIMEOUT
                )
        return started
