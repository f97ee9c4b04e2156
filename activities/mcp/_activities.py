"""The MCP activities: list a session's MCP tools, check an input, call a tool."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.attempt_telemetry import tool_call_telemetry
from activities.heartbeat import Heartbeats
from activities.mcp import _errors
from activities.mcp._convert import USABLE_NAME, full_name, input_error, result_text, split_name, to_spec
from activities.stopping import stoppable
from activities.tools import finish_outcome
from activities.transcript import TranscriptStore, open_store
from activities.wire import ToolOutcome, ToolRequest, ToolSpec
from infra.definitions import McpServer

if TYPE_CHECKING:
    from mcp import Client
    from mcp.types import RequestParamsMeta, Tool

# A server whose listing never ends must not hold the activity until its timeout.
MAX_LIST_PAGES = 100


class McpActivities:
    """The activities that list and call the tools of the worker's MCP servers."""

    def __init__(self, servers: dict[str, McpServer], store: TranscriptStore | None = None):
        self._servers = dict(servers)
        self._store = store or open_store()
        # Imported here: the MCP SDK takes over a second to import, and the workflow
        # (so the command line too) imports this module for the activity references.
        from activities.mcp._connections import Connections

        self._connections = Connections(self._servers)
        # Per server, its tools as last listed by this worker: the schema a check needs.
        self._specs: dict[str, dict[str, ToolSpec]] = {}

    def activities(self) -> list[Callable[..., Any]]:
        return [self.list_mcp_tools, self.check_mcp_input, self.call_mcp_tool]

    async def aclose(self) -> None:
        """End the stdio servers this worker started and close the HTTP clients."""
        await self._connections.aclose()

    @activity.defn(name="list_mcp_tools")
    async def list_mcp_tools(self, servers: list[str]) -> list[ToolSpec]:
        """The tools of the named servers, as `SERVER__TOOL` specs, in the order given."""
        # Side by side: the listing takes as long as the slowest server, not their sum.
        # Its heartbeats (with a heartbeat timeout) go uncounted: the result is the list.
        async with Heartbeats():
            listed = await asyncio.gather(*(self._list(s) for s in servers), return_exceptions=True)
        for result in listed:
            if isinstance(result, BaseException):
                raise result
        return [spec for specs in listed for spec in specs.values()]  # type: ignore[union-attr]

    @activity.defn(name="check_mcp_input")
    async def check_mcp_input(self, request: ToolRequest) -> str | None:
        """Validate a call's input against the tool's schema without calling it; the error, or None."""
        async with Heartbeats():
            found = await self._spec(request.name)
        if isinstance(found, str):
            return found
        return input_error(found, request.input)

    @activity.defn(name="call_mcp_tool")
    @tool_call_telemetry
    async def call_mcp_tool(self, request: ToolRequest) -> ToolOutcome:
        """Call one MCP tool; its errors become an is_error outcome, a failed server raises."""
        started = time.monotonic()
        # From the start: starting a stdio server and listing its tools may come first.
        async with Heartbeats() as beats:
            content, is_error = await self._checked_call(request)
        return await finish_outcome(
            self._store, content, is_error=is_error, max_output=request.max_output, started=started,
            heartbeats=beats.sent,
        )  # fmt: skip

    async def _checked_call(self, request: ToolRequest) -> tuple[str, bool]:
        found = await self._spec(request.name)
        problem = found if isinstance(found, str) else input_error(found, request.input)
        if problem is not None:
            return problem, True
        assert isinstance(found, ToolSpec)
        # A session that stops cancels a retry-safe call here (activities/stopping.py).
        async with stoppable(found.policy != "at_most_once"):
            return await self._call(found, request)

    async def _call(self, spec: ToolSpec, request: ToolRequest) -> tuple[str, bool]:
        server, tool = split_name(spec.name)
        # The key is stable across retries and worker crashes: a server can dedupe by it.
        meta: RequestParamsMeta = {
            "idempotency_key": f"{request.session_id}:{request.tool_use_id}",
            "session_id": request.session_id,
            "user_id": request.user_id,
        }
        try:
            result = await self._request(
                server, f"the call to {tool}", lambda c: c.call_tool(tool, request.input, meta=meta)
            )
        except ApplicationError as err:
            if err.type == _errors.ERROR_ANSWER and err.details and err.details[0] in _errors.REQUEST_ERRORS:
                return err.message, True
            raise
        return result_text(result), result.is_error

    async def _list(self, server: str) -> dict[str, ToolSpec]:
        config = self._config(server)
        tools = await self._request(server, "the tool listing", _list_all)
        specs: dict[str, ToolSpec] = {}
        for tool in tools:
            if not USABLE_NAME.match(full_name(server, tool.name)):
                activity.logger.warning(
                    "MCP server %s: tool %r has no name a model accepts; left out", server, tool.name
                )
                continue
            spec = to_spec(server, tool, config)
            specs[spec.name] = spec
        self._specs[server] = specs
        return specs

    async def _spec(self, name: str) -> ToolSpec | str:
        """The spec of `name`, listing its server again when this worker has not seen it."""
        try:
            server, _ = split_name(name)
        except ValueError as err:
            return str(err)
        known = self._specs.get(server)
        if known is None or name not in known:
            known = await self._list(server)
        if name not in known:
            return f"unknown tool {name!r}; MCP server {server} has: {', '.join(sorted(known)) or 'no tools'}"
        return known[name]

    def _config(self, server: str) -> McpServer:
        try:
            return self._servers[server]
        except KeyError:
            known = ", ".join(sorted(self._servers)) or "none"
            raise ApplicationError(
                f"no MCP server {server!r} in this worker's definitions; it has: {known}",
                type=_errors.UNAVAILABLE,
            ) from None

    async def _request(self, server: str, what: str, op: Callable[[Client], Any]) -> Any:
        self._config(server)
        return await self._connections.request(server, what, op)


async def _list_all(client: Client) -> list[Tool]:
    tools: list[Tool] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools
    raise ApplicationError(
        f"the tool listing went on for more than {MAX_LIST_PAGES} pages", non_retryable=True
    )
