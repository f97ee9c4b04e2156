"""The agent service's application: the routes, the error answers, the Host and Origin
check, the body limit, and the Temporal client with the session feeds, made when the server starts. The same sessions are
an MCP server at `/mcp` (`service.mcp_tools`) and an A2A agent at `/a2a`, with its card at
`/.well-known/agent-card.json` (`service.a2a`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from temporalio.client import Client

from infra.connection import connect
from infra.definitions import Definitions, load_definitions
from service import a2a, http_errors, mcp_tools, memory_routes, origins, pages, routes, sse
from service.auth import Cookies, Users, current_user
from service.feeds import Feeds
from service.origins import Access
from service.ownership import Owners
from service.quotas import StartRate
from service.steering import Sessions
from sessions import start_input

DESCRIPTION = """Start, follow and steer agent sessions (each one a Temporal workflow).

Send `Authorization: Bearer TOKEN`; in a browser, open `/?token=TOKEN` once. Errors are
`{"error": {"type", "message"}}`."""


def create_app(
    users: Users,
    client: Client | None = None,
    access: Access | None = None,
    cookies: Cookies | None = None,
    definitions: Definitions | None = None,
) -> FastAPI:
    """The app; it connects to Temporal at startup unless given a client. `access` names the
    hosts and origins it answers (`service.origins`); by default loopback on port 8080. It
    signs the page's cookies with `cookies` (default: `AGENT_COOKIE_SECRET` or the data
    directory's key) and makes the A2A card from `definitions` (default: read now)."""
    access = access or Access.build(8080)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.client = client or await connect()
        app.state.owners = Owners(app.state.client)
        app.state.feeds = Feeds(app.state.client)
        try:
            async with mcp.session_manager.run():
                yield
        finally:
            app.state.feeds.close()

    def sessions() -> Sessions:
        return Sessions(app.state.client, app.state.owners, app.state.feeds, app.state.rate)

    app = FastAPI(
        title="Agent sessions", description=DESCRIPTION, version="1",
        lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None,
    )  # fmt: skip
    app.state.users = users
    app.state.rate = StartRate()
    app.state.sessions = sessions
    app.state.access = access
    app.state.cookies = cookies or Cookies.from_env()
    http_errors.install(app)
    app.add_middleware(http_errors.BodyLimit)
    # Outermost: a request for another name or from another page goes no further.
    app.add_middleware(origins.Guard, access=access)
    for module in (pages, routes, sse, memory_routes):
        app.include_router(module.router)
    mcp = mcp_tools.build(sessions, mcp_tools.http_caller)
    app.router.routes.append(mcp_tools.http_route(mcp, users))
    agents = start_input.describe(definitions if definitions is not None else load_definitions())
    a2a.install(app, users, sessions, agents)
    _docs(app)
    return app


def _docs(app: FastAPI) -> None:
    """The schema and the interactive docs, behind the same authentication as the rest."""

    @app.get("/openapi.json", include_in_schema=False, dependencies=[Depends(current_user)])
    async def openapi() -> dict[str, Any]:
        return app.openapi()

    @app.get("/docs", include_in_schema=False, dependencies=[Depends(current_user)])
    async def docs(request: Request) -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title="Agent sessions: API")
