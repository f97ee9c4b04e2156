"""The worker's workflow interceptors: `Metering` reports the signals and updates a session
takes to its `Temporal` (workflows/temporal.py), which counts them, `HeartbeatTimeout` is `worker.py --heartbeat-timeout`,
`NotifyRetry` is the worker's `AGENT_NOTIFY_RETRY`.

`worker.build_worker` installs them; they are apart from the workflow's own modules so
that a client importing the workflow does not import the SDK's worker.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.worker import (
    HandleSignalInput,
    HandleUpdateInput,
    Interceptor,
    StartActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)
from temporalio.workflow import ActivityHandle

with workflow.unsafe.imports_passed_through():
    from workflows.options import HEARTBEATING, notify_retry
    from workflows.temporal import Temporal


# ---- signals and updates -----------------------------------------------------------------


class Metering(Interceptor):
    """Reports every signal a session receives, every update it accepts, and every update its
    validator refuses to the session's `Temporal`, which counts them (a workflow without one,
    such as a notification's, is left alone). `worker.build_worker` installs it."""

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        return _MeteringInbound


class _MeteringInbound(WorkflowInboundInterceptor):
    async def handle_signal(self, input: HandleSignalInput) -> None:
        if (temporal := _temporal()) is not None:
            temporal.signal_received()
        await super().handle_signal(input)

    def handle_update_validator(self, input: HandleUpdateInput) -> None:
        # A validator runs only for an update new to this worker, never on replay (the
        # history holds accepted updates only, and their validators are not run again).
        try:
            super().handle_update_validator(input)
        except workflow.ReadOnlyContextError:
            raise  # not a refusal: the SDK fails the workflow task
        except Exception:
            if (temporal := _temporal()) is not None:
                temporal.update_refused()
            raise

    async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
        # The handler runs once the update is accepted (and again on replay).
        if (temporal := _temporal()) is not None:
            temporal.update_accepted()
        return await super().handle_update_handler(input)


def _temporal() -> Temporal | None:
    found: Any = getattr(workflow.instance(), "temporal", None)
    return found if isinstance(found, Temporal) else None


# ---- the worker's --heartbeat-timeout ----------------------------------------------------


class HeartbeatTimeout(Interceptor):
    """Gives the activities in `HEARTBEATING` this heartbeat timeout when the workflow
    schedules them (`worker.py --heartbeat-timeout`). Activity options are not part of a
    history's determinism: a session may move between workers with and without it."""

    def __init__(self, timeout: timedelta) -> None:
        self.timeout = timeout

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        timeout = self.timeout

        class _Inbound(WorkflowInboundInterceptor):
            def init(self, outbound: WorkflowOutboundInterceptor) -> None:
                super().init(_WithHeartbeatTimeout(outbound, timeout))

        return _Inbound


class _WithHeartbeatTimeout(WorkflowOutboundInterceptor):
    def __init__(self, next: WorkflowOutboundInterceptor, timeout: timedelta) -> None:
        super().__init__(next)
        self._timeout = timeout

    def start_activity(self, input: StartActivityInput) -> ActivityHandle[Any]:
        if input.activity in HEARTBEATING and input.heartbeat_timeout is None:
            input = dataclasses.replace(input, heartbeat_timeout=self._timeout)
        return super().start_activity(input)


# ---- the worker's AGENT_NOTIFY_RETRY -------------------------------------------------------


class NotifyRetry(Interceptor):
    """Gives notification deliveries this worker's retry schedule (first retry, longest
    wait, give up; seconds) when a notification workflow schedules them. Like the heartbeat
    timeout, a retry policy is not part of a history's determinism."""

    def __init__(self, schedule: tuple[float, float, float]) -> None:
        self.policy = notify_retry(*schedule)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        policy = self.policy

        class _Inbound(WorkflowInboundInterceptor):
            def init(self, outbound: WorkflowOutboundInterceptor) -> None:
                super().init(_WithNotifyRetry(outbound, policy))

        return _Inbound


class _WithNotifyRetry(WorkflowOutboundInterceptor):
    def __init__(self, next: WorkflowOutboundInterceptor, policy: RetryPolicy) -> None:
        super().__init__(next)
        self._policy = policy

    def start_activity(self, input: StartActivityInput) -> ActivityHandle[Any]:
        if input.activity == "deliver_notification":
            input = dataclasses.replace(input, retry_policy=self._policy)
        return super().start_activity(input)
