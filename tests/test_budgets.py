"""Budgets that ask: `on_limit = "ask"` waits at max_steps, token_budget or cost_budget
for a person to raise the limit or decline (workflows/budgets.py); sub-agents spend from
their parent's budgets as they go. On a real dev server with the fake model."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError

from sessions.pricing import PRICES
from tests.conftest import Harness, answer, tool_use
from tests.test_agents import cli
from tests.test_loop_policy import status_of, wait_for_status
from tests.test_watch import EMAIL
from workflows.agent import AgentWorkflow
from workflows.contract import AgentSpec, CancelRequest, Limits, SessionStatus, SubAgent

HAIKU = "claude-haiku-4-5"
# What one fake call of HAIKU costs with this usage: 1000 input tokens at $1 per million.
CALL_USAGE = {"input_tokens": 1000, "output_tokens": 0, "cache_read_input_tokens": 0,
              "cache_creation_input_tokens": 0}  # fmt: skip
CALL_COST = 0.001


def notes(n: int) -> list[dict[str, Any]]:
    return [tool_use("save_note", {"title": f"n{i}", "text": "x"}, id=f"s{i}") for i in range(n)]


async def test_a_budget_that_asks_is_raised_and_completes(harness: Harness):
    handle = await harness.start([*notes(3), answer("done")], limits={"max_steps": 2}, on_limit="ask")
    waiting = await wait_for_status(handle, "waiting_budget")
    assert waiting.limit_reached is not None
    assert (waiting.limit_reached.name, waiting.limit_reached.limit, waiting.limit_reached.used) == (
        "max_steps",
        2,
        2,
    )
    worked = waiting.worked_seconds
    from workflows.contract import LimitRaise

    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(AgentWorkflow.raise_limit, LimitRaise(name="max_steps", value=2))
    assert "must be above what is used (2)" in str(refused.value.cause)
    code, out, err = await cli(harness, "raise", handle.id, "--max-steps", "4")
    assert code == 0, err
    assert "max_steps raised to 4" in out
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed" and result.steps == 4
    assert result.limits.max_steps == 4 and result.limit_reached is None
    print(f"worked {worked:.2f} s before the wait, {result.worked_seconds:.2f} s in all")


async def test_a_declined_budget_stops_with_the_limit_as_its_reason(harness: Harness):
    turns = [{**t, "usage": CALL_USAGE} for t in notes(3)] + [answer("never")]
    handle = await harness.start(turns, limits={"token_budget": 1500}, on_limit="ask")
    waiting = await wait_for_status(handle, "waiting_budget")
    assert waiting.limit_reached is not None and waiting.limit_reached.name == "token_budget"
    assert waiting.limit_reached.used > 1500
    code, _out, err = await cli(harness, "raise", handle.id, "--decline", "--reason", "too dear")
    assert code == 0, err
    result: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert (result.status, result.stop_reason) == ("stopped", "token_budget")
    code, _, err = await cli(harness, "raise", handle.id, "--max-steps", "9")
    assert code == 1 and len(err.strip().splitlines()) == 1


async def test_a_budget_nobody_answers_stops_at_the_approval_timeout(harness: Harness):
    result = await harness.run(
        notes(3), limits={"max_steps": 1, "approval_timeout_seconds": 1}, on_limit="ask"
    )
    assert (result.status, result.stop_reason) == ("stopped", "max_steps")


async def test_decline_is_refused_where_no_limit_is_reached(harness: Harness):
    from workflows.contract import LimitDecline

    handle = await harness.start([tool_use("send_email", EMAIL, id="e1"), answer("sent")], on_limit="ask")
    await wait_for_status(handle, "waiting_approval")
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(AgentWorkflow.decline_limit, LimitDecline())
    assert "is not waiting at a limit" in str(refused.value.cause)
    await handle.execute_update(AgentWorkflow.cancel_session, CancelRequest())


def looping_tree() -> dict[str, Any]:
    price = PRICES[f"anthropic:{HAIKU}"]
    subs = [
        SubAgent(name=name, model=HAIKU, system="Loop.", limits=Limits(max_steps=50), price=price,
                 tools=["get_time"], agent=AgentSpec(name=name))
        for name in ("left", "right")
    ]  # fmt: skip
    return {"model": HAIKU, "price": price, "agent": AgentSpec(name="lead", subagents=subs), "tools": []}


async def test_a_sub_agent_tree_is_held_within_its_budget_and_spends_as_it_goes(harness: Harness):
    session = f"test-tree-{time.monotonic_ns() % 10**8}"
    both = {"tool_calls": [{"name": "agent__left", "input": {"task": "loop"}, "id": "l"},
                           {"name": "agent__right", "input": {"task": "loop"}, "id": "r"}],
            "usage": CALL_USAGE}  # fmt: skip
    loop = {**tool_use("get_time"), "usage": CALL_USAGE, "delay": 0.3, "repeat": True}
    for child in (1, 2):
        harness.script(f"{session}.sub-{child}", [loop])
    handle = await harness.start(
        [both, answer("never")], session_id=session, limits={"cost_budget_usd": 0.01}, **looping_tree()
    )
    # The parent's cost grows while its sub-agents run, not only when they end.
    deadline = time.monotonic() + 60
    while (snapshot := await status_of(handle)).cost_usd is None or snapshot.cost_usd < 2.5 * CALL_COST:
        assert time.monotonic() < deadline, f"the parent's cost stayed {snapshot.cost_usd}"
        await asyncio.sleep(0.1)
    children = [harness.client.get_workflow_handle(f"{session}.sub-{n}") for n in (1, 2)]
    running = [(await c.query("status", result_type=SessionStatus)).status for c in children]
    assert "running" in running, running
    result: SessionStatus = await asyncio.wait_for(handle.result(), 90)
    assert (result.status, result.stop_reason) == ("stopped", "cost_budget")
    # At most one model call more than the budget per session running in the tree.
    assert result.cost_usd is not None and result.cost_usd <= 0.01 + 3 * CALL_COST + 1e-9, result.cost_usd
    print(f"tree spent ${result.cost_usd:.4f} of $0.01")
