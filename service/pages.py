"""The page and its files, the token-for-cookie exchange, and the health check.

`/?token=TOKEN` is opened once: the answer sets an HttpOnly, SameSite=Strict cookie
(service/auth.py `Cookies`) and redirects to `/`, so the token leaves the address bar and
the browser history; api.py's access log never shows it (service/access_log.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, RedirectResponse, Response

from service import quotas, schemas
from service.auth import COOKIE, Cookies, Unauthorized, User, bearer, current_user
from sessions import start_input

STATIC = Path(__file__).parent / "static"
router = APIRouter()


@router.get("/healthz", tags=["service"])
async def healthz() -> dict[str, str]:
    """Unauthenticated: the server is up."""
    return {"status": "ok"}


@router.get("/", include_in_schema=False)
async def index(request: Request, token: str | None = None) -> Response:
    if token is not None:
        user = request.app.state.users.by_token(token)
        if user is None:
            raise Unauthorized("wrong token")
        cookies: Cookies = request.app.state.cookies
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(
            COOKIE, cookies.mint(user), max_age=cookies.max_age,
            httponly=True, samesite="strict", secure=request.url.scheme == "https", path="/",
        )  # fmt: skip
        return response
    await current_user(request, await bearer(request), request.cookies.get(COOKIE))
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})


@router.get("/static/{name}", include_in_schema=False)
async def static(name: str, user: User = Depends(current_user)) -> Response:
    path = (STATIC / name).resolve()
    if path.parent != STATIC.resolve() or not path.is_file():
        return Response(status_code=404)
    return FileResponse(path, headers={"Cache-Control": "no-cache"})


@router.get("/v1/me", tags=["service"])
async def me(request: Request, user: User = Depends(current_user)) -> schemas.Me:
    """Who the caller is, and where the Temporal UI shows their sessions."""
    return schemas.Me(
        user=user.name, operator=user.operator, namespace=request.app.state.client.namespace,
        temporal_ui_url=os.environ.get("TEMPORAL_UI_URL", "http://localhost:8233").rstrip("/"),
    )  # fmt: skip


@router.get("/v1/agents", tags=["service"])
async def agents(user: User = Depends(current_user)) -> schemas.AgentChoices:
    """The agents the caller may start (the users file's `agents`, else every agent of the
    definitions), read from the definitions now: what the page offers."""
    found = quotas.startable(user, start_input.describe(start_input.read_definitions()))
    return schemas.AgentChoices(
        agents=[
            schemas.AgentChoice(name=a["name"], description=a["description"], default=a["default"])
            for a in found
        ]
    )
