"""`python api.py`: the agent service, an HTTP API and a page to start, follow and steer
sessions.

Users, their tokens and quotas come from the TOML file named by `AGENT_API_USERS`. Without
it the server listens on 127.0.0.1 only, with one local user whose random token is in the
URL it prints. Temporal is reached as by the client (`TEMPORAL_ADDRESS`, `TEMPORAL_TASK_QUEUE`...).
It answers only requests sent to its own names (loopback on its port, the address it
listens on, the public URL) and from its own pages, against DNS rebinding: --allow-host and
--allow-origin (`AGENT_ALLOWED_HOSTS`, `AGENT_ALLOWED_ORIGINS`) add more.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from infra import extras
from infra.arguments import OneLineParser, port_number, positive_float
from infra.errors import AgentError

if TYPE_CHECKING:
    from infra.definitions import Definitions
    from service.auth import Cookies, Users
    from service.origins import Access

LOCAL = "127.0.0.1"


def main() -> int:
    parser = OneLineParser(
        prog="python api.py",
        description=(__doc__ or "").partition("\n\n")[0].replace("\n", " "),
        epilog=(__doc__ or "").partition("\n\n")[2].replace("\n", " ").strip(),
    )
    parser.add_argument(
        "--host",
        default=LOCAL,
        help="address to listen on (default: %(default)s; without AGENT_API_USERS always 127.0.0.1)",
    )
    parser.add_argument("--port", type=port_number, default=8080, help="port (default: %(default)s)")
    parser.add_argument(
        "--cookie-hours", type=positive_float, default=12.0,
        help="how long the page's sign-in lasts, in hours (default: %(default)g)",
    )  # fmt: skip
    parser.add_argument(
        "--public-url",
        metavar="URL",
        help="the address clients reach the service at, e.g. behind a proxy (https://agents.example.com): "
        "its host and origin are allowed, and the A2A card names it (default: $AGENT_PUBLIC_URL)",
    )
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME[:PORT]",
        help="answer requests sent to this host name too (without a port: on any port); repeatable, "
        "added to $AGENT_ALLOWED_HOSTS. Others get 421",
    )
    parser.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="SCHEME://HOST[:PORT]",
        help="answer browser requests from pages of this origin too; repeatable, added to "
        "$AGENT_ALLOWED_ORIGINS. Other pages get 403",
    )
    args = parser.parse_args()
    # The web framework and Temporal's SDK load after the arguments: --help answers at once.
    from infra.definitions import load_definitions
    from infra.live_auth import follower_key
    from infra.notify import allowed_prefixes
    from service import origins
    from service.auth import Cookies, load_users, local_user

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    users_file = os.environ.get("AGENT_API_USERS")
    host = args.host
    try:
        extras.check_settings()
        allowed_prefixes()  # a malformed AGENT_NOTIFY_ALLOW stops the service here, not a start later
        users = load_users(Path(users_file)) if users_file else None
        cookies = Cookies.from_env(args.cookie_hours)
        definitions = load_definitions()  # the A2A card is made from them, once
        follower_key()  # the live text's key: the service follows sessions' streamed text
        if users is None:
            host = LOCAL
        access = origins.from_settings(args.port, host, args.public_url, args.allow_host, args.allow_origin)
    except AgentError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if users is None:
        users, token = local_user()
        if args.host != LOCAL:
            print(f"no AGENT_API_USERS file: listening on {LOCAL} only, not {args.host}", file=sys.stderr)
        print(f"open http://{LOCAL}:{args.port}/?token={token}", flush=True)
    try:
        asyncio.run(serve(users, cookies, definitions, host, args.port, access))
    except AgentError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


async def serve(
    users: Users, cookies: Cookies, definitions: Definitions, host: str, port: int, access: Access
) -> None:
    import uvicorn

    from infra.connection import connect
    from service import access_log
    from service.app import create_app

    # Connect first, so an unreachable Temporal (or a setting whose extra is missing) is
    # one line and exit code 1.
    client = await connect()
    app = create_app(users, client, access, cookies, definitions)
    config = uvicorn.Config(app, host=host, port=port, log_level="info")
    access_log.install()  # uvicorn has set up its loggers: no token reaches them
    await uvicorn.Server(config).serve()


if __name__ == "__main__":
    sys.exit(main())
