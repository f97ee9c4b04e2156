"""`python worker.py`: run a worker for agent sessions on `TEMPORAL_TASK_QUEUE`.

Connect, build the Worker, run it: nothing else. The model's API key is read by the
model activity from this process's environment. `--tools module:NAME` runs another
list of tools (default: the example tools in activities/example_tools.py).

The session workflow runs outside Temporal's workflow sandbox. The sandbox re-imports
the workflow's modules for every workflow it starts, and runs every activation, and the
serialization context of every payload, through `exec` behind import and builtin
proxies: with 200 sessions at once that was about a quarter of this worker's CPU (see
bench/analysis.md). What it guards against, non-deterministic calls in workflow code
and module state shared between workflows, is guarded here by the code's rules (no I/O,
no clock but `workflow.now()`, no mutable module state in workflows/) and by the replay
tests, which replay every recorded history inside the sandbox. `--sandbox` (or
`AGENT_WORKFLOW_SANDBOX=1`) runs the worker sandboxed, for example while changing the
workflow code.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import sys
from datetime import timedelta

from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.definitions import DefinitionError, Definitions, definitions_path, load_definitions
from activities.mcp import McpActivities
from activities.model import ModelActivities
from activities.tools import Tool, ToolActivities
from plumbing import telemetry
from plumbing.connection import ConfigError, Unreachable, connect, task_queue
from plumbing.errors import BadConfiguration
from workflows.agent import AgentWorkflow

DEFAULT_TOOLS = "activities.example_tools:TOOLS"


def load_tools(spec: str) -> list[Tool]:
    module_name, _, attr = spec.partition(":")
    return list(getattr(importlib.import_module(module_name), attr or "TOOLS"))


def build_worker(
    client: Client,
    tools: list[Tool],
    queue: str | None = None,
    model: ModelActivities | None = None,
    *,
    mcp: McpActivities | None = None,
    sandboxed: bool | None = None,
    **options,
) -> Worker:
    """The worker with the session workflow, the model activity and the tool activities.

    `sandboxed` (default: on if `AGENT_WORKFLOW_SANDBOX=1` is set, else off) runs the
    workflow inside Temporal's sandbox; see the module's docstring.
    """
    if sandboxed is None:
        sandboxed = os.environ.get("AGENT_WORKFLOW_SANDBOX", "") not in ("", "0")
    if not sandboxed:
        options.setdefault("workflow_runner", UnsandboxedWorkflowRunner())
    else:
        # Spans started in workflow code use the process's tracer provider.
        restrictions = SandboxRestrictions.default.with_passthrough_modules("opentelemetry")
        options.setdefault("workflow_runner", SandboxedWorkflowRunner(restrictions=restrictions))
    return Worker(
        client,
        task_queue=queue or task_queue(),
        workflows=[AgentWorkflow],
        activities=[
            (model or ModelActivities()).call_model,
            *ToolActivities(tools).activities(),
            *(mcp or McpActivities(load_definitions().mcp_servers)).activities(),
        ],
        # A cancel reaches a heartbeating activity within about two seconds.
        max_heartbeat_throttle_interval=timedelta(seconds=1),
        default_heartbeat_throttle_interval=timedelta(seconds=1),
        **options,
    )


def check_definitions(definitions: Definitions, tools: list[Tool]) -> None:
    """Every Python tool an agent names must be one this worker runs."""
    known = {t.name for t in tools}
    for name, agent in definitions.agents.items():
        missing = sorted(set(agent.tools or []) - known)
        if missing:
            raise DefinitionError(
                f"{definitions_path()}: agents.{name}.tools: this worker has no tool {missing[0]!r}; "
                f"its tools: {', '.join(sorted(known))}"
            )


async def main() -> None:
    parser = argparse.ArgumentParser(prog="python worker.py", description=__doc__.splitlines()[0])
    parser.add_argument("--tools", default=DEFAULT_TOOLS, help="module:NAME of a list of tools")
    parser.add_argument("--sandbox", action="store_true", help="run the workflow in Temporal's sandbox")
    parser.add_argument(
        "--metrics-port", metavar="[HOST:]PORT", type=telemetry.parse_listen,
        help="serve Prometheus metrics (ours and the Temporal SDK's) on this port (host default 127.0.0.1)",
    )  # fmt: skip
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    tools = load_tools(args.tools)
    try:
        definitions = load_definitions()
        check_definitions(definitions, tools)
        metrics = telemetry.metrics(args.metrics_port)
        client = await connect(**({"runtime": metrics.runtime} if metrics else {}))
        mcp = McpActivities(definitions.mcp_servers)
        worker = build_worker(client, tools, mcp=mcp, sandboxed=args.sandbox or None)
    except (Unreachable, DefinitionError, ConfigError, BadConfiguration) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    if not os.environ.get("ANTHROPIC_API_KEY"):
        logging.warning("ANTHROPIC_API_KEY is not set: model calls will fail until it is")
    logging.info("worker on task queue %s", task_queue())
    try:
        await telemetry.run_beside(metrics, worker.run())
    finally:
        await mcp.aclose()  # ends the MCP servers it started
        telemetry.flush_traces()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
