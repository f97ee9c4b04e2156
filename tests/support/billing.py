"""What tests of the billable-actions count share."""

from collections import Counter
from typing import Any

import pytest
from temporalio import workflow
from temporalio.worker import (
    HandleQueryInput,
    HandleSignalInput,
    HandleUpdateInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)


class Inbound(Interceptor):
    """Counts the queries, signals and updates each session receives on a test's worker,
    by (session id, kind): each one is a billable action that a follower must not add.
    What a replay re-delivers is not counted again."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()

    def of(self, session_id: str) -> dict[str, int]:
        return {kind: self.counts[(session_id, kind)] for kind in ("query", "signal", "update")}

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        counts = self.counts

        def count(kind: str) -> None:
            if not workflow.unsafe.is_replaying():
                counts[(workflow.info().workflow_id, kind)] += 1

        class _Count(WorkflowInboundInterceptor):
            async def handle_query(self, input: HandleQueryInput) -> Any:
                count("query")
                return await super().handle_query(input)

            async def handle_signal(self, input: HandleSignalInput) -> None:
                count("signal")
                return await super().handle_signal(input)

            async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
                count("update")
                return await super().handle_update_handler(input)

        return _Count


# The sessions are polled with `status` queries (wait_for_status). A query that comes with
# a workflow task while a local activity runs makes the worker complete that task at once
# and ask for a new one; whether the activity's marker lands in the completed task or the
# new one is a race the workflow cannot see, and when it lands in the new one beside a
# patch marker left in the completed task, the session counts one local-activity batch
# fewer than the history (28 against 29; workflows/metering.py, "Not exact"). It shows on
# a loaded machine (with a 1 s task timeout, once in 12 runs beside 3 busy processes).
# The equality is the contract, so the test keeps it and is reported, not hidden, when it
# misses.
LA_BATCH_OFF_BY_ONE = pytest.mark.xfail(
    strict=False,
    reason="a query answered while a local activity runs can move its marker to the next workflow "
    "task, which the workflow cannot see: temporal_actions then misses one local-activity batch",
)
