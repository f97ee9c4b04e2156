"""How the workflow starts each activity and child session: every timeout and retry
policy, in one place.

Each function returns the options of one kind of call, to be unpacked into the call
(`execute_activity_method(ModelActivities.call_model, request, **options.model_call(limits))`).
The activity each call runs, and when, stays with its caller. The values are part of
every recorded history; changing one changes no command (recorded histories replay), but
it changes how running sessions retry and time out.

The worker's `--heartbeat-timeout` gives the activities in `HEARTBEATING` a heartbeat
timeout as the workflow schedules them (`HeartbeatTimeout` in workflows/interceptors.py).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TypedDict

from temporalio.common import RetryPolicy
from temporalio.workflow import ParentClosePolicy

from activities.wire import ToolSpec
from workflows.contract import Limits

# No heartbeat timeout by default: every heartbeat that reaches the server is a billable
# action on Temporal Cloud (one a second was 6 of the 27 actions a step with a model
# writing at a real pace), and without a timeout the activities send none
# (activities/heartbeat.py). A dead worker's model call is then noticed at its
# start-to-close timeout (`--model-timeout`, default 120 s), a tool's at 10 minutes.
# `worker.py --heartbeat-timeout SECONDS` notices it within SECONDS instead, for about
# 3/SECONDS actions a second of each call (docs/operations/crashes.md has the table).
HEARTBEAT_TIMEOUT: timedelta | None = None
# The activities `--heartbeat-timeout` applies to: those that may run long.
HEARTBEATING = ("call_model", "run_tool", "list_mcp_tools", "call_mcp_tool")
# A tool that runs on the worker, in an activity of its own.
TOOL_START_TO_CLOSE = timedelta(minutes=10)
# A local activity: checking a tool's input, listing the worker's tools, a local tool.
LOCAL_TIMEOUT = timedelta(seconds=30)
LOCAL_TOOL_TIMEOUT = timedelta(seconds=30)
RETRY_IDEMPOTENT_TOOL = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30), maximum_attempts=5
)
# An at-most-once tool: started once, never again (an interrupted one is `unknown`).
RUN_ONCE = RetryPolicy(maximum_attempts=1)
# Listing the worker's tools is quick; a worker that cannot do it fails the start, it
# does not leave the session `running` forever.
DESCRIBE_TOOLS_ATTEMPTS = 3
DESCRIBE_TOOLS_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_attempts=DESCRIBE_TOOLS_ATTEMPTS
)

ARCHIVE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)


class ActivityOptions(TypedDict, total=False):
    start_to_close_timeout: timedelta
    heartbeat_timeout: timedelta
    retry_policy: RetryPolicy


class LocalActivityOptions(TypedDict, total=False):
    start_to_close_timeout: timedelta
    retry_policy: RetryPolicy


class ChildOptions(TypedDict):
    parent_close_policy: ParentClosePolicy


# ---- the model -----------------------------------------------------------------------------


def model_call(limits: Limits) -> ActivityOptions:
    """One model call: the session's own timeout and attempts, with backoff up to a minute."""
    return ActivityOptions(
        start_to_close_timeout=timedelta(seconds=limits.model_timeout_seconds),
        retry_policy=RetryPolicy(
            initial_interval=timedelta(seconds=1),
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=60),
            maximum_attempts=limits.model_attempts,
        ),
    )


def archive() -> LocalActivityOptions:
    """Writing a run's archived part to the store at continue-as-new: a few quick tries;
    when they fail the run hands everything to the next, which tries again."""
    return LocalActivityOptions(start_to_close_timeout=LOCAL_TIMEOUT, retry_policy=ARCHIVE_RETRY)


# ---- the worker's tools ------------------------------------------------------------------


def describe_tools() -> LocalActivityOptions:
    return LocalActivityOptions(start_to_close_timeout=LOCAL_TIMEOUT, retry_policy=DESCRIBE_TOOLS_RETRY)


def check_tool_input() -> LocalActivityOptions:
    return LocalActivityOptions(start_to_close_timeout=LOCAL_TIMEOUT)


def run_tool(spec: ToolSpec) -> ActivityOptions:
    return ActivityOptions(start_to_close_timeout=TOOL_START_TO_CLOSE, retry_policy=_tool_retry(spec))


def run_local_tool() -> LocalActivityOptions:
    """A local tool: only an idempotent one runs as a local activity."""
    return LocalActivityOptions(start_to_close_timeout=LOCAL_TOOL_TIMEOUT, retry_policy=RETRY_IDEMPOTENT_TOOL)


# ---- MCP servers' tools --------------------------------------------------------------------


def list_mcp_tools() -> ActivityOptions:
    return ActivityOptions(start_to_close_timeout=TOOL_START_TO_CLOSE, retry_policy=DESCRIBE_TOOLS_RETRY)


def check_mcp_input(spec: ToolSpec) -> ActivityOptions:
    return ActivityOptions(start_to_close_timeout=_mcp_timeout(spec), retry_policy=RETRY_IDEMPOTENT_TOOL)


def call_mcp_tool(spec: ToolSpec) -> ActivityOptions:
    return ActivityOptions(start_to_close_timeout=_mcp_timeout(spec), retry_policy=_tool_retry(spec))


def _mcp_timeout(spec: ToolSpec) -> timedelta:
    # Connecting (a stdio server starting) and calling are each bounded by the server's
    # timeout inside the activity; this bounds the attempt as a whole.
    return timedelta(seconds=2 * (spec.timeout_seconds or 30) + 30)


def _tool_retry(spec: ToolSpec) -> RetryPolicy:
    return RUN_ONCE if spec.policy == "at_most_once" else RETRY_IDEMPOTENT_TOOL


# ---- sub-agents ----------------------------------------------------------------------------


def subagent() -> ChildOptions:
    """A sub-agent's session: no timeout or retry of its own (its limits, capped by the
    parent's, bound it); the parent's end cancels it."""
    return ChildOptions(parent_close_policy=ParentClosePolicy.REQUEST_CANCEL)


def attempts(options: ActivityOptions | LocalActivityOptions) -> int:
    """The most attempts the options allow (1 when unbounded: a failure then never exhausts them)."""
    policy = options.get("retry_policy")
    return max(1, policy.maximum_attempts) if policy is not None else 1
