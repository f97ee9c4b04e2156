"""The worker's capacity without flags: from the memory and cores it may use (infra/sizing.py)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from infra import sizing
from worker import add_capacity_flags, capacity_options

GIB = 1024**3


@pytest.mark.parametrize(
    ("memory", "cores", "cached", "workflow_tasks", "pollers"),
    [
        (2 * GIB, 2, 1024, 200, 10),  # a quarter of 2 GiB at 0.5 MB a session
        (24 * GIB, 2, 12_288, 200, 10),
        (16 * GIB, 8, 8192, 800, 40),
        (256 * 1024**2, 1, 128, 100, 5),
        (64 * 1024**2, 1, sizing.MIN_CACHED, 100, 5),
        (1024 * GIB, 64, sizing.MAX_CACHED, 6400, 320),
    ],
)
def test_capacity_follows_memory_and_cores(
    memory: int, cores: int, cached: int, workflow_tasks: int, pollers: int
):
    found = sizing.capacity(memory, cores)
    assert (found.cached, found.activities) == (cached, cached)
    assert found.workflow_tasks == workflow_tasks
    assert (found.workflow_pollers, found.activity_pollers) == (pollers, pollers)
    assert found.memory_bound_mb == sizing.BASE_MB + cached * sizing.MB_PER_CACHED_SESSION


def _args(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_capacity_flags(parser)
    return parser.parse_args(list(flags))


def test_flags_win_over_the_machine():
    machine = sizing.capacity(2 * GIB, 2)
    sized = capacity_options(_args(), machine)
    assert sized["max_cached_workflows"] == 1024 and sized["max_concurrent_activities"] == 1024
    assert sized["max_concurrent_workflow_tasks"] == 200
    assert sized["workflow_task_poller_behavior"].maximum == 10
    flagged = capacity_options(_args("--max-cached-workflows", "50", "--workflow-pollers", "3"), machine)
    assert flagged["max_cached_workflows"] == 50 and flagged["max_concurrent_activities"] == 1024
    assert flagged["workflow_task_poller_behavior"].maximum == 3
    assert flagged["activity_task_poller_behavior"].maximum == 10


def test_a_cgroup_limits_memory_and_cores(monkeypatch, tmp_path: Path):
    (tmp_path / "memory.max").write_text(f"{GIB}\n")
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # one and a half cores
    monkeypatch.setattr(sizing, "CGROUP", tmp_path)
    assert sizing.memory_limit() == GIB
    assert sizing.core_limit() == min(2, len(os.sched_getaffinity(0)))
    (tmp_path / "memory.max").write_text("max\n")
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert sizing.memory_limit() > GIB // 2  # the machine's own
    assert sizing.core_limit() >= 1
