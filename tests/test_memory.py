"""Memory across sessions: `remember`, `recall` and `forget` (activities/memory.py) kept in
one workflow per user scope (workflows/memory.py), on a real dev server."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.client import WorkflowUpdateFailedError

from activities.memory import MAX_MEMORIES, Memory, MemoryInput, MemoryWrite, scope_id
from tests.conftest import ROOT, Harness, answer, tool_use
from tests.support.procs import ProcessHarness, result_of
from tests.test_server_restart import _restart, own_server, procs  # noqa: F401  (fixtures)
from workflows.contract import AgentSpec
from workflows.memory import MemoryWorkflow, rank


def test_recall_ranks_by_the_words_in_common_then_the_newest():
    at = datetime(2026, 1, 1, tzinfo=UTC)
    memories = [
        Memory(key="a", text="likes green tea in the morning", at=at.replace(day=1)),
        Memory(key="b", text="works in Oslo", at=at.replace(day=2)),
        Memory(key="c", text="tea: never with milk", at=at.replace(day=3)),
    ]
    assert [m.key for m in rank(memories, "Tea?", 5)] == ["c", "a"]
    assert [m.key for m in rank(memories, "green tea", 5)] == ["a", "c"]
    assert [m.key for m in rank(memories, "", 2)] == ["c", "b"]
    assert rank(memories, "coffee", 5) == []


async def test_a_full_scope_refuses_with_a_reason_the_model_can_act_on(harness: Harness):
    at = datetime(2026, 1, 1, tzinfo=UTC)
    full = [Memory(key=f"k{i}", text="x", at=at) for i in range(MAX_MEMORIES)]
    handle = await harness.client.start_workflow(
        MemoryWorkflow.run, MemoryInput(memories=full), id=f"memory/-/full-{uuid.uuid4().hex[:6]}",
        task_queue=harness.task_queue,
    )  # fmt: skip
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(MemoryWorkflow.remember, MemoryWrite(key="new", text="one more"))
    assert "memory is full: 500 memories; forget one" in str(refused.value.cause)
    assert await handle.execute_update(MemoryWorkflow.remember, MemoryWrite(key="k1", text="replaced"))
    await handle.terminate()


async def test_memory_tools_are_offered_only_when_named(harness: Harness):
    plain = await harness.run([answer("ok")])
    offered = {t["name"] for t in harness.requests(plain.session_id)[0]["body"].get("tools", [])}
    assert "get_time" in offered and not offered & {"remember", "recall", "forget"}
    named = await harness.run([answer("ok")], tools=["get_time", "recall"])
    offered = {t["name"] for t in harness.requests(named.session_id)[0]["body"].get("tools", [])}
    assert offered == {"get_time", "recall"}


def _cli(address: str, queue: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TEMPORAL_ADDRESS": address, "TEMPORAL_TASK_QUEUE": queue, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "client.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _tool_result(procs: ProcessHarness, session_id: str) -> str:
    [request] = procs.requests(session_id, step=2)
    return str(request["body"]["messages"][-1]["content"][0]["content"])


@pytest.mark.process
async def test_alice_remembers_across_a_worker_kill_and_a_server_restart_and_bob_does_not(
    procs: ProcessHarness,
    own_server,
    tmp_path: Path,
):
    alice, bob = f"alice-{uuid.uuid4().hex[:6]}", f"bob-{uuid.uuid4().hex[:6]}"
    tools = ["remember", "recall", "forget"]
    worker = await procs.worker()
    first = await procs.start(
        [tool_use("remember", {"text": "prefers green tea", "key": "drink"}, id="r1"), answer("noted")],
        user_id=alice, tools=tools,
    )  # fmt: skip
    assert (await result_of(first)).status == "completed"
    assert "remembered as drink" in _tool_result(procs, first.id)

    worker.kill()  # kill -9
    await _restart(own_server, kill=True)
    await procs.worker()

    recalled = await procs.start(
        [tool_use("recall", {"query": "tea"}, id="q1"), answer("tea it is")], user_id=alice, tools=tools
    )
    assert (await result_of(recalled, timeout=90)).status == "completed"
    assert "[drink] prefers green tea" in _tool_result(procs, recalled.id)

    other = await procs.start(
        [tool_use("recall", {"query": "tea"}, id="q1"), answer("nothing")], user_id=bob, tools=tools
    )
    assert (await result_of(other)).status == "completed"
    assert "no memories" in _tool_result(procs, other.id)
    assert "green tea" not in str(procs.requests(other.id))

    # An agent with memory = "user" and memory_prompt: the first call's system prompt has it.
    prompted = await procs.start(
        [answer("hello")], goal="what should I drink?", user_id=alice,
        agent=AgentSpec(name="host", memory="user", memory_prompt=3), tools=[],
    )  # fmt: skip
    assert (await result_of(prompted)).status == "completed"
    [call] = procs.requests(prompted.id, step=1)
    assert "prefers green tea" in str(call["body"]["system"])

    listed = _cli(own_server.address, procs.task_queue, "memory", "list", "--user", alice)
    assert listed.returncode == 0 and "drink" in listed.stdout and "prefers green tea" in listed.stdout
    assert "no memories" in _cli(own_server.address, procs.task_queue, "memory", "list", "--user", bob).stdout
    gone = _cli(own_server.address, procs.task_queue, "memory", "forget", "drink", "--user", alice)
    assert gone.returncode == 0, gone.stderr
    again = _cli(own_server.address, procs.task_queue, "memory", "forget", "drink", "--user", alice)
    assert again.returncode == 1 and len(again.stderr.strip().splitlines()) == 1
    assert scope_id(alice, None) == f"memory/-/{alice}"
    await asyncio.sleep(0)
