"""`python worker.py`: run a worker for agent sessions on `TEMPORAL_TASK_QUEUE`.

Connect, build the Worker, run it: nothing else. The model's API key is read by the
model activity from this process's environment. `--tools module:NAME` runs another
list of tools (default: the example tools in examples/example_tools.py).

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

`--heartbeat-timeout SECONDS` gives the model call, tool and MCP activities a heartbeat
timeout, and they heartbeat every third of it: a worker killed mid-call is noticed within
SECONDS. Without it (the default) they send no heartbeats, each of which is a billable
action on Temporal Cloud, and a dead worker's call is noticed at its start-to-close timeout
(workflows/options.py; the table in docs/operations/crashes.md).

The failover watch notices a dead worker without activity heartbeats, once per worker
(infra/failover.py): every worker sends the server the SDK's worker heartbeat every
`--worker-heartbeat` seconds (default 1; not a billable action), each worker watches the
list of its task queue's workers, and when a worker process has sent none for three
intervals, one live worker fails the activities it was running, which are then retried
(or, for an at-most-once tool, reported `unknown`) as after a heartbeat timeout: the next
step about 4 s after a kill -9. `--no-failover-watch` turns the watch off; a server that
cannot list workers gets one line at start, and the worker runs without it.

The worker serves its model calls' text, while the model writes it, to followers (`watch`,
the service's event stream) over HTTP on `--live-host` (default 127.0.0.1) and
`--live-port` (default: any free port), and names the URL in its worker identity
(`PID@HOST live=http://...`), where a follower finds it; the text never enters Temporal
(activities/live_server.py). The same server stops a call it runs when the call's session is
cancelled or times out (activities/stopping.py). `--no-live` turns it off: followers then see
the text with each turn, and a cancelled session's calls on this worker run to their end.

Model calls run on a task queue of their own, `<queue>-model`, which this worker polls
too (activities/model_queue.py). `--model-calls-per-second N` (or
`AGENT_MODEL_CALLS_PER_SECOND`) has the Temporal server start at most N of them a second
across every worker of the queue together: ten workers on one API key share one rate.

`--deployment NAME --build-id ID` registers the worker as one version of a Temporal
Worker Deployment (docs/operations/deployment.md); without them it runs unversioned.
SIGTERM drains: polling stops, running model calls and tools get `--drain-seconds` to
finish, then the process exits. `--max-cached-workflows`, `--max-concurrent-activities`,
`--max-concurrent-workflow-tasks`, `--workflow-pollers` and `--activity-pollers` set its
capacity; without them it is sized from the memory and cores it may use (infra/sizing.py,
docs/operations/sizing.md).

Temporal's SDK, the workflow and the activities are imported where they are used, so
`--help` and a bad flag answer at once. A setting whose extra is not installed
(`AGENT_STORE_URL=s3://...` without `s3`, an `OTEL_*` exporter or `--metrics-port`
without `otel`) stops the worker at start with one line naming the extra.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import importlib
import logging
import os
import signal
import sys
from datetime import timedelta
from typing import TYPE_CHECKING

from infra import extras, memory, otel, sizing
from infra.arguments import OneLineParser, listen_address, non_negative_float, positive_float, positive_int
from infra.errors import AgentError, ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable

    from temporalio.client import Client
    from temporalio.runtime import Runtime
    from temporalio.worker import Worker, WorkerDeploymentConfig

    from activities.mcp import McpActivities
    from activities.model import ModelActivities
    from activities.notify import NotifyActivities
    from activities.tools import Tool
    from infra.definitions import Definitions
    from infra.failover import FailoverWatch
    from infra.sizing import Capacity

DEFAULT_TOOLS = "examples.example_tools:TOOLS"
DEFAULT_DRAIN_SECONDS = 30.0
# A workflow task offered to a worker's sticky queue moves to the shared task queue after
# this long without being picked up. After a kill -9 it is how long the first update,
# query or step waits for the dead worker (the SDK's default is 10 s). On a worker that
# runs behind its load, tasks that wait longer move to the shared queue, out of order, and
# are dispatched twice: with 200 sessions at once and no model latency, 0.9 more task
# dispatches a step and about a tenth less throughput than with 10 s (bench/analysis.md).
# Such a worker wants it longer than its backlog's wait (`--sticky-timeout`;
# docs/operations/sizing.md).
STICKY_TIMEOUT = timedelta(seconds=1)
LIVE_DEFAULT = ("127.0.0.1", 0)  # the live text server's address: any free port of the loopback
# The shortest --heartbeat-timeout: beats every third of it.
MIN_HEARTBEAT_TIMEOUT_S = 1.0
# The SDK folds heartbeats closer together than its throttle into one. The activities space
# their own (activities/heartbeat.py: a third of the timeout, a tool's at most one a
# second), so a throttle below that spacing sends each beat they count, and a cancel
# reaches a heartbeating activity within one beat.
HEARTBEAT_THROTTLE = timedelta(seconds=0.5)
# The Worker options the model call worker shares with the session worker: who it is, how
# it drains, and its activity capacity (activities/model_queue.py).
MODEL_WORKER_OPTIONS = (
    "identity",
    "interceptors",
    "deployment_config",
    "graceful_shutdown_timeout",
    "max_concurrent_activities",
    "activity_task_poller_behavior",
)
MODEL_CALLS_PER_SECOND_ENV = "AGENT_MODEL_CALLS_PER_SECOND"
# The SDK's worker heartbeat, which the failover watch reads (infra/failover.py): this often
# by default, within the SDK's range.
DEFAULT_WORKER_HEARTBEAT = timedelta(seconds=1)
WORKER_HEARTBEAT_RANGE_S = (1.0, 60.0)


def load_tools(spec: str) -> list[Tool]:
    module_name, _, attr = spec.partition(":")
    return list(getattr(importlib.import_module(module_name), attr or "TOOLS"))


def load_workflow(spec: str) -> type:
    module_name, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module_name), attr)


# The worker's capacity. Without these flags it is sized from the memory and cores it may
# use (infra/sizing.py): a cache of a quarter of the memory at 0.5 MB a session (at most
# 20,000), an activity slot for every cached session (a model call holds one for the
# model's whole latency; each is an awaiting coroutine), 100 workflow task slots and 5
# pollers of each kind per core. The SDK's own defaults (1,000 cached sessions, 100
# activities, 100 workflow tasks, 5 pollers) stopped fitting at 1,000 sessions.
CAPACITY_FLAGS = {
    "max_cached_workflows": "sessions kept in memory between steps (default: a quarter of the memory "
    "at 0.5 MB a session, 100 to 20,000)",
    "max_concurrent_activities": "model calls and tools running at once (default: as many as cached sessions)",
    "max_concurrent_workflow_tasks": "workflow tasks at once (default: 100 per core)",
    "workflow_pollers": "workflow task pollers (default: 5 per core)",
    "activity_pollers": "activity task pollers (default: 5 per core)",
}


CAPACITY_HELP = (
    "capacity: without the capacity flags above, the worker sizes itself from the memory (a cgroup's limit, "
    "else the machine's) and the cores it may use: a quarter of the memory for cached sessions at "
    "0.5 MB each (100 to 20,000), an activity slot for each, 100 workflow task slots and 5 pollers of "
    "each kind per core; its memory stays under 300 MB + 0.5 MB a cached session. A session evicted "
    "from the cache replays its current run at its next step (bounded by continue-as-new). "
    "On this machine: {machine}."
)


def add_capacity_flags(parser: argparse.ArgumentParser) -> None:
    for name, help in CAPACITY_FLAGS.items():
        parser.add_argument("--" + name.replace("_", "-"), type=positive_int, metavar="N", help=help)
    parser.add_argument("--sticky-timeout", type=positive_float, metavar="SECONDS",
                        help=f"how long a session's next workflow task waits for this worker before any worker "
                             f"may take it (default {STICKY_TIMEOUT.total_seconds():g})")  # fmt: skip


def capacity_options(args: argparse.Namespace, machine: Capacity | None = None) -> dict:
    """The Worker options of the capacity flags; what a flag leaves unset comes from
    `machine` (default: this machine's, infra/sizing.py)."""
    from temporalio.worker import PollerBehaviorSimpleMaximum

    machine = machine or sizing.this_machine()
    sized = {
        "max_cached_workflows": machine.cached,
        "max_concurrent_activities": machine.activities,
        "max_concurrent_workflow_tasks": machine.workflow_tasks,
        "workflow_pollers": machine.workflow_pollers,
        "activity_pollers": machine.activity_pollers,
    }
    chosen = {
        name: value if getattr(args, name) is None else getattr(args, name) for name, value in sized.items()
    }
    options: dict = {
        "workflow_task_poller_behavior": PollerBehaviorSimpleMaximum(chosen.pop("workflow_pollers")),
        "activity_task_poller_behavior": PollerBehaviorSimpleMaximum(chosen.pop("activity_pollers")),
        **chosen,
    }
    if args.sticky_timeout is not None:
        options["sticky_queue_schedule_to_start_timeout"] = timedelta(seconds=args.sticky_timeout)
    return options


def deployment_config(deployment: str | None, build_id: str | None) -> WorkerDeploymentConfig | None:
    """This worker as a version of a Worker Deployment; sessions move to the current version."""
    from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
    from temporalio.worker import WorkerDeploymentConfig

    if not deployment and not build_id:
        return None
    if not (deployment and build_id):
        raise ConfigError("--deployment and --build-id go together: give both, or neither")
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(deployment_name=deployment, build_id=build_id),
        use_worker_versioning=True,
        # A session lives for hours: it moves to the new code at its next workflow task,
        # so a change to the commands it emits must go behind `workflow.patched()`.
        default_versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
    )


def build_worker(
    client: Client,
    tools: list[Tool],
    queue: str | None = None,
    model: ModelActivities | None = None,
    *,
    mcp: McpActivities | None = None,
    notify: NotifyActivities | None = None,
    sandboxed: bool | None = None,
    workflow: type | None = None,
    heartbeat_timeout: timedelta | None = None,
    live: tuple[str, int] | None = LIVE_DEFAULT,
    model_calls_per_second: float | None = None,
    **options,
) -> Worker:
    """The worker with the session workflow (default `AgentWorkflow`), the model activity
    and the tool activities.

    `sandboxed` (default: on if `AGENT_WORKFLOW_SANDBOX=1` is set, else off) runs the
    workflow inside Temporal's sandbox; see the module's docstring. `heartbeat_timeout`
    is `--heartbeat-timeout` (default: none). Sessions count their billable actions through
    the `Metering` interceptor, installed before any in `options["interceptors"]`. `live`
    is where the worker serves its model calls' text, (host, port), named in its identity
    (`--live-host`, `--live-port`); None: nowhere (`--no-live`). `notify` delivers the
    sessions' notifications (default: with this process's `AGENT_WEBHOOK_SECRET`,
    `AGENT_NOTIFY_ALLOW` and `AGENT_NOTIFY_RETRY`).

    The worker runs a second worker beside it, with the same identity, for the model calls'
    own task queue (activities/model_queue.py); `model_calls_per_second` is that queue's
    rate across every worker (`--model-calls-per-second`; default: none).
    """
    from temporalio.worker import UnsandboxedWorkflowRunner, Worker
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    from activities.mcp import McpActivities
    from activities.memory import MEMORY_TOOLS
    from activities.model import ModelActivities
    from activities.model_queue import ModelQueueWorker, server_rate
    from activities.notify import NotifyActivities
    from activities.stopping import stop_calls
    from activities.tools import ToolActivities
    from infra.connection import task_queue
    from infra.definitions import load_definitions
    from infra.fingerprint import with_fingerprint
    from workflows.agent import AgentWorkflow
    from workflows.interceptors import HeartbeatTimeout, Metering, NotifyRetry
    from workflows.memory import MemoryWorkflow
    from workflows.notify import NotifyWorkflow
    from workflows.options import model_task_queue

    if sandboxed is None:
        sandboxed = os.environ.get("AGENT_WORKFLOW_SANDBOX", "") not in ("", "0")
    if not sandboxed:
        options.setdefault("workflow_runner", UnsandboxedWorkflowRunner())
    else:
        # Spans started in workflow code use the process's tracer provider.
        restrictions = SandboxRestrictions.default.with_passthrough_modules("opentelemetry")
        options.setdefault("workflow_runner", SandboxedWorkflowRunner(restrictions=restrictions))
    options.setdefault("sticky_queue_schedule_to_start_timeout", STICKY_TIMEOUT)
    notify = notify or NotifyActivities.from_env()
    interceptors = [Metering(), *([HeartbeatTimeout(heartbeat_timeout)] if heartbeat_timeout else [])]
    if notify.schedule is not None:
        interceptors.append(NotifyRetry(notify.schedule))
    options["interceptors"] = [*interceptors, *options.get("interceptors", [])]
    throttle = min(HEARTBEAT_THROTTLE, heartbeat_timeout / 6) if heartbeat_timeout else HEARTBEAT_THROTTLE
    make: Callable[..., Worker] = ModelQueueWorker
    if live is not None:
        from activities.live_server import LiveServer, LiveWorker, with_live

        server = LiveServer(client.data_converter, *live)
        options["identity"] = with_live(options.get("identity") or client.identity, server.bind())
        make = functools.partial(LiveWorker, live=server)
    if workflow is None:
        # `wf=<fingerprint>`: followers replay this worker's histories only with the same code.
        options["identity"] = with_fingerprint(options.get("identity") or client.identity)
    queue = queue or task_queue()
    model = model or ModelActivities()
    throttles = {"max_heartbeat_throttle_interval": throttle, "default_heartbeat_throttle_interval": throttle}
    model_worker = Worker(
        client,
        task_queue=model_task_queue(queue),
        activities=[model.call_model],
        max_task_queue_activities_per_second=server_rate(model_calls_per_second)
        if model_calls_per_second
        else None,
        **throttles,
        **{k: v for k, v in options.items() if k in MODEL_WORKER_OPTIONS},
    )
    return make(
        client,
        task_queue=queue,
        workflows=[workflow or AgentWorkflow, NotifyWorkflow, MemoryWorkflow],
        activities=[
            model.call_model,  # the calls of sessions recorded before the model calls' own queue
            model.archive_records,  # the store's archive that continue-as-new writes to
            stop_calls,  # a stopping session's calls stopped where they run (activities/stopping.py)
            *ToolActivities(without_memory(tools), builtin=MEMORY_TOOLS).activities(),
            *(mcp or McpActivities(load_definitions().mcp_servers)).activities(),
            *notify.activities(),
        ],
        model_worker=model_worker,
        **throttles,
        **options,
    )


def without_memory(tools: list[Tool]) -> list[Tool]:
    """The worker's tools but any named as a memory tool (activities/memory.py): those names are taken."""
    from activities.memory import NAMES as MEMORY_NAMES

    return [t for t in tools if t.name not in MEMORY_NAMES]


def heartbeat_timeout(text: str) -> timedelta:
    """`--heartbeat-timeout`'s value: seconds, at least `MIN_HEARTBEAT_TIMEOUT_S`."""
    seconds = positive_float(text)
    if seconds < MIN_HEARTBEAT_TIMEOUT_S:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_HEARTBEAT_TIMEOUT_S:g} second, not {text}")
    return timedelta(seconds=seconds)


def worker_heartbeat(text: str) -> timedelta:
    """`--worker-heartbeat`'s value: seconds, in the SDK's range."""
    low, high = WORKER_HEARTBEAT_RANGE_S
    seconds = positive_float(text)
    if not low <= seconds <= high:
        raise argparse.ArgumentTypeError(f"must be from {low:g} to {high:g} seconds, not {text}")
    return timedelta(seconds=seconds)


def live_port(text: str) -> int:
    """`--live-port`'s value: 0 (any free port) to 65535."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number from 0 to 65535, not {text}")
    return port


def model_calls_per_second(flag: float | None) -> float | None:
    """`--model-calls-per-second`, else `AGENT_MODEL_CALLS_PER_SECOND`; None: no limit."""
    if flag is not None:
        return flag
    text = os.environ.get(MODEL_CALLS_PER_SECOND_ENV, "").strip()
    if not text:
        return None
    try:
        return positive_float(text)
    except argparse.ArgumentTypeError as err:
        raise ConfigError(f"{MODEL_CALLS_PER_SECOND_ENV}: {err}") from None


def check_definitions(definitions: Definitions, tools: list[Tool]) -> None:
    """Every Python tool an agent names must be one this worker runs."""
    from activities.memory import NAMES as MEMORY_NAMES
    from infra.definitions import DefinitionError, definitions_path
    from workflows.records import WAIT_TOOLS

    known = {t.name for t in tools} | set(WAIT_TOOLS) | set(MEMORY_NAMES)
    for name, agent in definitions.agents.items():
        missing = sorted(set(agent.tools or []) - known)
        if missing:
            raise DefinitionError(
                f"{definitions_path()}: agents.{name}.tools: this worker has no tool {missing[0]!r}; "
                f"its tools: {', '.join(sorted(known))}"
            )


def parse_args() -> argparse.Namespace:
    parser = OneLineParser(
        prog="python worker.py",
        description=(__doc__ or "").partition("\n")[0],
        epilog=CAPACITY_HELP.format(machine=sizing.this_machine().describe()),
    )
    parser.add_argument("--tools", default=DEFAULT_TOOLS, help="module:NAME of a list of tools")
    parser.add_argument("--sandbox", action="store_true", help="run the workflow in Temporal's sandbox")
    parser.add_argument(
        "--metrics-port", metavar="[HOST:]PORT", type=listen_address,
        help="serve Prometheus metrics (ours and the Temporal SDK's) on this port (host default 127.0.0.1)",
    )  # fmt: skip
    parser.add_argument("--deployment", help="Worker Deployment name (with --build-id): a versioned worker")
    parser.add_argument("--build-id", help="this worker's version in the deployment (with --deployment)")
    parser.add_argument(
        "--heartbeat-timeout", type=heartbeat_timeout, metavar="SECONDS",
        help="give model calls, tools and MCP calls this heartbeat timeout: a worker killed mid-call is "
             "noticed within SECONDS, for about 3/SECONDS heartbeats a second of each call (default: none; "
             "noticed at the call's own timeout)",
    )  # fmt: skip
    parser.add_argument(
        "--worker-heartbeat", type=worker_heartbeat, default=DEFAULT_WORKER_HEARTBEAT, metavar="SECONDS",
        help="send the server a worker heartbeat this often (1 to 60; not a billable action); the failover "
             "watch takes a worker that sent none for 3 of them for dead "
             f"(default: {DEFAULT_WORKER_HEARTBEAT.total_seconds():g})",
    )  # fmt: skip
    parser.add_argument(
        "--no-failover-watch", action="store_true",
        help="do not watch the task queue's workers: a dead worker's model call or tool is then noticed at "
             "its own timeout, or with --heartbeat-timeout",
    )  # fmt: skip
    parser.add_argument(
        "--drain-seconds", type=non_negative_float, default=DEFAULT_DRAIN_SECONDS,
        help="on SIGTERM, seconds running model calls and tools get to finish (default: %(default)g)",
    )  # fmt: skip
    parser.add_argument(
        "--live-host",
        default="127.0.0.1",
        metavar="HOST",
        help="serve the model's text live to followers on this address (default: %(default)s)",
    )
    parser.add_argument(
        "--live-port",
        type=live_port,
        default=0,
        metavar="PORT",
        help="the live text's port (default: any free port, named in the worker's identity)",
    )
    parser.add_argument(
        "--no-live",
        action="store_true",
        help="serve no live text: followers see the model's text when each turn is recorded",
    )
    parser.add_argument(
        "--model-calls-per-second", type=positive_float, metavar="N",
        help="model calls the Temporal server starts a second on this task queue, across every worker "
             f"together (give each worker the same; default: ${MODEL_CALLS_PER_SECOND_ENV}, else no limit)",
    )  # fmt: skip
    add_capacity_flags(parser)
    # module:NAME of another workflow class, for the deploy tests' second build.
    parser.add_argument("--workflow", help=argparse.SUPPRESS)
    return parser.parse_args()


async def main() -> None:
    args = parse_args()
    memory.fix_mmap_threshold()  # the heap stays the size of what is in use (infra/memory.py)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from activities.live_server import live_url
    from activities.mcp import McpActivities
    from activities.notify import NotifyActivities
    from activities.providers import import_sdks
    from infra.connection import connect, task_queue
    from infra.definitions import load_definitions
    from infra.live_auth import follower_key

    tools = load_tools(args.tools)
    workflow = load_workflow(args.workflow) if args.workflow else None
    try:
        extras.check_settings()
        if args.metrics_port is not None:
            extras.require("otel", "--metrics-port")
        definitions = load_definitions()
        check_definitions(definitions, tools)
        notify = NotifyActivities.from_env()
        if not args.no_live:
            follower_key()  # the live text's key (AGENT_LIVE_SECRET or the data directory's), before connecting
        versioning = deployment_config(args.deployment, args.build_id)
        rate = model_calls_per_second(args.model_calls_per_second)
        metrics = otel.metrics(args.metrics_port, worker_heartbeat=args.worker_heartbeat)
        client = await connect(runtime=metrics.runtime if metrics else worker_runtime(args.worker_heartbeat))
        mcp = McpActivities(definitions.mcp_servers)
        worker = build_worker(
            client, tools, mcp=mcp, notify=notify, sandboxed=args.sandbox or None, workflow=workflow,
            deployment_config=versioning, graceful_shutdown_timeout=timedelta(seconds=args.drain_seconds),
            heartbeat_timeout=args.heartbeat_timeout, **capacity_options(args),
            live=None if args.no_live else (args.live_host, args.live_port), model_calls_per_second=rate,
        )  # fmt: skip
    except AgentError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    import_sdks()
    memory.freeze_startup()  # what every step leaves behind is collected sooner (infra/memory.py)
    if notify.allow and not notify.can_sign:
        logging.warning(
            "AGENT_NOTIFY_ALLOW is set but AGENT_WEBHOOK_SECRET is not: sessions that notify will fail"
        )
    if not os.environ.get("ANTHROPIC_API_KEY"):
        logging.warning("ANTHROPIC_API_KEY is not set: model calls will fail until it is")
    where = f", deployment {args.deployment} build {args.build_id}" if versioning else ""
    if args.heartbeat_timeout:
        where += f", heartbeat timeout {args.heartbeat_timeout.total_seconds():g} s"
    if rate is not None:
        where += f", at most {rate:g} model calls a second across the workers"
        from activities.model_queue import set_queue_rate
        from workflows.options import model_task_queue

        if (refused := await set_queue_rate(client, model_task_queue(task_queue()), rate)) is not None:
            logging.warning(
                "the server kept no rate for the model calls' queue (%s): the workers' polls set it", refused
            )
    where += (
        f", live text on {url}" if (url := live_url(worker.config().get("identity"))) else ", no live text"
    )
    watch = None
    if not args.no_failover_watch:
        watch = await failover_watch(client, worker, args.worker_heartbeat)
        if watch is not None:
            where += (
                f", failover watch on (worker heartbeat every {args.worker_heartbeat.total_seconds():g} s)"
            )
    logging.info("worker on task queue %s%s; %s", task_queue(), where, capacity_line(args))
    try:
        await otel.run_beside(metrics, run_until_terminated(worker, watch))
    finally:
        await mcp.aclose()  # ends the MCP servers it started
        otel.flush_traces()


def capacity_line(args: argparse.Namespace) -> str:
    """What the worker holds at once, as the flags and the machine made it."""
    flags = [name for name in CAPACITY_FLAGS if getattr(args, name) is not None]
    machine = sizing.this_machine().describe()
    return f"capacity {machine}" + (f", flags set {', '.join(flags)}" if flags else "")


def worker_runtime(heartbeat: timedelta) -> Runtime:
    """The SDK runtime of a worker without metrics: its worker heartbeat every `heartbeat`."""
    from temporalio.runtime import Runtime, TelemetryConfig

    return Runtime(telemetry=TelemetryConfig(), worker_heartbeat_interval=heartbeat)


async def failover_watch(
    client: Client, worker: Worker, heartbeat: timedelta, queue: str | None = None
) -> FailoverWatch | None:
    """The failover watch of this worker's task queues (`queue`, default `TEMPORAL_TASK_QUEUE`,
    and its model calls' queue), or None (said in one line) if the server cannot list workers."""
    from infra.connection import task_queue
    from infra.failover import FailoverWatch
    from workflows.options import model_task_queue

    queue = queue or task_queue()
    queues = (queue, model_task_queue(queue))
    watch = FailoverWatch(client, queues, worker.config().get("identity") or client.identity, heartbeat)
    if (why := await watch.unsupported()) is not None:
        logging.warning("the server lists no workers (%s): running without the failover watch", why)
        return None
    return watch


async def run_until_terminated(worker: Worker, watch: FailoverWatch | None = None) -> None:
    """Run until SIGTERM or SIGINT, then drain: stop polling, let running activities finish.
    The failover watch, if any, runs while the worker polls."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    # Leaving the block calls `worker.shutdown()`: the pollers stop at once, so other
    # workers take the sessions' next steps, and in-flight activities get the grace period.
    async with worker:
        watching = asyncio.create_task(watch.run()) if watch is not None else None
        await stop.wait()
        if watching is not None:
            watching.cancel()
        logging.info("draining: polling stopped; running model calls and tools may finish")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
