"""`python -m bench.bench_worker CONTENDER ADDRESS QUEUE FAKE_URL [OPTIONS]`: one contender's worker process.

Contenders: `floor`, `project` (this project's defaults: the read-only tool a local
activity), `project-regular` (the tool declared `local=False`, a regular activity),
`pydantic-ai`, `pydantic-ai-stream` (its agent with an event stream handler). It prints
"ready" once it polls, and stops on SIGTERM. The harness reads its peak memory and CPU time
from /proc.

This project's workers run as `python worker.py` runs them: `worker.build_worker` with its
defaults, the SDK's worker heartbeat every second and the failover watch beside the worker
(listing the task queue's workers twice a second), the heap settings of infra/memory.py.
The options set this project's worker for many sessions at once (the scale scenario);
without them every contender runs with the SDK's defaults (a workflow cache of 1000,
100 workflow task and 100 activity slots, 5 pollers of each kind).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal

from temporalio.client import Client
from temporalio.worker import Worker

from infra import memory
from worker import CAPACITY_FLAGS, add_capacity_flags, capacity_options

PROJECT = ("project", "project-regular")


async def build(contender: str, address: str, queue: str, fake_url: str, options: dict) -> Worker:
    if contender == "floor":
        os.environ["BENCH_FAKE_URL"] = fake_url  # its model activity's, when paced
        from bench.floor import FloorWorkflow, floor_model, floor_tool

        client = await Client.connect(address)
        return Worker(
            client, task_queue=queue, workflows=[FloorWorkflow], activities=[floor_model, floor_tool]
        )
    if contender in PROJECT:
        import anthropic

        from activities.model import ModelActivities
        from activities.transcript import TranscriptStore
        from bench.project_tools import DEFAULT, REGULAR
        from infra.connection import connect
        from infra.datadir import data_dir
        from worker import DEFAULT_WORKER_HEARTBEAT, build_worker, worker_runtime

        memory.fix_mmap_threshold()
        client = await connect(target_host=address, runtime=worker_runtime(DEFAULT_WORKER_HEARTBEAT))
        model = ModelActivities(
            store=TranscriptStore(data_dir() / "transcripts"),
            client=anthropic.AsyncAnthropic(base_url=fake_url, api_key="bench-key", max_retries=0),
        )
        tools = REGULAR if contender == "project-regular" else DEFAULT
        return build_worker(client, tools, queue=queue, model=model, **options)
    if contender in ("pydantic-ai", "pydantic-ai-stream"):
        os.environ["BENCH_FAKE_URL"] = fake_url
        from pydantic_ai.durable_exec.temporal import AgentPlugin, PydanticAIPlugin

        from bench.pai import temporal_agent, temporal_agent_stream
        from bench.pai_workflow import PydanticAIBenchWorkflow, PydanticAIStreamBenchWorkflow

        streamed = contender == "pydantic-ai-stream"
        client = await Client.connect(address, plugins=[PydanticAIPlugin()])
        return Worker(
            client, task_queue=queue, workflows=[PydanticAIStreamBenchWorkflow if streamed else PydanticAIBenchWorkflow],
            plugins=[AgentPlugin(temporal_agent_stream if streamed else temporal_agent)],
        )  # fmt: skip
    raise SystemExit(f"unknown contender {contender!r}")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_worker")
    for name in ("contender", "address", "queue", "fake_url"):
        parser.add_argument(name)
    add_capacity_flags(parser)  # the project's worker's own flags
    return parser.parse_args()


async def main() -> None:
    args = parse()
    given = [name for name in (*CAPACITY_FLAGS, "sticky_timeout") if getattr(args, name) is not None]
    if given and args.contender not in PROJECT:
        raise SystemExit("worker options apply to this project's worker only")
    # This project's worker sizes itself as `worker.py` does; the others keep their own defaults.
    options = capacity_options(args) if args.contender in PROJECT else {}
    worker = await build(args.contender, args.address, args.queue, args.fake_url, options)
    watch = None
    if args.contender in PROJECT:
        from worker import DEFAULT_WORKER_HEARTBEAT, failover_watch

        watch = await failover_watch(worker.client, worker, DEFAULT_WORKER_HEARTBEAT, args.queue)
        if watch is None:
            raise SystemExit(
                "the dev server lists no workers: the project's worker would run without its watch"
            )
        memory.freeze_startup()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with worker:
        watching = asyncio.create_task(watch.run()) if watch is not None else None
        print("ready", flush=True)
        await stop.wait()
        if watching is not None:
            watching.cancel()


if __name__ == "__main__":
    asyncio.run(main())
