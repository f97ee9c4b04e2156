"""What tests of the billable-actions count share."""

from collections import Counter
from typing import Any

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
