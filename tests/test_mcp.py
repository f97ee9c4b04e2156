"""MCP tool servers: real servers (tests/support/mcp_servers.py) over stdio and streamable
HTTP, listed and called through the MCP activities, and killed by PID mid-call.

No Temporal server is needed: the activities run in `ActivityEnvironment`, which
records their heartbeats.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.mcp import McpActivities
from activities.transcript import TranscriptStore
from activities.wire import ToolRequest
from devservers import processes
from devservers.temporal_server import free_port
from infra.definitions import McpServer
from tests.support.mcp_servers import SLOW_STARTED

ROOT = Path(__file__).resolve().parent.parent
STDIO = [sys.executable, "-m", "tests.support.mcp_servers", "--stdio"]
ENV = {"PYTHONPATH": str(ROOT), "MCP_TEST_GREETING": "hello from the definitions"}
# MCP servers shared by the module (`http_server`, `both`): its tests run in one xdist process.
pytestmark = pytest.mark.xdist_group("mcp")


def request(name: str, input: dict, max_output: int = 8000, tool_use_id: str = "toolu_1") -> ToolRequest:
    return ToolRequest(
        session_id="session-1",
        user_id="ada",
        tool_use_id=tool_use_id,
        name=name,
        input=input,
        max_output=max_output,
    )


class HttpServer:
    """The test MCP server over streamable HTTP, in a process of its own."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        """`env` is added to the server's environment."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.mcp_servers", "--http", str(self.port)], cwd=ROOT,
            env={**os.environ, **(env or {})},
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                assert self.process.poll() is None, "the MCP test server exited"
                time.sleep(0.1)
        self.kill()
        raise TimeoutError("the MCP test server did not listen within 20 s")

    def kill(self) -> None:
        processes.kill(self.process)


@pytest.fixture(scope="module")
def http_server() -> Iterator[HttpServer]:
    server = HttpServer()
    yield server
    server.kill()


async def slow_call_started(marker: Path, timeout: float = 30) -> None:
    """Wait until the test server's `slow` tool has started (it writes `marker`)."""
    deadline = time.monotonic() + timeout
    while not marker.exists():
        assert time.monotonic() < deadline, f"no slow call started within {timeout:g} s"
        await asyncio.sleep(0.05)


def with_heartbeat_timeout(env: ActivityEnvironment, seconds: float = 3) -> ActivityEnvironment:
    """The activity scheduled with a heartbeat timeout: without one it sends no heartbeat."""
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=seconds))
    return env


def make(tmp_path: Path, **servers: McpServer) -> tuple[McpActivities, TranscriptStore]:
    store = TranscriptStore(tmp_path / "transcripts")
    return McpActivities(servers, store=store), store


@pytest_asyncio.fixture(scope="module")
async def both(
    http_server: HttpServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[McpActivities]:
    """One stdio and one HTTP server, shared by the tests that leave them running."""
    acts, _ = make(
        tmp_path_factory.mktemp("mcp"),
        local=McpServer(command=STDIO, env=ENV, timeout_seconds=10),
        remote=McpServer(url=http_server.url, timeout_seconds=10),
    )
    yield acts
    await acts.aclose()


async def server_pid(acts: McpActivities, name: str) -> int:
    return json.loads((await acts.call_mcp_tool(request(f"{name}__whoami", {}))).content)["pid"]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A child that exited but is not reaped yet still answers signal 0.
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split(") ")[1][0] != "Z"


async def test_lists_tools_over_stdio_and_http(both: McpActivities) -> None:
    specs = await both.list_mcp_tools(["local", "remote"])
    by_name = {s.name: s for s in specs}
    for server in ("local", "remote"):
        assert by_name[f"{server}__greet"].policy == "read_only"
        assert by_name[f"{server}__set_value"].policy == "idempotent"
        # No hints: MCP's defaults say it may be destructive and not idempotent.
        assert by_name[f"{server}__fail"].policy == "at_most_once"
        greet = by_name[f"{server}__greet"]
        assert greet.input_schema["properties"]["name"]["type"] == "string"
        assert greet.input_schema["required"] == ["name"]
        assert greet.description == "Say hello to someone."
        assert (greet.server, greet.timeout_seconds, greet.requires_approval) == (server, 10, False)
    assert [s.name for s in specs][:2] == ["local__greet", "local__set_value"]


async def test_configured_policy_overrides_the_hints(tmp_path: Path, http_server: HttpServer) -> None:
    acts, _ = make(tmp_path, careful=McpServer(url=http_server.url, policy="at_most_once"))
    specs = await acts.list_mcp_tools(["careful"])
    assert {s.policy for s in specs} == {"at_most_once"}
    await acts.aclose()


@pytest.mark.parametrize("server", ["local", "remote"])
async def test_a_text_result_and_the_idempotency_key_reaches_the_server(
    both: McpActivities, server: str
) -> None:
    outcome = await both.call_mcp_tool(request(f"{server}__greet", {"name": "Ada"}))
    assert (outcome.content, outcome.is_error, outcome.content_ref) == ("hello, Ada", False, None)
    echoed = json.loads(
        (await both.call_mcp_tool(request(f"{server}__echo_meta", {}, tool_use_id="toolu_9"))).content
    )
    assert echoed["meta"]["idempotency_key"] == "session-1:toolu_9"
    assert (echoed["meta"]["session_id"], echoed["meta"]["user_id"]) == ("session-1", "ada")


async def test_the_configured_environment_reaches_a_stdio_server(both: McpActivities) -> None:
    answer = json.loads((await both.call_mcp_tool(request("local__whoami", {}))).content)
    assert answer["greeting"] == "hello from the definitions"


async def test_an_error_result_is_an_error_outcome(both: McpActivities) -> None:
    outcome = await both.call_mcp_tool(request("remote__fail", {"reason": "disk on fire"}))
    assert outcome.is_error
    assert "disk on fire" in outcome.content


async def test_a_big_output_is_truncated_and_stored(tmp_path: Path, http_server: HttpServer) -> None:
    acts, store = make(tmp_path, remote=McpServer(url=http_server.url))
    outcome = await acts.call_mcp_tool(request("remote__big", {"size": 1_000_000}, max_output=8000))
    assert outcome.truncated_chars == 1_000_000 - 8000
    assert (
        outcome.content.startswith("x" * 8000)
        and "[truncated 992000 of 1000000 characters" in outcome.content
    )
    assert outcome.content_ref is not None and await store.get_blob(outcome.content_ref) == outcome.content
    await acts.aclose()


async def test_bad_input_names_the_field_and_never_reaches_the_server(both: McpActivities) -> None:
    bad = request("local__set_value", {"key": "a", "value": "seven"})
    problem = await both.check_mcp_input(bad)
    assert problem == "invalid input for local__set_value: value: 'seven' is not of type 'integer'"
    outcome = await both.call_mcp_tool(bad)
    assert (outcome.content, outcome.is_error) == (problem, True)
    assert await both.check_mcp_input(request("local__set_value", {"key": "a", "value": 7})) is None
    missing = await both.call_mcp_tool(request("remote__greet", {}))
    assert missing.is_error and "'name' is a required property" in missing.content


async def test_an_unknown_tool_is_an_error_outcome(both: McpActivities) -> None:
    outcome = await both.call_mcp_tool(request("remote__nope", {}))
    assert outcome.is_error and outcome.content.startswith(
        "unknown tool 'remote__nope'; MCP server remote has:"
    )
    assert "remote__greet" in outcome.content


async def test_a_slow_tool_fails_at_the_timeout_and_heartbeats_meanwhile(tmp_path: Path) -> None:
    # The server's timeout also bounds its start (a Python process importing the MCP SDK):
    # 8 s leave room for that on a loaded machine.
    timeout = 8.0
    acts, _ = make(tmp_path, local=McpServer(command=STDIO, env=ENV, timeout_seconds=timeout))
    await acts.list_mcp_tools(["local"])  # the process start is not part of the call
    env = with_heartbeat_timeout(ActivityEnvironment())  # as `worker.py --heartbeat-timeout 3` runs it
    beats: list[tuple] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    started = time.monotonic()
    with pytest.raises(ApplicationError) as caught:
        await env.run(acts.call_mcp_tool, request("local__slow", {"seconds": 60}))
    took = time.monotonic() - started
    assert caught.value.type == "McpTimeout" and not caught.value.non_retryable
    assert caught.value.message == f"MCP server local: no answer to the call to slow within {timeout:g} s"
    assert timeout - 0.1 < took < timeout + 1.5, took
    assert len(beats) >= 2
    # The server is still the same process, and answers the next call.
    assert (await acts.call_mcp_tool(request("local__greet", {"name": "again"}))).content == "hello, again"
    await acts.aclose()


async def test_an_http_server_killed_mid_call_fails_the_call_at_once(tmp_path: Path) -> None:
    started = tmp_path / "slow-started"
    server = HttpServer(env={SLOW_STARTED: str(started)})
    acts, _ = make(tmp_path, remote=McpServer(url=server.url, timeout_seconds=5))
    try:
        call = asyncio.create_task(
            ActivityEnvironment().run(acts.call_mcp_tool, request("remote__slow", {"seconds": 60}))
        )
        await slow_call_started(started)
        assert not call.done()
        server.kill()
        killed = time.monotonic()
        with pytest.raises(ApplicationError) as caught:
            await call
        assert time.monotonic() - killed < 5
        assert caught.value.type == "McpConnectionLost" and not caught.value.non_retryable
        assert caught.value.message.startswith(
            "MCP server remote: the connection was lost during the call to slow"
        )
        # Down: the next call says so within the timeout, without having sent anything.
        with pytest.raises(ApplicationError) as down:
            await acts.call_mcp_tool(request("remote__greet", {"name": "x"}))
        assert down.value.type == "McpServerUnavailable"
        assert down.value.message.startswith("MCP server remote cannot be reached: ")
    finally:
        server.kill()
        await acts.aclose()


async def test_a_stdio_server_killed_mid_call_is_started_again_for_the_next_call(tmp_path: Path) -> None:
    started = tmp_path / "slow-started"
    acts, _ = make(
        tmp_path, local=McpServer(command=STDIO, env={**ENV, SLOW_STARTED: str(started)}, timeout_seconds=10)
    )
    try:
        first = await server_pid(acts, "local")
        call = asyncio.create_task(
            ActivityEnvironment().run(acts.call_mcp_tool, request("local__slow", {"seconds": 60}))
        )
        await slow_call_started(started)
        os.kill(first, signal.SIGKILL)
        killed = time.monotonic()
        with pytest.raises(ApplicationError) as caught:
            await call
        assert time.monotonic() - killed < 2
        assert caught.value.type == "McpConnectionLost"
        second = await server_pid(acts, "local")
        assert second != first
        # Killed between calls: noticed before the next call is sent, which then just works.
        os.kill(second, signal.SIGKILL)
        await asyncio.sleep(0.5)
        outcome = await acts.call_mcp_tool(request("local__greet", {"name": "Ada"}))
        assert (outcome.content, outcome.is_error) == ("hello, Ada", False)
        third = await server_pid(acts, "local")
        assert third not in (first, second)
    finally:
        await acts.aclose()
    assert not alive(third)


async def test_calls_share_one_stdio_server_until_the_worker_closes(tmp_path: Path) -> None:
    acts, _ = make(tmp_path, local=McpServer(command=STDIO, env=ENV))
    pids = await asyncio.gather(*(server_pid(acts, "local") for _ in range(5)))
    assert len(set(pids)) == 1 and alive(pids[0])
    await acts.aclose()
    assert not alive(pids[0])


async def test_a_server_that_cannot_be_reached_or_is_unknown_is_one_line(tmp_path: Path) -> None:
    acts, _ = make(
        tmp_path,
        nowhere=McpServer(url=f"http://127.0.0.1:{free_port()}/mcp", timeout_seconds=3),
        broken=McpServer(command=[sys.executable, "-c", "import sys; sys.exit(3)"], timeout_seconds=3),
    )
    for server in ("nowhere", "broken"):
        started = time.monotonic()
        with pytest.raises(ApplicationError) as caught:
            await acts.list_mcp_tools([server])
        assert time.monotonic() - started < 4
        assert caught.value.message.startswith(f"MCP server {server} cannot be reached: ")
        assert "\n" not in caught.value.message and not caught.value.non_retryable
    with pytest.raises(ApplicationError) as unknown:
        await acts.list_mcp_tools(["files"])
    assert (
        unknown.value.message == "no MCP server 'files' in this worker's definitions; it has: broken, nowhere"
    )
    await acts.aclose()


async def test_the_example_notes_server(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "examples.notes_server"]
    acts, _ = make(tmp_path, notes=McpServer(command=command, env={"AGENT_DATA_DIR": str(tmp_path)}))
    try:
        specs = {s.name: s.policy for s in await acts.list_mcp_tools(["notes"])}
        assert specs == {
            "notes__list_notes": "read_only",
            "notes__read_note": "read_only",
            "notes__write_note": "idempotent",
        }
        for _ in range(2):  # a retried write leaves the same note
            saved = await acts.call_mcp_tool(
                request("notes__write_note", {"name": "plan.txt", "text": "ship it"})
            )
            assert saved.content == "saved plan.txt (7 characters)"
        assert (
            await acts.call_mcp_tool(request("notes__read_note", {"name": "plan.txt"}))
        ).content == "ship it"
        assert (await acts.call_mcp_tool(request("notes__list_notes", {}))).content == "plan.txt\t7"
        escape = await acts.call_mcp_tool(request("notes__read_note", {"name": "../secrets"}))
        assert escape.is_error and "is not a note name" in escape.content
        assert (tmp_path / "notes" / "plan.txt").read_text() == "ship it"
    finally:
        await acts.aclose()


async def test_a_cancelled_call_ends_at_once_and_the_server_stays(both: McpActivities) -> None:
    pid = await server_pid(both, "local")
    env = ActivityEnvironment()
    call = asyncio.create_task(env.run(both.call_mcp_tool, request("local__slow", {"seconds": 60})))
    await asyncio.sleep(1.0)
    env.cancel()
    started = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert time.monotonic() - started < 1
    assert await server_pid(both, "local") == pid


async def test_listing_heartbeats_while_a_slow_server_starts(tmp_path: Path) -> None:
    slow_start = (
        "import sys, time, runpy; time.sleep(2.5); sys.argv = ['mcp_servers', '--stdio'];"
        " runpy.run_module('tests.support.mcp_servers', run_name='__main__')"
    )
    acts, _ = make(tmp_path, sleepy=McpServer(command=[sys.executable, "-c", slow_start], env=ENV))
    env = with_heartbeat_timeout(ActivityEnvironment())  # as `worker.py --heartbeat-timeout 3` runs it
    beats: list[tuple] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    try:
        specs = await env.run(acts.list_mcp_tools, ["sleepy"])
        assert "sleepy__greet" in {s.name for s in specs}
        assert len(beats) >= 2
    finally:
        await acts.aclose()
