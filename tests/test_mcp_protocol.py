"""The MCP server's protocol beside its tools, over stdio (`python mcp_server.py`) and over
`/mcp` (a real `python api.py`), driven by the `mcp` SDK's client: its name and version,
prompts that are served, argument completion of the caller's own sessions and of agent
names, resource subscriptions with their notices at the level the client set, and the
JSON-RPC error codes a strict client expects. The sessions are started and steered from
the test (not through the server) and a counting interceptor on the worker proves that
following them added no query, signal or update: no billable action."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import tomllib
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import pytest_asyncio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import (
    LoggingMessageNotification,
    PromptReference,
    ResourceTemplateReference,
    ResourceUpdatedNotification,
)
from temporalio.client import Client as TemporalClient

from devservers import temporal_server
from devservers.fakemodel import FakeModelServer
from sessions import control
from sessions.follow import follow
from tests.conftest import ROOT, answer, tool_use
from tests.support.api import TOKENS, WORKER_AGENT, ApiProcess, serve_api
from tests.support.billing import Inbound
from workflows.agent import AgentWorkflow
from workflows.contract import CancelRequest, Decision, SessionInput, UserMessage

pytestmark = [
    pytest.mark.xdist_group("mcp-protocol"),
    # resources/subscribe and logging/setLevel are what 2025-11-25 clients use; the SDK warns
    # that 2026-07-28 dropped them (listen, below, is their successor).
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

LEGACY, MODERN = "legacy", "2026-07-28"
EMAIL = {"to": "team@example.com", "subject": "hi", "body": "x"}
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
INVALID_PARAMS = -32602


@pytest_asyncio.fixture(scope="module")
async def api(
    client: TemporalClient, dev_server: temporal_server.DevServer, fake_model: FakeModelServer, data_dir: Path,
    tmp_path_factory: pytest.TempPathFactory, inbound: Inbound,
) -> AsyncIterator[ApiProcess]:  # fmt: skip
    async with serve_api(
        client, dev_server.address, fake_model, data_dir, tmp_path_factory.mktemp("mcp-protocol"),
        interceptors=(inbound,),
    ) as server:  # fmt: skip
        yield server


@pytest.fixture(scope="module")
def inbound() -> Inbound:
    return Inbound()


class Seen:
    """Every notification the client received, in order."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._grew = asyncio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, LoggingMessageNotification | ResourceUpdatedNotification):
            self.items.append(message)
            self._grew.set()

    def updated(self, uri: str) -> int:
        return sum(
            1 for m in self.items if isinstance(m, ResourceUpdatedNotification) and m.params.uri == uri
        )

    def notices(self) -> list[tuple[str, dict[str, Any]]]:
        return [
            (m.params.level, m.params.data) for m in self.items if isinstance(m, LoggingMessageNotification)
        ]

    async def until(self, check: Callable[[], bool], what: str, timeout: float = 60) -> None:
        try:
            async with asyncio.timeout(timeout):
                while not check():
                    self._grew.clear()
                    await self._grew.wait()
        except TimeoutError:
            raise AssertionError(f"timed out waiting for {what}: {self.items}") from None


@asynccontextmanager
async def connect(
    api: ApiProcess, transport: str, mode: str, user: str = "alice", **kwargs: Any
) -> AsyncIterator[Client]:
    """A client of the stdio server (run against the api's worker; its user an operator)
    or of `/mcp` as `user`."""
    if transport == "stdio":
        env = {**api.env, "PYTHONUNBUFFERED": "1"}
        env.pop("AGENT_API_USERS", None)
        params = StdioServerParameters(command=sys.executable, args=["mcp_server.py"], env=env, cwd=str(ROOT))
        with tempfile.TemporaryFile("w+") as stderr:
            async with Client(stdio_client(params, errlog=stderr), mode=mode, **kwargs) as mcp:
                yield mcp
    else:
        http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {TOKENS[user]}"}, timeout=httpx2.Timeout(30, read=120)
        )
        async with Client(
            streamable_http_client(f"{api.url}/mcp", http_client=http), mode=mode, **kwargs
        ) as mcp:
            yield mcp


async def start_chat(temporal: TemporalClient, api: ApiProcess, fake_model: FakeModelServer, user: str,
                     turns: list[dict[str, Any]], prefix: str = "proto") -> str:  # fmt: skip
    """A chat session of `user`, started from the test (so the server has not seen it),
    once it has answered its goal."""
    session_id = f"{prefix}-{uuid.uuid4().hex[:10]}"
    fake_model.script.set(session_id, [answer("Hello."), *turns])
    started = SessionInput(goal="help me", user_id=user, chat=True, search_attributes=True)
    await control.start(temporal, started, session_id, task_queue=api.env["TEMPORAL_TASK_QUEUE"])
    await until_event(temporal, session_id, "answered")
    return session_id


async def until_event(temporal: TemporalClient, session_id: str, kind: str, after: int = 0) -> int:
    """The offset of the session's first `kind` event from `after`, read from its history
    (no query)."""
    async with asyncio.timeout(60):
        async for item in follow(temporal, session_id, after):
            if item.topic == "event" and item.data.get("type") == kind:
                return item.offset
    raise AssertionError(f"session {session_id} ended without a {kind} event")


def code_of(err: pytest.ExceptionInfo[MCPError]) -> int:
    return err.value.error.code


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_name_version_prompts_and_protocol_errors(api: ApiProcess, transport: str):
    async with connect(api, transport, LEGACY) as mcp:
        assert mcp.server_info is not None
        assert (mcp.server_info.name, mcp.server_info.version) == (PROJECT["name"], PROJECT["version"])
        capabilities = mcp.server_capabilities
        assert capabilities.prompts and capabilities.completions and capabilities.logging
        assert capabilities.resources and capabilities.resources.subscribe
        prompts = {p.name: p for p in (await mcp.list_prompts()).prompts}
        assert set(prompts) == {"run_agent", "follow_session"}
        assert all(p.description for p in prompts.values())
        got = await mcp.get_prompt("run_agent", {"goal": "summarise the notes", "agent": "researcher"})
        text = got.messages[0].content.text  # pyright: ignore[reportAttributeAccessIssue]
        assert "start_session" in text and "researcher" in text and "summarise the notes" in text
        for name, arguments in [("no_such_prompt", {}), ("run_agent", {}), ("run_agent", {"goal": "x", "agent": "nobody"}),
                                ("follow_session", {"session_id": "no-such-session"})]:  # fmt: skip
            with pytest.raises(MCPError) as refused:
                await mcp.get_prompt(name, arguments)
            assert code_of(refused) == INVALID_PARAMS, (name, refused.value)
        with pytest.raises(MCPError) as refused:
            await mcp.call_tool("no_such_tool", {})
        assert code_of(refused) == INVALID_PARAMS and "no_such_tool" in refused.value.error.message
        for uri in ("session://no-such-session", "file:///etc/passwd"):
            with pytest.raises(MCPError) as refused:
                await mcp.subscribe_resource(uri)  # pyright: ignore[reportDeprecated]
            assert code_of(refused) == INVALID_PARAMS, (uri, refused.value)
        with pytest.raises(MCPError) as refused:
            await mcp.complete(PromptReference(name="no_such_prompt"), {"name": "x", "value": ""})
        assert code_of(refused) == INVALID_PARAMS
    async with connect(api, transport, MODERN) as mcp:
        with pytest.raises(MCPError) as refused:
            await mcp.call_tool("no_such_tool", {})
        assert code_of(refused) == INVALID_PARAMS


async def test_completion_offers_the_callers_own_sessions_and_the_agents(
    api: ApiProcess, client: TemporalClient, fake_model: FakeModelServer, inbound: Inbound
):
    tag = f"cmp{uuid.uuid4().hex[:6]}"
    mine = [await start_chat(client, api, fake_model, "alice", [], prefix=f"{tag}-a{n}") for n in range(2)]
    theirs = await start_chat(client, api, fake_model, "bob", [], prefix=f"{tag}-b")
    before = {s: inbound.of(s) for s in [*mine, theirs]}
    session = ResourceTemplateReference(uri="session://{session_id}")
    follow_prompt = PromptReference(name="follow_session")
    async with connect(api, "http", LEGACY) as alice, connect(api, "http", LEGACY, user="bob") as bob:
        for ref in (
            session,
            ResourceTemplateReference(uri="session://{session_id}/transcript"),
            follow_prompt,
        ):
            found = (await alice.complete(ref, {"name": "session_id", "value": tag})).completion
            assert sorted(found.values) == sorted(mine) and found.total == 2 and not found.has_more, ref
        assert (await bob.complete(session, {"name": "session_id", "value": tag})).completion.values == [
            theirs
        ]
        assert (
            await alice.complete(session, {"name": "session_id", "value": f"{tag}-b"})
        ).completion.values == []
        agents = (
            await alice.complete(PromptReference(name="run_agent"), {"name": "agent", "value": ""})
        ).completion
        assert agents.values == ["assistant", "note-keeper", "researcher", WORKER_AGENT]
        assert (await alice.complete(PromptReference(name="run_agent"), {"name": "agent", "value": "re"})).completion.values == ["researcher"]  # fmt: skip
        with pytest.raises(MCPError) as refused:
            await alice.complete(session, {"name": "agent", "value": ""})
        assert code_of(refused) == INVALID_PARAMS
    async with connect(api, "stdio", LEGACY) as operator:
        found = (await operator.complete(session, {"name": "session_id", "value": tag})).completion
        assert sorted(found.values) == sorted([*mine, theirs])
    assert {s: inbound.of(s) for s in [*mine, theirs]} == before  # no query, signal or update


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_subscriptions_and_notices_follow_a_session_at_no_billable_action(
    api: ApiProcess, client: TemporalClient, fake_model: FakeModelServer, inbound: Inbound, transport: str
):
    """Subscribed to a chat session's status and transcript at level `notice`: each call
    waiting for approval is told (its answers, `info`, are not), each change updates the
    resources; the transcript's stop when unsubscribed; at `info` the end is told too."""
    session_id = await start_chat(client, api, fake_model, "alice", [
        tool_use("send_email", EMAIL, id="e1"), answer("Sent."), tool_use("send_email", EMAIL, id="e2"), answer("Not sent."),
    ])  # fmt: skip
    handle = client.get_workflow_handle(session_id)
    status, transcript = f"session://{session_id}", f"session://{session_id}/transcript"
    seen = Seen()

    def approvals() -> list[str]:
        return [d["tool_use_id"] for level, d in seen.notices() if d["event"] == "approval"]

    async with connect(api, transport, LEGACY, message_handler=seen) as mcp:
        await mcp.set_logging_level("notice")
        before = inbound.of(session_id)
        await mcp.subscribe_resource(status)  # pyright: ignore[reportDeprecated]
        await mcp.subscribe_resource(transcript)  # pyright: ignore[reportDeprecated]
        await handle.execute_update(AgentWorkflow.send_message, UserMessage(text="email the team"))
        await seen.until(lambda: approvals() == ["e1"], "the first approval notice")
        assert seen.updated(status) >= 1 and seen.updated(transcript) >= 1
        await handle.execute_update(AgentWorkflow.approve_call, Decision(tool_use_id="e1", decided_by="t"))
        await handle.execute_update(AgentWorkflow.send_message, UserMessage(text="again"))
        await seen.until(lambda: approvals() == ["e1", "e2"], "the second approval notice")
        # The answer between them is `info`: below the level, not told.
        assert [d["event"] for _, d in seen.notices()] == ["approval", "approval"], seen.notices()
        await mcp.unsubscribe_resource(transcript)  # pyright: ignore[reportDeprecated]
        transcripts, statuses = seen.updated(transcript), seen.updated(status)
        await mcp.set_logging_level("info")
        await handle.execute_update(
            AgentWorkflow.deny_call, Decision(tool_use_id="e2", reason="no", decided_by="t")
        )
        await until_event(client, session_id, "answered", await until_event(client, session_id, "decision"))
        await handle.execute_update(AgentWorkflow.close_session)
        await seen.until(lambda: any(d["event"] == "end" for _, d in seen.notices()), "the end notice")
        level, ended = seen.notices()[-1]
        assert (level, ended["status"], ended["session_id"]) == ("info", "completed", session_id), ended
        assert seen.updated(status) > statuses and seen.updated(transcript) == transcripts
    # The test's own five updates, and nothing else: no query, no signal.
    assert inbound.of(session_id) == {**before, "update": before["update"] + 5}


async def test_a_user_subscribes_only_to_their_own_sessions(
    api: ApiProcess, client: TemporalClient, fake_model: FakeModelServer
):
    theirs = await start_chat(client, api, fake_model, "bob", [])
    async with connect(api, "http", LEGACY) as alice:
        for uri in (f"session://{theirs}", f"session://{theirs}/transcript"):
            with pytest.raises(MCPError, match=f"no session '{theirs}'") as refused:
                await alice.subscribe_resource(uri)  # pyright: ignore[reportDeprecated]
            assert code_of(refused) == INVALID_PARAMS


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_listen_stream_follows_the_callers_sessions_at_protocol_2026(
    api: ApiProcess, client: TemporalClient, fake_model: FakeModelServer, inbound: Inbound, transport: str
):
    session_id = await start_chat(client, api, fake_model, "alice", [tool_use("send_email", EMAIL, id="e1")])
    theirs = await start_chat(client, api, fake_model, "bob", [])
    notices: list[Any] = []

    async def logged(params: Any) -> None:
        notices.append(params)

    uri = f"session://{session_id}"
    async with connect(api, transport, MODERN, log_level="notice", logging_callback=logged) as mcp:
        before = inbound.of(session_id)
        async with mcp.listen(resource_subscriptions=[uri, f"session://{theirs}", "file:///x"]) as listening:
            honored = listening.honored.resource_subscriptions
            assert honored == ([uri, f"session://{theirs}"] if transport == "stdio" else [uri]), honored
            await client.get_workflow_handle(session_id).execute_update(
                AgentWorkflow.send_message, UserMessage(text="email the team")
            )
            async with asyncio.timeout(60):
                async for event in listening:
                    assert getattr(event, "uri", None) == uri, event
                    break
                while not notices:  # the notice rides the same stream, after the update
                    await asyncio.sleep(0.05)
        assert [(n.level, n.data["event"], n.data["tool_use_id"]) for n in notices] == [
            ("notice", "approval", "e1")
        ]
        assert inbound.of(session_id) == {**before, "update": before["update"] + 1}
    await client.get_workflow_handle(session_id).execute_update(
        AgentWorkflow.cancel_session, CancelRequest(reason="done", decided_by="t")
    )


def test_the_project_names_one_version():
    from infra import project

    assert (project.NAME, project.version()) == (PROJECT["name"], PROJECT["version"])
    assert os.path.basename(project.PYPROJECT) == "pyproject.toml"
