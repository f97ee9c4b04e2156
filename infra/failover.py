"""The failover watch: a killed worker's model calls and tools retried within seconds,
without activity heartbeats.

Every worker process sends the Temporal server a worker heartbeat every
`--worker-heartbeat` seconds (default 1): the SDK's own, one request for both of the
process's workers (its task queue's and the model calls' queue's), sent from the SDK
core's thread, so a Python process short of CPU still sends them. A worker heartbeat is not an activity
heartbeat: it is not among the actions Temporal Cloud bills, and it is sent once per
worker, whatever the number of calls in flight.

Each `worker.py` process also runs `FailoverWatch`. Every half interval it lists the workers
of its two task queues (ListWorkers) and notes, on its own clock, when each worker's last
heartbeat changed. A worker process whose heartbeats have not changed for `DEAD_AFTER_BEATS`
intervals is dead (the server keeps a dead worker listed, its last heartbeat frozen). The
watch of the live worker process whose identity sorts first acts on a death (the others
see the same list), and that of the second 3 intervals later, in case the first does not
watch or is stalled (`ACTING_WATCHES`); the others list the workers every `IDLE_POLL_S`
only, to learn when their turn comes. A watch that acts lists the task queue's running
workflows (visibility), describes them one by one, and fails each activity that is started
and was last started by the dead process (`WORKER_LOST`). The retry policy then retries a
model call or an idempotent tool after its first interval (1 s), on a live worker; an
at-most-once tool is not retried, and its outcome is `unknown`, as after a heartbeat
timeout. A death is so rare that its
visibility list and describes cost nothing that matters; neither is a billable action.

Silence is measured only between two answers of the server, from the receipt of the list
that first showed a heartbeat to the sending of the list that still shows it: a watch
that itself stalls (a starved process) sees the heartbeat change when it looks again, and
does not take the worker for dead. A worker that left the list (evicted, or a restarted
server that has not heard from it yet) is not taken for dead, nor is one whose last
heartbeat says it shut down (it drained its calls first).

Failing an activity by its id names no attempt: the server fails whichever attempt is
running. A watch fails an attempt only when it is started, was last started by the dead
process, and it described it less than `FRESH_S` ago; a retry starts no sooner than the
retry policy's first interval (1 s) after a failure, so an attempt that another watch
failed meanwhile cannot have been retried on a live worker yet. What remains: a watch
whose process stalls for more than that interval between the describe and the fail, while
another watch fails the same attempt and the retry starts, fails the retry too (it is then
retried once more, or, for an at-most-once tool, it is already `unknown`). Two processes
with the same identity (the default `PID@HOST`, on two hosts with one name) cannot be told
apart: a process whose identity a live worker also has is not taken for dead, and its
calls wait for their own timeouts. Nor is a process seen that died before the server
recorded its first worker heartbeat (in its first second or so).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import PendingActivityState, WorkerStatus
from temporalio.api.worker.v1 import WorkerHeartbeat
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionRequest, ListWorkersRequest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

log = logging.getLogger("failover")

# A worker process is dead after this many intervals without a new heartbeat.
DEAD_AFTER_BEATS = 3
# The watches that act on a death: those of the first live worker processes by identity,
# the second one interval of silence later than the first, in case the first does not watch
# (`--no-failover-watch`) or is stalled; it finds nothing left to fail when the first did.
ACTING_WATCHES = 2
# How often the other watches list the workers: enough to learn when their turn comes,
# without every worker of a large fleet listing it twice a second.
IDLE_POLL_S = 5.0
# The failure type of an activity whose worker died.
WORKER_LOST = "WorkerLost"
# An attempt is failed only within this long of the describe that found it (the retry
# policies' first interval is 1 s).
FRESH_S = 0.5
# Workflows described at once after a death.
DESCRIBE_CONCURRENCY = 8
LIST_PAGE = 200


@dataclass
class _Seen:
    identity: str
    beat: tuple[int, int]  # the heartbeat's time, as the worker sent it: a marker of change
    since: float  # monotonic: when the list that first showed this beat was received
    shut_down: bool


@dataclass
class FailedActivity:
    workflow_id: str
    run_id: str
    activity_id: str
    activity_type: str
    attempt: int
    identity: str


class FailoverWatch:
    """Watch the workers of `task_queues`; fail the started activities of a dead one.

    `identity` is this process's worker identity; `interval` its worker heartbeat interval.
    """

    def __init__(self, client: Client, task_queues: Iterable[str], identity: str, interval: timedelta):
        self.client = client
        self.task_queues = tuple(task_queues)
        self.identity = identity
        self.interval = interval.total_seconds()
        self.dead_after = DEAD_AFTER_BEATS * self.interval
        self.poll = self.interval / 2
        self.failed: list[FailedActivity] = []  # every activity this watch failed
        self._seen: dict[str, _Seen] = {}  # by worker instance key
        self._handled: set[str] = set()  # dead identities already acted on
        self._rank = 0  # this process's place among the live ones, by identity

    @property
    def _query(self) -> str:
        return " OR ".join(f"TaskQueue = '{q}'" for q in self.task_queues)

    async def unsupported(self) -> str | None:
        """None if the server lists workers; else why not, in one line."""
        try:
            await self._list()
        except RPCError as err:
            return f"{err.status.name}: {err.message}"
        return None

    async def run(self) -> None:
        """Watch until cancelled; an error is logged, once until the watch works again. A
        server that lists workers but not this one (it records no worker heartbeats) is
        said once."""
        failing = False
        began = time.monotonic()
        listed = False
        while True:
            try:
                await self.check()
                failing = False
                listed = listed or any(seen.identity == self.identity for seen in self._seen.values())
                if not listed and time.monotonic() - began > 2 * self.dead_after:
                    listed = True  # said once
                    log.warning("failover watch: the server does not list this worker: it sees no worker die")
            except RPCError as err:
                if not failing:
                    log.warning("failover watch: %s: %s", err.status.name, err.message)
                failing = True
            except Exception:  # the watch goes on; a worker is not stopped by it
                if not failing:
                    log.exception("failover watch")
                failing = True
            await asyncio.sleep(self.poll if self._rank < ACTING_WATCHES else max(self.poll, IDLE_POLL_S))

    async def check(self) -> list[FailedActivity]:
        """Look once; act on any worker process newly dead. Returns the activities failed."""
        sent = time.monotonic()
        beats = await self._list()
        got = time.monotonic()
        seen: dict[str, _Seen] = {}
        for beat in beats:
            marker = (beat.heartbeat_time.seconds, beat.heartbeat_time.nanos)
            shut_down = beat.status == WorkerStatus.WORKER_STATUS_SHUTDOWN
            before = self._seen.get(beat.worker_instance_key)
            if before is not None and before.beat == marker:
                before.shut_down = shut_down
                seen[beat.worker_instance_key] = before
            else:
                seen[beat.worker_instance_key] = _Seen(beat.worker_identity, marker, got, shut_down)
        self._seen = seen
        live: set[str] = set()
        dead: dict[str, float] = {}  # identity -> seconds without a heartbeat
        for entry in seen.values():
            silent = sent - entry.since
            if entry.shut_down:
                continue
            if silent < self.dead_after or entry.identity == self.identity:  # this process runs
                live.add(entry.identity)
            else:
                dead[entry.identity] = max(silent, dead.get(entry.identity, 0.0))
        self._handled &= set(dead)  # a process seen alive again may die again
        rank = self._rank = sorted(live).index(self.identity) if self.identity in live else 0
        if rank >= ACTING_WATCHES:
            return []
        newly = {
            identity: s
            for identity, s in dead.items()
            if identity not in live and identity not in self._handled and s >= self.dead_after * (1 + rank)
        }
        if not newly:
            return []
        failed: list[FailedActivity] = []
        for identity, silent in sorted(newly.items()):
            log.warning(
                "worker %s sent no heartbeat for %.1f s: failing its running activities", identity, silent
            )
            failed += await self.fail_activities_of(identity, silent)
            self._handled.add(identity)  # once its scan is done: a scan that failed is made again
        return failed

    async def _list(self) -> list[WorkerHeartbeat]:
        beats: list[WorkerHeartbeat] = []
        token = b""
        while True:
            page = await self.client.workflow_service.list_workers(
                ListWorkersRequest(
                    namespace=self.client.namespace,
                    page_size=LIST_PAGE,
                    next_page_token=token,
                    query=self._query,
                )
            )
            beats += [info.worker_heartbeat for info in page.workers_info]
            token = page.next_page_token
            if not token:
                return beats

    async def fail_activities_of(self, identity: str, silent: float) -> list[FailedActivity]:
        """Fail every started activity of the running workflows of the first task queue that
        `identity` last started."""
        query = f"TaskQueue = '{self.task_queues[0]}' AND ExecutionStatus = 'Running'"
        limit = asyncio.Semaphore(DESCRIBE_CONCURRENCY)
        failed: list[FailedActivity] = []

        async def one(workflow_id: str, run_id: str) -> None:
            async with limit:
                with contextlib.suppress(RPCError):  # ended meanwhile
                    failed.extend(await self._fail_in(workflow_id, run_id, identity, silent))

        tasks = [
            asyncio.create_task(one(wf.id, wf.run_id or ""))
            async for wf in self.client.list_workflows(query, page_size=LIST_PAGE)
        ]
        await asyncio.gather(*tasks)
        self.failed += failed
        return failed

    async def _fail_in(
        self, workflow_id: str, run_id: str, identity: str, silent: float
    ) -> list[FailedActivity]:
        failed: list[FailedActivity] = []
        done: set[str] = set()
        while True:
            described = time.monotonic()
            description = await self.client.workflow_service.describe_workflow_execution(
                DescribeWorkflowExecutionRequest(
                    namespace=self.client.namespace,
                    execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
                )
            )
            found = [
                p
                for p in description.pending_activities
                if p.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                and p.last_worker_identity == identity
                and p.activity_id not in done
            ]
            if not found:
                return failed
            for pending in found:
                if time.monotonic() - described > FRESH_S:
                    break  # described too long ago: describe again
                handle = self.client.get_async_activity_handle(
                    workflow_id=workflow_id, run_id=run_id, activity_id=pending.activity_id
                )
                who = identity.split(" ")[0]
                done.add(pending.activity_id)
                try:
                    await handle.fail(
                        ApplicationError(
                            f"the worker running it ({who}) stopped: no worker heartbeat for {silent:.0f} s",
                            type=WORKER_LOST,
                        )
                    )
                except RPCError:
                    continue  # already failed, completed or timed out: nothing to do
                log.info("failed %s activity %s of %s (attempt %d)", pending.activity_type.name,
                         pending.activity_id, workflow_id, pending.attempt)  # fmt: skip
                failed.append(
                    FailedActivity(
                        workflow_id,
                        run_id,
                        pending.activity_id,
                        pending.activity_type.name,
                        pending.attempt,
                        identity,
                    )
                )
