"""One live MCP client per server per worker process, started on first use and replaced
when it is lost.

A client's transport (a stdio server process, or an HTTP client with its task group)
is entered and left by one task of its own: anyio scopes must be left by the task that
entered them, and a transport that fails (a server killed mid-call) then ends that task
instead of cancelling the activity that happened to be calling. Activities share the
client; a lock per server makes sure only one of them starts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Self, TypeVar

from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError

from activities.mcp import _errors
from infra.definitions import McpServer

logger = logging.getLogger(__name__)
T = TypeVar("T")

# A stdio server gets this long to exit after its stdin closes (then SIGTERM, SIGKILL:
# the SDK bounds each step); shutdown never waits longer for one server.
CLOSE_TIMEOUT_S = 10.0


class _WatchedStream:
    """A transport's read stream that records when the server has gone (end of stream).

    A stdio server that dies between calls leaves its client open but dead; noticing it
    here lets the next call start a new process instead of sending into the dead one and
    reporting a call whose outcome is unknown.
    """

    def __init__(self, inner: Any, on_end: Callable[[], None]):
        self._inner = inner
        self._on_end = on_end

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except BaseException:
            self._on_end()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._inner.__anext__()
        except BaseException:
            self._on_end()
            raise

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> bool | None:
        return await self._inner.__aexit__(*exc)

    def __getattr__(self, name: str) -> Any:
        # `last_context` and anything else the dispatcher looks for on the stream.
        return getattr(self._inner, name)


# What every stdio server gets of the worker's environment besides what its definition
# names (the MCP SDK adds LOGNAME, SHELL, TERM and USER of its own accord).
BASE_ENVIRONMENT = ("PATH", "HOME", "LANG", "LANGUAGE")


def server_environment(config: McpServer, worker: Mapping[str, str] | None = None) -> dict[str, str]:
    """A stdio server's environment: the base (PATH, HOME, the locale), the worker's
    variables its definition passes through, and its own `env`. The worker's keys (model
    API keys, AGENT_WEBHOOK_SECRET, AGENT_PAYLOAD_KEYS, TEMPORAL_API_KEY, AWS_*) reach it
    only if its definition names them."""
    worker = os.environ if worker is None else worker
    base = {k: v for k, v in worker.items() if k in BASE_ENVIRONMENT or k.startswith("LC_")}
    passed = {k: worker[k] for k in config.env_passthrough if k in worker}
    return {**base, **passed, **config.env}


def _transport(config: McpServer) -> AbstractAsyncContextManager[Any]:
    if config.url is not None:
        return streamable_http_client(config.url)
    assert config.command is not None
    params = StdioServerParameters(
        # "python" is the worker's own interpreter (its virtual environment), not the PATH's.
        command=sys.executable if config.command[0] == "python" else config.command[0],
        args=config.command[1:],
        env=server_environment(config),
        encoding_error_handler="replace",
    )
    return stdio_client(params)


@contextlib.asynccontextmanager
async def _watched(config: McpServer, on_end: Callable[[], None]) -> AsyncGenerator[Any, None]:
    async with _transport(config) as (read_stream, write_stream):
        yield _WatchedStream(read_stream, on_end), write_stream


class Connection:
    """One MCP client and the task that owns its transport."""

    def __init__(self, name: str, config: McpServer):
        self.name = name
        self._config = config
        self._lost = asyncio.Event()
        self._stop = asyncio.Event()
        self._ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._owner = asyncio.create_task(self._own(), name=f"mcp-server-{name}")

    async def _own(self) -> None:
        try:
            # cache=None: every list is the server's own answer, not a copy from earlier.
            client = Client(_watched(self._config, self._lost.set), cache=None)
            async with client:
                self._ready.set_result(client)
                await self._stop.wait()
        except BaseException as err:  # the transport failed; the next call starts another
            if not self._ready.done():
                self._ready.set_exception(err)
            else:
                logger.info("MCP server %s: connection lost: %s", self.name, err)
        finally:
            self._lost.set()

    async def client(self) -> Client:
        """The connected client; raises what connecting raised."""
        return await asyncio.shield(self._ready)

    @property
    def usable(self) -> bool:
        return not self._lost.is_set()

    def mark_lost(self) -> None:
        """A call found the connection broken: the next call starts another."""
        self._lost.set()

    async def close(self) -> None:
        self._lost.set()
        self._stop.set()
        if not self._ready.done():
            self._owner.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(self._owner), CLOSE_TIMEOUT_S)
        except TimeoutError:
            logger.warning("MCP server %s did not shut down within %s s", self.name, CLOSE_TIMEOUT_S)
        except asyncio.CancelledError:
            if not self._owner.cancelled():  # the caller's own cancellation
                raise


class Connections:
    """The worker's connections, one per configured server, made on first use."""

    def __init__(self, servers: dict[str, McpServer]):
        self._servers = servers
        self._live: dict[str, Connection] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def request(self, name: str, what: str, op: Callable[[Client], Awaitable[T]]) -> T:
        """Run `op` on the server's client within its timeout; failures as `ApplicationError`."""
        seconds = self._servers[name].timeout_seconds
        conn = await self._connect(name, seconds)
        try:
            async with asyncio.timeout(seconds):
                return await op(await conn.client())
        except MCPError as err:
            if err.code == _errors.CONNECTION_CLOSED:
                conn.mark_lost()
            raise _errors.classify(name, what, seconds, err, err.code) from err
        except TimeoutError:
            raise _errors.timed_out(name, what, seconds) from None
        except ApplicationError:
            raise
        except ValidationError as err:
            raise _errors.invalid_answer(name, what, err) from err
        except Exception as err:  # a transport failure: the next call starts a new connection
            conn.mark_lost()
            raise _errors.lost(name, what, err) from err

    async def _connect(self, name: str, seconds: float) -> Connection:
        try:
            return await self._get(name, seconds)
        except TimeoutError:
            raise _errors.unreachable(name, TimeoutError(f"no answer within {seconds:g} s")) from None
        except Exception as err:
            raise _errors.unreachable(name, err) from err

    async def _get(self, name: str, seconds: float) -> Connection:
        """A usable connection to `name`, connected within the server's timeout."""
        async with self._locks.setdefault(name, asyncio.Lock()):
            conn = self._live.get(name)
            if conn is None or not conn.usable:
                if conn is not None:
                    await conn.close()
                conn = self._live[name] = Connection(name, self._servers[name])
            try:
                await asyncio.wait_for(conn.client(), seconds)
            except BaseException:
                self._live.pop(name, None)
                await conn.close()
                raise
            return conn

    async def aclose(self) -> None:
        """End every connection: stdio servers exit, HTTP clients close."""
        live, self._live = list(self._live.values()), {}
        await asyncio.gather(*(conn.close() for conn in live))
