"""`python mcp_server.py`: the agent sessions as an MCP server over stdio, for desktop
clients (Claude Desktop, Claude Code, IDEs) that start it themselves.

It acts as the command line does: it sees every session on the Temporal server, the
sessions it starts and the decisions it records are `mcp:<login name>`'s, and a start
without an agent (and no `default_agent`) has the worker's tools. Standard output
carries MCP only; messages go to standard error. Temporal is reached as by the client
(TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_TASK_QUEUE, ...). `api.py` serves the same
tools over HTTP at /mcp, behind its users and tokens.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def main() -> int:
    from infra.arguments import OneLineParser

    parser = OneLineParser(
        prog="python mcp_server.py",
        description=(__doc__ or "").partition("\n\n")[0].replace("\n", " "),
        epilog=(__doc__ or "").partition("\n\n")[2].replace("\n", " ").strip(),
    )
    parser.parse_args()
    # Everything else loads after the arguments (asyncio too): --help answers at once.
    import asyncio
    import logging

    from infra import extras
    from infra.errors import AgentError

    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        extras.check_settings()
        asyncio.run(serve())
    except AgentError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


async def serve() -> None:
    from infra.connection import connect
    from service import mcp_tools
    from service.auth import User
    from service.feeds import Feeds
    from service.ownership import Owners
    from service.steering import Sessions
    from sessions import control

    client = await connect()
    sessions = Sessions(client, Owners(client), Feeds(client), worker_tools=True)
    # Who decides from this terminal, as the command line's rule names it, for MCP.
    user = User(name="mcp:" + control.cli_user().removeprefix("cli:"), token_sha256=b"", operator=True)

    def caller(ctx: Any) -> User:
        return user

    server = mcp_tools.build(lambda: sessions, caller)
    try:
        await server.run_stdio_async()
    finally:
        sessions.feeds.close()


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # without the SDK's interpreter-exit shutdown, as client.py leaves
