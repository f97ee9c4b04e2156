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
from infra.notify import NOTIFY_REFUSED
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
# A notification's delivery to one URL: the first retry after 5 s, the waits doubling up
# to 10 minutes, no attempt starting more than an hour after the first (12 attempts, the
# last at about 51 minutes); then it is abandoned. The worker's `AGENT_NOTIFY_RETRY`
# changes the schedule (`NotifyRetry` in workflows/interceptors.py applies it).
NOTIFY_SCHEDULE = (5.0, 600.0, 3600.0)  # first retry, longest wait, give up: seconds
NOTIFY_ATTEMPT_TIMEOUT = timedelta(seconds=30)  # one POST (the client's own timeout is 10 s)

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

# Model calls run on a task queue of their own, `<the session's queue>-model`, which every
# worker polls: a worker's `--model-calls-per-second` is that queue's rate, kept by the
# Temporal server for all the workers together (worker.py). A queue other than the
# workflow's is never dispatched eagerly, which would pass the rate by.
MODEL_QUEUE_SUFFIX = "-model"
MODEL_QUEUE_PATCH = "model-task-queue"
# A step with fallback models goes on to the next model after this many attempts fail as
# unavailable (5xx, 529, timeouts); a rate-limited model (429) gets the rest of the
# session's `model_attempts` first, a refused key none (activities/model_errors.py).
ATTEMPTS_BEFORE_FALLBACK = 2


def model_task_queue(task_queue: str) -> str:
    """The task queue of the model calls of sessions on `task_queue`."""
    return task_queue + MODEL_QUEUE_SUFFIX


def model_call(limits: Limits, attempts: int | None = None) -> ActivityOptions:
    """One model call: the session's own timeout and attempts (or `attempts`), with backoff
    up to a minute."""
    return ActivityOptions(
        start_to_close_timeout=timedelta(seconds=limits.model_timeout_seconds),
        retry_policy=RetryPolicy(
            initial_interval=timedelta(seconds=1),
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=60),
            maximum_attempts=attempts or limits.model_attempts,
        ),
    )


def model_call_before_fallback(limits: Limits) -> ActivityOptions:
    """A call whose failure leaves a fallback model to try: fewer attempts."""
    return model_call(limits, min(ATTEMPTS_BEFORE_FALLBACK, limits.model_attempts))


def model_call_rate_limited(limits: Limits) -> ActivityOptions | None:
    """The rest of a rate-limited model's attempts, before its fallback; None if none are left."""
    rest = limits.model_attempts - ATTEMPTS_BEFORE_FALLBACK
    return model_call(limits, rest) if rest > 0 else None


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


# ---- notifications -------------------------------------------------------------------------


def notify_retry(first: float, longest: float, give_up: float) -> RetryPolicy:
    """Retries waiting `first` seconds, doubling to `longest`, while an attempt would start
    at most `give_up` seconds after the first: a bounded number of attempts, so the
    delivery's failure tells how many there were."""
    attempts, at, wait = 1, 0.0, first
    while at + wait <= give_up:
        at, attempts, wait = at + wait, attempts + 1, min(wait * 2, longest)
    return RetryPolicy(
        initial_interval=timedelta(seconds=first),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=longest),
        maximum_attempts=attempts,
        non_retryable_error_types=[NOTIFY_REFUSED],
    )


def deliver_notification(schedule: tuple[float, float, float] = NOTIFY_SCHEDULE) -> ActivityOptions:
    return ActivityOptions(
        start_to_close_timeout=NOTIFY_ATTEMPT_TIMEOUT, retry_policy=notify_retry(*schedule)
    )


def check_notify() -> ActivityOptions:
    return ActivityOptions(start_to_close_timeout=LOCAL_TIMEOUT, retry_policy=DESCRIBE_TOOLS_RETRY)


def notification() -> ChildOptions:
    """A notification's own workflow: it goes on delivering when the session continues as new or ends."""
    return ChildOptions(parent_close_policy=ParentClosePolicy.ABANDON)


def attempts(options: ActivityOptions | LocalActivityOptions) -> int:
    """The most attempts the options allow (1 when unbounded: a failure then never exhausts them)."""
    policy = options.get("retry_policy")
    return max(1, policy.maximum_attempts) if policy is not None else 1
