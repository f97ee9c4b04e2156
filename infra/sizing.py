"""The worker's capacity when no flag sets it: from the memory and the cores it may use.

A session waiting for a person or a model holds a place in the workflow cache and costs
memory there (about 0.2 to 0.3 MB measured for a waiting session; `MB_PER_CACHED_SESSION`
is the bound used here), and, while its model call runs, an activity slot (an awaiting
coroutine). A session evicted from the cache costs a replay of its current run at its next
step, which continue-as-new bounds (`continue_as_new_after_steps`, 500 by default, or
Temporal's own suggestion): slower, never wrong. So the cache takes a quarter of the
memory, at most `MAX_CACHED`, and every cached session may have its call in flight. Workflow
tasks are CPU work: `WORKFLOW_TASKS_PER_CORE` slots and `POLLERS_PER_CORE` pollers of each
kind per core (on 2 cores, the 200 slots and 10 pollers that kept 1,000 sessions at once
fed, docs/operations/sizing.md). Its memory, then, stays under about
`BASE_MB + cached * MB_PER_CACHED_SESSION`.

The memory is the cgroup's limit when there is one (a container), else the machine's; the
cores are those this process may run on, or fewer if the cgroup's CPU quota says so.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

MB = 1024 * 1024
MB_PER_CACHED_SESSION = 0.5
MEMORY_SHARE = 0.25  # of the memory, for the workflow cache
MIN_CACHED = 100
MAX_CACHED = 20_000
WORKFLOW_TASKS_PER_CORE = 100
POLLERS_PER_CORE = 5
BASE_MB = 300  # a worker with an empty cache: the SDKs, the workflow code, the metrics buffer
CGROUP = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Capacity:
    """What the worker holds and runs at once."""

    cached: int
    activities: int
    workflow_tasks: int
    workflow_pollers: int
    activity_pollers: int
    memory_bytes: int
    cores: int

    @property
    def memory_bound_mb(self) -> float:
        """The worker's memory with a full cache, at most (`MB_PER_CACHED_SESSION` a session)."""
        return BASE_MB + self.cached * MB_PER_CACHED_SESSION

    def describe(self) -> str:
        return (
            f"{self.cached:,} cached sessions, {self.activities:,} activities, {self.workflow_tasks} workflow "
            f"tasks, {self.workflow_pollers}+{self.activity_pollers} pollers (from {self.memory_bytes / 2**30:.1f} "
            f"GiB and {self.cores} cores; memory with a full cache under {self.memory_bound_mb:,.0f} MB)"
        )


def capacity(memory_bytes: int, cores: int) -> Capacity:
    """The capacity that `memory_bytes` and `cores` afford (see the module's docstring)."""
    cores = max(1, cores)
    cached = int(memory_bytes * MEMORY_SHARE / (MB_PER_CACHED_SESSION * MB))
    cached = min(MAX_CACHED, max(MIN_CACHED, cached))
    pollers = POLLERS_PER_CORE * cores
    return Capacity(
        cached=cached,
        activities=cached,
        workflow_tasks=WORKFLOW_TASKS_PER_CORE * cores,
        workflow_pollers=pollers,
        activity_pollers=pollers,
        memory_bytes=memory_bytes,
        cores=cores,
    )


def this_machine() -> Capacity:
    """The capacity of the memory and cores this process may use."""
    return capacity(memory_limit(), core_limit())


def memory_limit() -> int:
    """The cgroup's memory limit, else the machine's memory, in bytes."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in (CGROUP / "memory.max", CGROUP / "memory" / "memory.limit_in_bytes"):
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            return min(physical, int(text))
    return physical


def core_limit() -> int:
    """The cores this process may run on, fewer if the cgroup's CPU quota allows less."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        quota, period = (CGROUP / "cpu.max").read_text().split()
    except (OSError, ValueError):
        return cores
    if quota == "max":
        return cores
    return max(1, min(cores, math.ceil(int(quota) / int(period))))
