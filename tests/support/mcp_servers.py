"""A real MCP server for the MCP tests, written with the MCP SDK's server API.

`python -m tests.support.mcp_servers --stdio` serves it over stdin/stdout (the worker
starts it); `--http PORT` serves streamable HTTP at http://127.0.0.1:PORT/mcp. Its tools
cover what the tests need: plain text, an error result, a big output, a slow call, and
an echo of the request's `_meta` (where the idempotency key travels).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("test-tools", log_level="WARNING")
# A file `slow` writes when a call starts, for the tests that cut a call in flight.
SLOW_STARTED = "MCP_TEST_SLOW_STARTED"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def greet(name: str) -> str:
    """Say hello to someone."""
    return f"hello, {name}"


@server.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True))
def set_value(key: str, value: int) -> str:
    """Store a value under a key (the same call twice has no further effect)."""
    return f"{key}={value}"


@server.tool()
def fail(reason: str) -> str:
    """Always fails with the reason given."""
    raise ToolError(reason)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def big(size: int) -> str:
    """Return `size` characters."""
    return "x" * size


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    if started := os.environ.get(SLOW_STARTED):
        Path(started).write_text(str(os.getpid()))  # the call is in this server now
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def echo_meta(ctx: Context) -> str:
    """Return the request's _meta and this server's process id as JSON."""
    meta = dict(ctx.request_context.meta or {})
    return json.dumps({"meta": meta, "pid": os.getpid()}, default=str)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def whoami() -> str:
    """This server's process id and the value of MCP_TEST_GREETING."""
    return json.dumps({"pid": os.getpid(), "greeting": os.environ.get("MCP_TEST_GREETING")})


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def environment() -> str:
    """This server's whole environment, as JSON."""
    return json.dumps(dict(os.environ))


def main() -> None:
    parser = argparse.ArgumentParser()
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--stdio", action="store_true")
    group.add_argument("--http", type=int, metavar="PORT")
    args = parser.parse_args()
    if args.stdio:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http)


if __name__ == "__main__":
    main()
