"""`python -m bench.worker CONTENDER ADDRESS QUEUE FAKE_URL`: one contender's worker process.

Contenders: `floor`, `project` (every tool a regular activity), `project-local` (the
tool as a local activity), `pydantic-ai`. It prints "ready" once it polls, and stops on
SIGTERM. The harness reads its peak memory from /proc.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from temporalio.client import Client
from temporalio.worker import Worker


async def build(contender: str, address: str, queue: str, fake_url: str) -> Worker:
    if contender == "floor":
        from bench.floor import FloorWorkflow, floor_model, floor_tool

        client = await Client.connect(address)
        return Worker(client, task_queue=queue, workflows=[FloorWorkflow], activities=[floor_model, floor_tool])
    if contender in ("project", "project-local"):
        import anthropic

        from activities.data import data_dir
        from activities.model import ModelActivities
        from activities.transcript import TranscriptStore
        from bench.project_tools import LOCAL, REGULAR
        from plumbing.connection import connect
        from worker import build_worker

        client = await connect(target_host=address)
        model = ModelActivities(
            store=TranscriptStore(data_dir() / "transcripts"),
            client=anthropic.AsyncAnthropic(base_url=fake_url, api_key="bench-key", max_retries=0),
        )
        tools = LOCAL if contender == "project-local" else REGULAR
        return build_worker(client, tools, queue=queue, model=model)
    if contender == "pydantic-ai":
        os.environ["BENCH_FAKE_URL"] = fake_url
        from pydantic_ai.durable_exec.temporal import AgentPlugin, PydanticAIPlugin

        from bench.pai import temporal_agent
        from bench.pai_workflow import PydanticAIBenchWorkflow

        client = await Client.connect(address, plugins=[PydanticAIPlugin()])
        return Worker(
            client, task_queue=queue, workflows=[PydanticAIBenchWorkflow], plugins=[AgentPlugin(temporal_agent)]
        )
    raise SystemExit(f"unknown contender {contender!r}")


async def main() -> None:
    contender, address, queue, fake_url = sys.argv[1:5]
    worker = await build(contender, address, queue, fake_url)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with worker:
        print("ready", flush=True)
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())
