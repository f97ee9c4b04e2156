"""`python -m tests.record_histories`: record the event histories that tests/test_replay.py
replays, one file per scenario under tests/histories/.

It starts its own dev server (no database file), the fake Messages API and a worker with
the test tools, runs each scenario to its end and writes `fetch_history().to_json()`.
Re-record after a deliberate change to the workflow's command sequence, and keep the old
files beside the new ones (rename them `<scenario>-<date>.json`) while sessions started
before the change may still be running: those must go on replaying, behind
`Temporal.patched` (docs/operations/deployment.md, "Retiring a patch").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HISTORIES = Path(__file__).resolve().parent / "histories"
# A history kept from the release before is `<scenario>-<date>.json`.
RELEASE_DATE = re.compile(r"-\d{4}-\d{2}-\d{2}$")


def load_history(path: Path):
    """A recorded history, under the workflow id it was recorded with (`replay-<scenario>`)."""
    from temporalio.client import WorkflowHistory

    return WorkflowHistory.from_json(
        "replay-" + RELEASE_DATE.sub("", path.stem), json.loads(path.read_text())
    )


EMAIL = {"to": "team@example.com", "subject": "Summary", "body": "All done."}


def tool_use(name: str, input: dict | None = None, id: str | None = None) -> dict:
    return {"tool_calls": [{"name": name, "input": input or {}, "id": id}]}


def answer(text: str, **extra) -> dict:
    return {"text": text, **extra}


async def wait_for(handle, status: str, timeout: float = 30) -> None:
    from workflows.contract import SessionStatus

    deadline = asyncio.get_running_loop().time() + timeout
    while (await handle.query("status", result_type=SessionStatus)).status != status:
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"session {handle.id} never reached {status}")
        await asyncio.sleep(0.1)


# Each scenario: (turns, SessionInput fields, what to do while it runs).
Steer = Callable[[object], Awaitable[None]]


async def nothing(handle) -> None:
    return None


async def approve(handle) -> None:
    from workflows.contract import Decision

    await wait_for(handle, "waiting_approval")
    await handle.execute_update("approve_call", Decision(tool_use_id="e1"), result_type=str)


async def approve_after_refusals(handle) -> None:
    """Two updates refused (an unknown call, a resume of a running session), then the
    approval: the next model call carries the refusals in its input and its reply."""
    from temporalio.client import WorkflowUpdateFailedError

    from workflows.contract import Decision

    await wait_for(handle, "waiting_approval")
    for name, args in (("approve_call", [Decision(tool_use_id="nope")]), ("resume_session", [])):
        try:
            await handle.execute_update(name, args=args, result_type=str)
        except WorkflowUpdateFailedError:
            continue
        raise AssertionError(f"{name} was not refused")
    await handle.execute_update("approve_call", Decision(tool_use_id="e1"), result_type=str)


async def approve_once_notified(handle) -> None:
    """Approve once the approval's notification has been delivered (its outcome signalled)."""
    from workflows.contract import Decision, SessionStatus

    await wait_for(handle, "waiting_approval")
    deadline = asyncio.get_running_loop().time() + 30
    while (await handle.query("status", result_type=SessionStatus)).notifications.delivered < 1:
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"session {handle.id}: the approval's notification was never delivered")
        await asyncio.sleep(0.1)
    await handle.execute_update("approve_call", Decision(tool_use_id="e1"), result_type=str)


# The receiver of the notifications scenario: answers 503 to its first request, then 200.
RECEIVER: dict[str, object] = {"url": "", "seen": 0}


def start_receiver():
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            RECEIVER["seen"] = int(str(RECEIVER["seen"])) + 1
            self.send_response(503 if RECEIVER["seen"] == 1 else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    RECEIVER["url"] = f"http://127.0.0.1:{server.server_address[1]}/"
    Thread(target=server.serve_forever, daemon=True).start()
    return server


async def approve_by_signal(handle) -> None:
    from workflows.contract import Decision

    await wait_for(handle, "waiting_approval")
    await handle.signal("approve", Decision(tool_use_id="unknown"))  # ignored
    await handle.signal("approve", Decision(tool_use_id="e1"))


async def deny(handle) -> None:
    from workflows.contract import Decision

    await wait_for(handle, "waiting_approval")
    await handle.execute_update("deny_call", Decision(tool_use_id="e1", reason="not today"), result_type=str)


async def send_build_event(handle) -> None:
    from workflows.contract import EventInput

    await handle.signal("event", EventInput(name="review", data="ok"))  # kept for a later wait
    await wait_for(handle, "waiting_event")
    await handle.execute_update("send_event", EventInput(name="build", data={"id": 7}), result_type=str)


async def cancel_during_tool(handle) -> None:
    await asyncio.sleep(1.5)
    await handle.execute_update("cancel_session", {"reason": "changed my mind"}, result_type=str)


async def cancel_during_model(handle) -> None:
    await asyncio.sleep(0.5)
    await handle.signal("cancel")


async def cancel_once_charging(handle) -> None:
    """Cancel while an at-most-once tool and a read-only one run: the first ends, the second stops."""
    await wait_for_effect(handle, "slow_charge")
    await handle.execute_update("cancel_session", {"reason": "stop"}, result_type=str)


async def wait_for_effect(handle, tool: str, timeout: float = 30) -> None:
    from infra.datadir import read_effects

    deadline = asyncio.get_running_loop().time() + timeout
    while not [e for e in read_effects() if e["session_id"] == handle.id and e["tool"] == tool]:
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"session {handle.id} never ran {tool}")
        await asyncio.sleep(0.1)


async def temporal_cancel(handle) -> None:
    await asyncio.sleep(0.5)
    await handle.cancel()


async def pause_resume(handle) -> None:
    await asyncio.sleep(0.3)
    await handle.execute_update("pause_session", result_type=str)
    await asyncio.sleep(1.5)
    await handle.execute_update("resume_session", result_type=str)


async def approve_edited(handle) -> None:
    from workflows.contract import Decision

    await wait_for(handle, "waiting_approval")
    edited = {**EMAIL, "to": "boss@example.com"}
    await handle.execute_update(
        "approve_call", Decision(tool_use_id="e1", input=edited, decided_by="alice"), result_type=str
    )


async def approve_in_child(handle) -> None:
    """The child's call shows in the parent's status; the decision goes to the child."""
    from workflows.contract import Decision

    await wait_for(handle, "waiting_approval")
    child = handle._client.get_workflow_handle(f"{handle.id}.sub-1")
    await child.execute_update("approve_call", Decision(tool_use_id="c1", decided_by="bob"), result_type=str)


def subagent_fields() -> dict:
    from workflows.contract import AgentSpec, Limits, SubAgent

    helper = AgentSpec(name="helper", approval={"send_email": "always"})
    sub = SubAgent(name="helper", description="sends emails", model="claude-haiku-4-5", system="Be brief.",
                   limits=Limits(max_steps=5), tools=["send_email"], agent=helper)  # fmt: skip
    return {
        "agent": AgentSpec(name="lead", approval={"save_note": "never"}, subagents=[sub]),
        "tools": ["save_note"],
    }


def sleeping_subagent_fields() -> dict:
    """A parent whose sub-agent sleeps: the child tells it as it falls asleep and wakes."""
    from workflows.contract import AgentSpec, Limits, SubAgent

    sub = SubAgent(name="napper", description="sleeps", model="claude-haiku-4-5", system="Be brief.",
                   limits=Limits(max_steps=5), tools=["sleep"], agent=AgentSpec(name="napper"))  # fmt: skip
    return {"agent": AgentSpec(name="lead", subagents=[sub]), "tools": []}


async def approve_repeat(handle) -> None:
    from workflows.contract import Decision

    await wait_for(handle, "waiting_approval")
    await handle.execute_update("approve_call", Decision(tool_use_id="w4"), result_type=str)


async def raise_steps(handle) -> None:
    from workflows.contract import LimitRaise

    await wait_for(handle, "waiting_budget")
    await handle.execute_update("raise_limit", LimitRaise(name="max_steps", value=3), result_type=str)


def spending_subagent_fields() -> dict:
    """A parent with a cost budget whose sub-agent loops until its share is spent, telling
    the parent what it spends as it goes."""
    from sessions.pricing import PRICES
    from workflows.contract import AgentSpec, Limits, SubAgent

    price = PRICES["anthropic:claude-haiku-4-5"]
    sub = SubAgent(name="looper", description="loops", model="claude-haiku-4-5", system="Loop.",
                   limits=Limits(max_steps=20), price=price, tools=["get_time"], agent=AgentSpec(name="looper"))  # fmt: skip
    return {
        "model": "claude-haiku-4-5",
        "price": price,
        "agent": AgentSpec(name="lead", subagents=[sub]),
        "tools": [],
    }


def memory_fields() -> dict:
    from workflows.contract import AgentSpec

    return {
        "agent": AgentSpec(name="host", memory="user", memory_prompt=2),
        "tools": ["remember", "recall", "forget"],
    }


CALL_USAGE = {"input_tokens": 1000, "output_tokens": 0, "cache_read_input_tokens": 0,
              "cache_creation_input_tokens": 0}  # fmt: skip


async def steer_during_tool(handle) -> None:
    """A steer sent while the tool runs: the model gets it after the tool's result."""
    from workflows.contract import UserMessage

    await asyncio.sleep(0.5)
    await handle.execute_update(
        "send_message", UserMessage(text="answer in French", mode="steer"), result_type=int
    )


async def interrupt_once_charging(handle) -> None:
    """An interrupt while an at-most-once tool and a read-only one run: the first ends and
    keeps its result, the second stops, and the model gets the message with both results."""
    from workflows.contract import UserMessage

    await wait_for_effect(handle, "slow_charge")
    await handle.execute_update(
        "send_message", UserMessage(text="stop reading", mode="interrupt"), result_type=int
    )


async def interrupt_during_model(handle) -> None:
    """An interrupt while the model streams: the call is closed, the message joins the goal."""
    from workflows.contract import UserMessage

    await asyncio.sleep(0.5)
    await handle.execute_update(
        "send_message", UserMessage(text="in one word", mode="interrupt"), result_type=int
    )


async def chat(handle) -> None:
    await wait_for(handle, "waiting_input")
    await handle.execute_update("send_message", {"text": "and then?"}, result_type=int)
    await asyncio.sleep(0.5)
    await wait_for(handle, "waiting_input")
    await handle.execute_update("close_session", result_type=str)


SCENARIOS: dict[str, tuple[list[dict], dict, Steer]] = {
    "tool_calls": (
        [
            {
                "tool_calls": [
                    {"name": "get_time", "input": {}, "id": "t1"},
                    {"name": "save_note", "input": {"title": "n", "text": "x"}, "id": "n1"},
                ]
            },
            tool_use("explode", {"message": "disk on fire"}, id="x1"),
            tool_use("teleport", id="u1"),
            answer("It is noon."),
        ],
        {},
        nothing,
    ),
    "approval": ([tool_use("send_email", EMAIL, id="e1"), answer("sent")], {}, approve),
    "refused_updates": ([tool_use("send_email", EMAIL, id="e1"), answer("sent")], {}, approve_after_refusals),
    "approval_by_signal": ([tool_use("send_email", EMAIL, id="e1"), answer("sent")], {}, approve_by_signal),
    "deny": ([tool_use("send_email", EMAIL, id="e1"), answer("not sent")], {}, deny),
    "cancel_during_tool": (
        [tool_use("wait_for_cancel", {"seconds": 30}, id="w1"), answer("never")],
        {},
        cancel_during_tool,
    ),
    "cancel_during_model": ([{**answer("too late"), "delay": 2}], {}, cancel_during_model),
    "temporal_cancel": ([{**answer("too late"), "delay": 2}], {}, temporal_cancel),
    # The `stop-calls` patch: the workers asked to stop the calls in flight (a streamed model
    # call; a read-only tool beside an at-most-once one, which ends and is recorded first).
    "stop_model_call": ([answer("word " * 200, pace=0.05)], {}, cancel_during_model),
    "stop_tool_calls": (
        [
            {
                "tool_calls": [
                    {"name": "slow_charge", "input": {"amount": 5, "seconds": 2}, "id": "c1"},
                    {"name": "long_read", "input": {"seconds": 60}, "id": "r1"},
                ]
            },
            answer("never"),
        ],
        {},
        cancel_once_charging,
    ),
    "pause_resume": (
        [tool_use("slow_upsert", {"key": "k", "seconds": 1}, id="s1"), answer("done")],
        {},
        pause_resume,
    ),
    "retries": (
        [
            {"status": 429, "headers": {"retry-after-ms": "500"}, "message": "rate limited"},
            {"status": 529, "message": "Overloaded"},
            {"cut_stream": True, "text": "partial"},
            answer("fine"),
        ],
        {},
        nothing,
    ),
    "terminal_failure": (
        [tool_use("get_time", id="t1"), {"status": 401, "message": "invalid x-api-key"}],
        {},
        nothing,
    ),
    "max_steps": (
        [tool_use("save_note", {"title": f"n{i}", "text": "x"}, id=f"s{i}") for i in range(3)],
        {"limits": {"max_steps": 2}},
        nothing,
    ),
    "token_budget": (
        [{**tool_use("get_time"), "usage": {"input_tokens": 900, "output_tokens": 200}}, answer("never")],
        {"limits": {"token_budget": 1000}},
        nothing,
    ),
    "timeout": (
        [{**tool_use("get_time"), "delay": 3}, answer("never")],
        {"limits": {"timeout_seconds": 1}},
        nothing,
    ),
    "chat": ([answer("hello"), answer("then this")], {"chat": True}, chat),
    "typed_answer": (
        [
            tool_use("final_answer", {"city": "Oslo"}, id="a1"),
            tool_use("final_answer", {"city": "Oslo", "temperature": -3}, id="a2"),
        ],
        {
            "output_schema": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "temperature": {"type": "number"}},
                "required": ["city", "temperature"],
            },
            "tools": ["get_time"],
        },
        nothing,
    ),
    "continue_as_new": (
        [tool_use("save_note", {"title": f"n{i}", "text": "x"}, id=f"s{i}") for i in range(3)]
        + [answer("done")],
        {"limits": {"continue_as_new_after_steps": 2}},
        nothing,
    ),
    # Each continue-as-new puts the older messages, calls and turns in the store (a local
    # activity and a patch marker) and hands on a bounded state.
    "long_session": (
        [{**tool_use("big_output", {"chars": 20_000}, id=f"b{i}"), "text": f"step {i}"} for i in range(6)]
        + [answer("done")],
        {"limits": {"continue_as_new_after_steps": 3}},
        nothing,
    ),
    "model_timeout": (
        [{"stall": 6, "text": "late"}, answer("on time")],
        {"limits": {"model_timeout_seconds": 2}},
        nothing,
    ),
    "edited_approval": ([tool_use("send_email", EMAIL, id="e1"), answer("sent")], {}, approve_edited),
    "subagent": (
        [tool_use("agent__helper", {"task": "email the team"}, id="h1"), answer("the helper sent it")],
        {
            "_children": {".sub-1": [tool_use("send_email", EMAIL, id="c1"), answer("sent")]},
            "_fields": subagent_fields,
        },
        approve_in_child,
    ),
    "subagent_sleeps": (
        [tool_use("agent__napper", {"task": "nap"}, id="n1"), answer("it napped")],
        {
            "_children": {
                ".sub-1": [tool_use("sleep", {"seconds": 2, "reason": "nap"}, id="s1"), answer("rested")]
            },
            "_fields": sleeping_subagent_fields,
            "limits": {"timeout_seconds": 30},
        },
        nothing,
    ),
    "thinking": (
        [
            {
                "thinking": "Which tool tells the time?",
                "tool_calls": [{"name": "get_time", "input": {}, "id": "t1"}],
            },
            {
                "thinking": "A note next.",
                "redacted_thinking": "r",
                "tool_calls": [{"name": "save_note", "input": {"title": "n", "text": "x"}, "id": "n1"}],
            },
            {"thinking": "Now the answer.", "text": "It is noon. END"},
        ],
        {
            "model_settings": {"thinking_budget": 2048, "stop_sequences": ["END"]},
            "limits": {"continue_as_new_after_steps": 2},
        },
        nothing,
    ),
    "tool_choice": (
        [tool_use("get_time", id="t1"), answer("noon")],
        {"model_settings": {"tool_choice": "get_time", "temperature": 0.2}},
        nothing,
    ),
    "waits": (
        [
            tool_use("sleep", {"seconds": 1, "reason": "let it settle"}, id="s1"),
            tool_use("wait_for_event", {"name": "build", "timeout_seconds": 60}, id="w1"),
            tool_use("wait_for_event", {"name": "review", "timeout_seconds": 60}, id="w2"),
            tool_use("send_email", EMAIL, id="e1"),
            answer("done"),
        ],
        {
            "tools": ["sleep", "wait_for_event", "send_email"],
            "limits": {"approval_timeout_seconds": 1, "timeout_seconds": 30},
        },
        send_build_event,
    ),
    "search_attributes": (
        [tool_use("save_note", {"title": f"n{i}", "text": "x"}, id=f"s{i}") for i in range(4)]
        + [tool_use("send_email", EMAIL, id="e1"), answer("sent")],
        {"search_attributes": True},
        approve,
    ),
    # Notifications: approval_requested (delivered on its second attempt) and ended.
    "notify": (
        [tool_use("send_email", EMAIL, id="e1"), answer("sent")],
        {"_fields": lambda: {"notify": [f"{RECEIVER['url']}hook"]}},
        approve_once_notified,
    ),
    # Overloaded twice: the same step and the tool loop after it on the fallback model
    # (the same fake answers both models).
    "fallback": (
        [{"status": 529, "message": "Overloaded", "times": 2}, tool_use("get_time", id="t1"), answer("noon")],
        {"model": "anthropic:claude-sonnet-4-6", "fallback_models": ["anthropic:claude-haiku-4-5"]},
        nothing,
    ),
    # Loop policies: the third identical call stops the session; a tool whose output repeats
    # three times in a row is asked about at its fourth call, and approved.
    "loop_stop": (
        [tool_use("save_note", {"title": "same", "text": "again"}, id=f"s{i}") for i in range(4)],
        {"loop_policy": {"after": 3, "action": "stop"}},
        nothing,
    ),
    "loop_ask": (
        [tool_use("whoami", {"user_id": f"u{i}"}, id=f"w{i}") for i in range(1, 5)] + [answer("done")],
        {"loop_policy": {"after": 3, "action": "ask"}},
        approve_repeat,
    ),
    # Budgets that ask: max_steps reached, raised by a person; and one nobody answers in time.
    "budget_ask": (
        [tool_use("save_note", {"title": f"n{i}", "text": "x"}, id=f"s{i}") for i in range(2)]
        + [answer("done")],
        {"limits": {"max_steps": 2}, "on_limit": "ask"},
        raise_steps,
    ),
    "budget_timeout": (
        [tool_use("save_note", {"title": f"n{i}", "text": "x"}, id=f"s{i}") for i in range(3)],
        {"limits": {"max_steps": 1, "approval_timeout_seconds": 1}, "on_limit": "ask"},
        nothing,
    ),
    # A sub-agent that tells its parent what it spends as it goes, until its share of the
    # parent's cost budget is spent.
    "subagent_spend": (
        [{**tool_use("agent__looper", {"task": "loop"}, id="l1"), "usage": CALL_USAGE}, answer("never")],
        {
            "_children": {".sub-1": [{**tool_use("get_time"), "usage": CALL_USAGE, "repeat": True}]},
            "_fields": spending_subagent_fields,
            "limits": {"cost_budget_usd": 0.004},
        },
        nothing,
    ),
    # A steer: given to the model's next call with the tool's result, in the same user turn.
    "steer": (
        [tool_use("slow_upsert", {"key": "k", "seconds": 1.5}, id="s1"), answer("fini")],
        {},
        steer_during_tool,
    ),
    # Interrupts: the calls in flight cut short (the `stop-calls` steps), the message the next turn.
    "interrupt": (
        [
            {
                "tool_calls": [
                    {"name": "slow_charge", "input": {"amount": 5, "seconds": 2}, "id": "c1"},
                    {"name": "long_read", "input": {"seconds": 60}, "id": "r1"},
                ]
            },
            answer("charged; reading stopped"),
        ],
        {},
        interrupt_once_charging,
    ),
    "interrupt_model": ([answer("word " * 200, pace=0.05), answer("done")], {}, interrupt_during_model),
    # Memory across sessions: the prompt's memories at start, then remember, recall, forget.
    "memory": (
        [
            tool_use("remember", {"text": "prefers green tea", "key": "drink"}, id="r1"),
            tool_use("recall", {"query": "tea"}, id="q1"),
            tool_use("forget", {"key": "drink"}, id="f1"),
            answer("done"),
        ],
        {"_fields": memory_fields},
        nothing,
    ),
}


async def record(names: list[str], out: Path) -> None:

    from activities.notify import NotifyActivities
    from devservers import temporal_server
    from devservers.fakemodel import FakeModelServer
    from infra.connection import connect
    from sessions.control import initial_search_attributes
    from tests.conftest import model_activities
    from tests.support.tools import TOOLS
    from worker import build_worker
    from workflows.agent import AgentWorkflow
    from workflows.contract import Limits, SessionInput

    logging.getLogger("temporalio").setLevel(logging.CRITICAL)  # expected activity failures
    data = Path(tempfile.mkdtemp(prefix="record-histories-"))
    os.environ["AGENT_DATA_DIR"] = str(data)
    server = temporal_server.start(log_file=data / "temporal.log")
    model = FakeModelServer().start()
    receiver = start_receiver()
    try:
        client = await connect(target_host=server.address)
        queue = f"record-{uuid.uuid4().hex[:8]}"
        activities = model_activities(model, data)
        notify = NotifyActivities("record-histories-secret", [str(RECEIVER["url"])], (0.2, 1.0, 5.0))
        async with build_worker(client, TOOLS, queue=queue, model=activities, notify=notify):
            for name in names:
                turns, fields, steer = SCENARIOS[name]
                session_id = f"replay-{name}"
                model.script.set(session_id, turns)
                fields = dict(fields)
                children = fields.pop("_children", {})
                for suffix, child_turns in children.items():
                    model.script.set(session_id + suffix, child_turns)
                if "_fields" in fields:
                    fields.update(fields.pop("_fields")())
                limits = Limits(**fields.pop("limits", {}))
                start = SessionInput(goal=f"scenario {name}", limits=limits, **fields)
                handle = await client.start_workflow(
                    AgentWorkflow.run,
                    start,
                    id=session_id,
                    task_queue=queue,
                    search_attributes=initial_search_attributes(start),  # as the client starts it
                )
                await steer(handle)
                result = await asyncio.wait_for(handle.result(), 60)
                first = client.get_workflow_handle(session_id, run_id=handle.first_execution_run_id)
                runs = [await first.fetch_history()]
                latest = await client.get_workflow_handle(session_id).fetch_history()
                files = [(f"{name}.json", runs[0])]
                if latest.run_id != runs[0].run_id:
                    files.append((f"{name}-last-run.json", latest))  # continued as new: the last run too
                for suffix in children:
                    child = await client.get_workflow_handle(session_id + suffix).fetch_history()
                    files.append((f"{name}-child.json", child))
                out.mkdir(parents=True, exist_ok=True)
                for path_name, history in files:
                    path = out / path_name
                    path.write_text(json.dumps(json.loads(history.to_json()), indent=1) + "\n")
                    print(f"{path}: {result.status} {result.stop_reason or ''} "
                          f"({len(history.events)} events)")  # fmt: skip
    finally:
        receiver.shutdown()
        model.stop()
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tests.record_histories", description=(__doc__ or "").partition("\n")[0]
    )
    parser.add_argument("scenarios", nargs="*", help=f"default: all ({', '.join(SCENARIOS)})")
    parser.add_argument("--out", type=Path, default=HISTORIES)
    args = parser.parse_args()
    unknown = [n for n in args.scenarios if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario {unknown[0]!r}")
    sys.path.insert(0, str(ROOT))
    asyncio.run(record(args.scenarios or list(SCENARIOS), args.out))


if __name__ == "__main__":
    main()
