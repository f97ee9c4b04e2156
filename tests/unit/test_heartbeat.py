"""Heartbeats without a server (`ActivityEnvironment` records them): none without a heartbeat
timeout, every third of it with one, a tool's own at most one a second (also from a
synchronous tool's thread), and a count that a retry carries on from."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.testing import ActivityEnvironment

from activities.tools import ToolActivities, ToolContext, tool
from activities.transcript import TranscriptStore
from activities.wire import ToolRequest


@tool(policy="read_only")
async def nap(seconds: float) -> str:
    """Sleep, sending no heartbeat of its own."""
    await asyncio.sleep(seconds)
    return "rested"


@tool(policy="read_only")
async def chatty(seconds: float, ctx: ToolContext) -> str:
    """Heartbeat every 50 ms with its progress."""
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        ctx.heartbeat(round(time.monotonic() - began, 2))
        await asyncio.sleep(0.05)
    return "done"


@tool(policy="read_only")
def blocking(seconds: float, ctx: ToolContext) -> str:
    """A synchronous tool: it runs in a thread, heartbeating from there."""
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        ctx.heartbeat("working")
        time.sleep(0.05)
    return "done"


def environment(
    timeout: float | None = None, carried: list[Any] | None = None
) -> tuple[ActivityEnvironment, list[tuple[Any, ...]]]:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info,
        heartbeat_timeout=timedelta(seconds=timeout) if timeout else None,
        heartbeat_details=carried or [],
    )
    beats: list[tuple[Any, ...]] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    return env, beats


def run(name: str, **input: Any) -> ToolRequest:
    return ToolRequest(session_id="s", user_id="u", tool_use_id="t1", name=name, input=input, max_output=1000)


def activities(tmp_path: Path) -> ToolActivities:
    return ToolActivities([nap, chatty, blocking], store=TranscriptStore(tmp_path))


async def test_no_heartbeat_timeout_no_heartbeat(tmp_path: Path) -> None:
    env, beats = environment()
    outcome = await env.run(activities(tmp_path).run_tool, run("nap", seconds=1.5))
    assert outcome.content == "rested" and beats == [] and outcome.heartbeats == 0


async def test_with_a_timeout_every_third_of_it_the_first_after_one_interval(tmp_path: Path) -> None:
    env, beats = environment(timeout=0.6)
    outcome = await env.run(activities(tmp_path).run_tool, run("nap", seconds=0.9))
    # At 0.2, 0.4, 0.6 and 0.8 s: four beats, each carrying the count so far.
    assert [b[0] for b in beats] == [1, 2, 3, 4], beats
    assert outcome.heartbeats == 4

    env, beats = environment(timeout=3)
    quick = await env.run(activities(tmp_path).run_tool, run("nap", seconds=0.5))
    assert beats == [] and quick.heartbeats == 0, "a call shorter than one interval sends none"


async def test_a_retry_counts_on_from_the_last_recorded_beat(tmp_path: Path) -> None:
    env, beats = environment(timeout=0.6, carried=[7])
    outcome = await env.run(activities(tmp_path).run_tool, run("nap", seconds=0.3))
    assert [b[0] for b in beats] == [8] and outcome.heartbeats == 8


async def test_a_tools_own_heartbeats_at_most_one_a_second(tmp_path: Path) -> None:
    env, beats = environment()
    outcome = await env.run(activities(tmp_path).run_tool, run("chatty", seconds=2.2))
    # Called about 44 times: sent at once, then at 1 s and 2 s with the latest progress.
    assert [b[0] for b in beats] == [1, 2, 3], beats
    assert beats[0][1] == 0.0 and 0.9 <= beats[1][1] <= 1.1 and 1.9 <= beats[2][1] <= 2.1, beats
    assert outcome.heartbeats == 3


async def test_a_synchronous_tool_heartbeats_from_its_thread(tmp_path: Path) -> None:
    env, beats = environment()
    outcome = await env.run(activities(tmp_path).run_tool, run("blocking", seconds=1.2))
    assert outcome.content == "done"
    assert beats == [(1, "working"), (2, "working")], beats
    assert outcome.heartbeats == 2


async def test_with_a_timeout_a_tools_beats_ride_on_the_periodic_one(tmp_path: Path) -> None:
    env, beats = environment(timeout=1.5)
    outcome = await env.run(activities(tmp_path).run_tool, run("chatty", seconds=1.2))
    # Every 0.5 s, with the tool's latest progress; none of the tool's own in between.
    assert [b[0] for b in beats] == [1, 2], beats
    # (A loaded machine's event loop runs the periodic beat a little late: 0.52 s was seen.)
    assert 0.4 <= beats[0][1] <= 0.7 and 0.9 <= beats[1][1] <= 1.15, beats
    assert outcome.heartbeats == 2
