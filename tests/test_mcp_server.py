"""The sessions as an MCP server over stdio, driven by the `mcp` SDK's own client
spawning `python mcp_server.py` against the test dev server: at the SDK's newest
protocol revision (the tool answers that input is required, the client calls again) and
at the one before it (the server asks during the call), with an elicitation callback that
approves with an edited input, and without one (the pending calls come back;
approve_tool_call decides). Progress values grow; errors are one line; nothing but MCP
reaches standard output. Over HTTP: tests/test_mcp_server_http.py."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_types import CallToolResult, ElicitRequestParams, ElicitResult, TextResourceContents
from temporalio.client import Client as TemporalClient
from temporalio.common import WorkflowIDConflictPolicy

from devservers import temporal_server
from devservers.fakemodel import FakeModelServer
from sessions import control
from tests.conftest import ROOT, Harness, answer, tool_use
from tests.support.procs import wait_until

EMAIL = {"to": "team@example.com", "subject": "hi", "body": "x"}
EDITED = {**EMAIL, "to": "boss@example.com"}
MODERN, LEGACY = "2026-07-28", "legacy"
TOOLS = {
    "start_session", "get_session", "list_sessions", "list_agents", "wait_for_session", "approve_tool_call",
    "deny_tool_call", "send_message", "pause_session", "resume_session", "close_session", "cancel_session",
    "raise_limit", "decline_limit", "list_memories", "forget_memory",
}  # fmt: skip
MCP_USER = "mcp:" + control.cli_user().removeprefix("cli:")


def new_id(prefix: str = "mcp") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class Approver:
    """An elicitation callback: approves every call with `EDITED`, and keeps what it was asked."""

    def __init__(self) -> None:
        self.asked: list[ElicitRequestParams] = []

    async def __call__(self, context: Any, params: ElicitRequestParams) -> ElicitResult:
        self.asked.append(params)
        return ElicitResult(
            action="accept", content={"decision": "approve", "reason": "", "input": json.dumps(EDITED)}
        )


class Progress:
    def __init__(self) -> None:
        self.seen: list[tuple[float, str | None]] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, message))


def result(called: CallToolResult) -> dict[str, Any]:
    assert not called.is_error, called.content
    assert called.structured_content is not None
    return called.structured_content


def error_line(called: CallToolResult) -> str:
    assert called.is_error, called.structured_content
    text = called.content[0].text  # pyright: ignore[reportAttributeAccessIssue]
    assert "\n" not in text, text
    return text


async def decided(client: TemporalClient, session_id: str, tool_use_id: str) -> dict[str, Any]:
    history = control.history_document(await control.history(client, session_id))
    return next(c for c in history["tool_calls"] if c["tool_use_id"] == tool_use_id)


async def approved_with_elicitation(
    mcp: Client, fake_model: FakeModelServer, temporal: TemporalClient, user: str
) -> None:
    """Start a session whose email waits for approval; wait_for_session asks the person (the
    client's callback approves with an edited input) and returns when the session ends."""
    session_id = new_id()
    fake_model.script.set(
        session_id,
        [tool_use("send_email", EMAIL, id="e1", text="Emailing the team."), answer("Sent it, as asked.")],
    )
    started = result(
        await mcp.call_tool("start_session", {"goal": "email the team", "session_id": session_id})
    )
    assert started["session_id"] == session_id and started["status"] in ("running", "waiting_approval")
    progress = Progress()
    waited = result(
        await mcp.call_tool(
            "wait_for_session", {"session_id": session_id, "timeout_seconds": 60}, progress_callback=progress
        )
    )
    assert waited["status"] == "completed" and waited["returned_because"] == "ended", waited
    assert waited["answer"] == "Sent it, as asked." and waited["user_id"] == user
    call = await decided(temporal, session_id, "e1")
    assert call["approved"] and call["approved_input"] == EDITED and call["decided_by"] == user, call
    values = [value for value, _ in progress.seen]
    assert len(values) >= 2 and values == sorted(set(values)), progress.seen
    assert all(message and message.startswith("step ") for _, message in progress.seen), progress.seen
    assert any("send_email" in (message or "") for _, message in progress.seen), progress.seen


def assert_asked_with_a_flat_form(asked: list[ElicitRequestParams]) -> None:
    assert len(asked) == 1, asked
    schema = asked[0].requested_schema  # pyright: ignore[reportAttributeAccessIssue]
    properties = schema["properties"]
    assert set(properties) == {"decision", "reason", "input"}
    assert properties["decision"]["enum"] == ["approve", "deny"]
    assert all(p["type"] in ("string", "number", "integer", "boolean") for p in properties.values())
    assert json.loads(properties["input"]["default"]) == EMAIL
    assert "send_email" in asked[0].message


# ---- stdio ---------------------------------------------------------------------------------


@pytest_asyncio.fixture
async def stdio(
    dev_server: temporal_server.DevServer, harness: Harness, data_dir: Path
) -> AsyncIterator[StdioServerParameters]:
    env = {
        **os.environ, "TEMPORAL_ADDRESS": dev_server.address, "TEMPORAL_NAMESPACE": "default",
        "TEMPORAL_TASK_QUEUE": harness.task_queue, "AGENT_DATA_DIR": str(data_dir), "PYTHONUNBUFFERED": "1",
    }  # fmt: skip
    env.pop("AGENT_API_USERS", None)
    yield StdioServerParameters(command=sys.executable, args=["mcp_server.py"], env=env, cwd=str(ROOT))


class Wire:
    """What reached the client besides MCP: lines of standard output it could not read."""

    def __init__(self) -> None:
        self.unreadable: list[Exception] = []

    async def __call__(self, message: Any) -> None:
        if isinstance(message, Exception):
            self.unreadable.append(message)


@pytest.mark.parametrize("mode", [MODERN, LEGACY])
async def test_stdio_with_elicitation_approves_with_an_edited_input(
    mode: str, stdio: StdioServerParameters, harness: Harness, fake_model: FakeModelServer
):
    approver, wire = Approver(), Wire()
    with tempfile.TemporaryFile("w+") as stderr:
        async with Client(
            stdio_client(stdio, errlog=stderr), mode=mode, elicitation_callback=approver, message_handler=wire
        ) as mcp:
            assert mcp.protocol_version == (MODERN if mode == MODERN else "2025-11-25")
            listed = {t.name: t for t in (await mcp.list_tools()).tools}
            assert set(listed) == TOOLS
            assert all(t.output_schema and t.input_schema["type"] == "object" for t in listed.values())
            notes = {name: tool.annotations for name, tool in listed.items()}
            assert all(note is not None for note in notes.values())
            assert all(notes[n].read_only_hint for n in ("get_session", "list_sessions", "list_agents"))  # pyright: ignore[reportOptionalMemberAccess]  (checked above)
            assert notes["cancel_session"].destructive_hint  # pyright: ignore[reportOptionalMemberAccess]  (checked above)
            assert not any(notes[n].destructive_hint for n in TOOLS - {"cancel_session"})  # pyright: ignore[reportOptionalMemberAccess]  (checked above)
            await approved_with_elicitation(mcp, fake_model, harness.client, MCP_USER)
            assert_asked_with_a_flat_form(approver.asked)
        stderr.seek(0)
        logged = stderr.read()
    assert not wire.unreadable, (wire.unreadable, logged[-3000:])


async def test_stdio_without_elicitation_returns_the_pending_calls(
    stdio: StdioServerParameters, harness: Harness, fake_model: FakeModelServer
):
    session_id = new_id()
    fake_model.script.set(
        session_id,
        [
            tool_use("send_email", EMAIL, id="e1"),
            tool_use("send_email", EMAIL, id="e2"),
            answer("One sent, one not."),
        ],
    )
    async with Client(stdio) as mcp:
        result(await mcp.call_tool("start_session", {"goal": "email twice", "session_id": session_id}))
        waited = result(
            await mcp.call_tool("wait_for_session", {"session_id": session_id, "timeout_seconds": 30})
        )
        assert waited["returned_because"] == "waiting_approval", waited
        assert [p["tool_use_id"] for p in waited["pending_approvals"]] == ["e1"] and waited[
            "pending_approvals"
        ][0]["input"] == EMAIL
        bad = error_line(await mcp.call_tool(
            "approve_tool_call", {"session_id": session_id, "tool_use_id": "e1", "input": {**EMAIL, "to": "not an address"}}
        ))  # fmt: skip
        assert "to" in bad, bad
        approved = result(
            await mcp.call_tool(
                "approve_tool_call", {"session_id": session_id, "tool_use_id": "e1", "input": EDITED}
            )
        )
        assert approved["session_id"] == session_id
        again = error_line(
            await mcp.call_tool("approve_tool_call", {"session_id": session_id, "tool_use_id": "e1"})
        )
        assert "e1" in again, again
        waited = result(
            await mcp.call_tool("wait_for_session", {"session_id": session_id, "timeout_seconds": 30})
        )
        assert [p["tool_use_id"] for p in waited["pending_approvals"]] == ["e2"], waited
        result(
            await mcp.call_tool(
                "deny_tool_call", {"session_id": session_id, "tool_use_id": "e2", "reason": "once is enough"}
            )
        )
        waited = result(
            await mcp.call_tool("wait_for_session", {"session_id": session_id, "timeout_seconds": 30})
        )
        assert waited["status"] == "completed" and waited["answer"] == "One sent, one not.", waited
        first, second = (
            await decided(harness.client, session_id, "e1"),
            await decided(harness.client, session_id, "e2"),
        )
        assert first["approved_input"] == EDITED and first["decided_by"] == MCP_USER
        assert (
            second["status"] == "denied"
            and second["reason"] == "once is enough"
            and second["decided_by"] == MCP_USER
        )

        status = json.loads(_text(await mcp.read_resource(f"session://{session_id}")))
        assert status["status"] == "completed" and status["session_id"] == session_id
        transcript = json.loads(_text(await mcp.read_resource(f"session://{session_id}/transcript")))
        assert (
            transcript[0]["role"] == "user" and transcript[-1]["content"][0]["text"] == "One sent, one not."
        )
        listed = result(await mcp.call_tool("list_sessions", {"limit": 200}))
        assert session_id in {s["session_id"] for s in listed["sessions"]}
        assert {"name", "description"} <= set(result(await mcp.call_tool("list_agents", {}))["agents"][0])

        assert "no session 'nope'" in error_line(await mcp.call_tool("get_session", {"session_id": "nope"}))
        too_long = error_line(
            await mcp.call_tool("wait_for_session", {"session_id": session_id, "timeout_seconds": 601})
        )
        assert "timeout_seconds" in too_long, too_long
        assert "has ended" in error_line(await mcp.call_tool("pause_session", {"session_id": session_id}))


async def test_stdio_steers_a_chat(
    stdio: StdioServerParameters, harness: Harness, fake_model: FakeModelServer
):
    """send_message, pause, resume, close and cancel, each answering the status."""
    chat, other = new_id("chat"), new_id()
    fake_model.script.set(chat, [answer("Hello."), answer("Second answer.")])
    fake_model.script.set(other, [tool_use("wait_for_cancel", {"seconds": 60}, id="w1")])
    async with Client(stdio) as mcp:
        result(await mcp.call_tool("start_session", {"goal": "say hello", "session_id": chat, "chat": True}))
        waited = result(await mcp.call_tool("wait_for_session", {"session_id": chat, "timeout_seconds": 30}))
        assert waited["returned_because"] == "waiting_input" and waited["answer"] == "Hello.", waited
        result(await mcp.call_tool("pause_session", {"session_id": chat}))
        assert result(await mcp.call_tool("get_session", {"session_id": chat}))["status"] == "paused"
        result(await mcp.call_tool("resume_session", {"session_id": chat}))
        result(await mcp.call_tool("send_message", {"session_id": chat, "text": "and again?"}))
        waited = result(await mcp.call_tool("wait_for_session", {"session_id": chat, "timeout_seconds": 30}))
        assert waited["answer"] == "Second answer." and waited["user_turns"] == 2, waited
        closed = result(await mcp.call_tool("close_session", {"session_id": chat}))
        assert closed["session_id"] == chat
        assert (
            result(await mcp.call_tool("wait_for_session", {"session_id": chat, "timeout_seconds": 30}))[
                "status"
            ]
            == "completed"
        )

        result(await mcp.call_tool("start_session", {"goal": "wait", "session_id": other}))
        short = result(await mcp.call_tool("wait_for_session", {"session_id": other, "timeout_seconds": 1}))
        assert short["returned_because"] == "timeout" and short["status"] == "running", short
        result(await mcp.call_tool("cancel_session", {"session_id": other, "reason": "not needed"}))
        ended = result(await mcp.call_tool("wait_for_session", {"session_id": other, "timeout_seconds": 30}))
        assert ended["status"] == "cancelled" and ended["returned_because"] == "ended", ended


def _text(read: Any) -> str:
    contents = read.contents[0]
    assert isinstance(contents, TextResourceContents), contents
    return contents.text


async def test_stdio_raises_and_declines_a_budget_and_interrupts(
    stdio: StdioServerParameters, harness: Harness, fake_model: FakeModelServer
):
    """start_session with on_limit "ask": wait_for_session returns at the limit, raise_limit
    lets the session go on, decline_limit stops it; send_message's mode interrupt."""
    raised, declined, streaming = new_id(), new_id(), new_id()
    for session_id in (raised, declined):
        fake_model.script.set(session_id, [tool_use("get_time", id="t1"), answer("It is noon.")])
    words = " ".join(f"word{i}" for i in range(600))
    fake_model.script.set(streaming, [answer(words, pace=0.05), answer("short")])

    async def wait(mcp: Client, session_id: str) -> dict[str, Any]:
        return result(
            await mcp.call_tool("wait_for_session", {"session_id": session_id, "timeout_seconds": 60})
        )

    async with Client(stdio) as mcp:
        for session_id in (raised, declined):
            started = {"goal": "the time", "session_id": session_id, "max_steps": 1, "on_limit": "ask"}
            result(await mcp.call_tool("start_session", started))
            waited = await wait(mcp, session_id)
            assert waited["returned_because"] == "waiting_budget", waited
            reached = waited["limit_reached"]
            assert (reached["name"], reached["limit"], reached["used"]) == ("max_steps", 1, 1), reached
        too_low = {"session_id": raised, "name": "max_steps", "value": 1}
        assert "above what is used" in error_line(await mcp.call_tool("raise_limit", too_low))
        assert "name" in error_line(
            await mcp.call_tool("raise_limit", {"session_id": raised, "name": "patience", "value": 3})
        )
        status = result(await mcp.call_tool("raise_limit", {**too_low, "value": 3}))
        assert status["limits"]["max_steps"] == 3
        done = await wait(mcp, raised)
        assert (done["status"], done["answer"], done["steps"]) == ("completed", "It is noon.", 2), done

        result(await mcp.call_tool("decline_limit", {"session_id": declined, "reason": "enough"}))
        ended = await wait(mcp, declined)
        assert (ended["status"], ended["stop_reason"]) == ("stopped", "max_steps"), ended
        assert "has ended" in error_line(await mcp.call_tool("decline_limit", {"session_id": declined}))

        result(await mcp.call_tool("start_session", {"goal": "write a lot", "session_id": streaming}))
        [request] = await wait_until(
            lambda: [r for r in fake_model.script.requests if r["session"] == streaming],
            timeout=30, what="the model call",
        )  # fmt: skip
        sent = {"session_id": streaming, "text": "one word", "mode": "interrupt"}
        assert result(await mcp.call_tool("send_message", sent))["session_id"] == streaming
        await wait_until(lambda: request.get("closed"), timeout=15, what="the model's connection closed")
        assert (await wait(mcp, streaming))["answer"] == "short"


async def test_stdio_lists_and_forgets_only_its_users_memories(
    stdio: StdioServerParameters, harness: Harness
):
    from datetime import UTC, datetime

    from activities.memory import Memory, MemoryInput, scope_id
    from sessions import memory
    from workflows.memory import MemoryWorkflow

    at = datetime.now(UTC)
    handles = []
    for user, key, text in [(MCP_USER, "drink", "green tea"), ("alice", "secret", "alice's")]:
        handle = await harness.client.start_workflow(
            MemoryWorkflow.run, MemoryInput(memories=[Memory(key=key, text=text, at=at)]),
            id=scope_id(user, None), task_queue=harness.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.TERMINATE_EXISTING,
        )  # fmt: skip
        handles.append(handle)
    try:
        async with Client(stdio) as mcp:
            mine = result(await mcp.call_tool("list_memories", {}))
            assert mine["user"] == MCP_USER and [(m["key"], m["text"]) for m in mine["memories"]] == [
                ("drink", "green tea")
            ]
            assert "no memory 'secret'" in error_line(await mcp.call_tool("forget_memory", {"key": "secret"}))
            assert error_line(await mcp.call_tool("list_memories", {"agent": "../x"}))
            assert result(await mcp.call_tool("forget_memory", {"key": "drink"}))["memories"] == []
            assert "no memory 'drink'" in error_line(await mcp.call_tool("forget_memory", {"key": "drink"}))
        assert [m.key for m in await memory.listing(harness.client, "alice", None)] == ["secret"]
    finally:
        for handle in handles:
            await handle.terminate()
