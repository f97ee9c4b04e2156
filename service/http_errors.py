"""Errors as the API answers them: `{"error": {"type", "message"}}` with one status code
per kind of failure, and the request-body limit.

The project's own errors (`infra.errors`) map to codes here, once: a conflict with the
session's state is 409, a body that parses but breaks the schema 422, malformed JSON 400.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from temporalio.service import RPCError

from infra.errors import (
    AgentError,
    BadRequest,
    Busy,
    ConfigError,
    InvalidInput,
    NotAllowed,
    NoWorker,
    OverQuota,
    Rejected,
    SessionEnded,
    SessionExists,
    SessionNotFound,
    Unreachable,
)
from service.auth import Forbidden, Unauthorized

MAX_BODY_BYTES = 1024 * 1024
# A start may carry attachments (a PDF of 24 MB is 32 MB as base64; infra/attachments.py).
START_BODY_BYTES = 48 * 1024 * 1024
START_PATH = "/v1/sessions"
log = logging.getLogger("service")
RETRY_AFTER = 2  # seconds, on a 503

# Order matters: a subclass before its base (InvalidInput is a Rejected).
STATUS_OF = [
    (Unauthorized, 401),
    (Forbidden, 403),
    (NotAllowed, 403),
    (OverQuota, 429),
    (SessionNotFound, 404),
    (InvalidInput, 422),
    (SessionExists, 409),
    (SessionEnded, 409),
    (Rejected, 409),
    (BadRequest, 400),
    (Busy, 503),
    (NoWorker, 503),
    (Unreachable, 503),
    (ConfigError, 500),
    (AgentError, 400),
]


def error_response(
    status: int, kind: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse({"error": {"type": kind, "message": message}}, status_code=status, headers=headers)


def error_detail(err: Exception | None) -> tuple[str, str]:
    """The error object's `type` and `message` for a failure, as the handlers below word it
    (a batch answers each id's failure in it)."""
    if isinstance(err, AgentError):
        return type(err).__name__, str(err)
    if isinstance(err, RPCError):
        return "TemporalError", f"Temporal answered: {err.message}"
    return "InternalError", f"{type(err).__name__}: {err}".splitlines()[0]


def install(app: FastAPI) -> None:
    """Answer every failure with the error object."""

    @app.exception_handler(AgentError)
    async def _agent_error(request: Request, err: AgentError) -> JSONResponse:
        status = next(code for kind, code in STATUS_OF if isinstance(err, kind))
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        if status in (503, 429):  # busy, unreachable or over a quota for now: worth asking again
            later = err.retry_after if isinstance(err, Busy | OverQuota) else RETRY_AFTER
            headers = {"Retry-After": str(later)}
        return error_response(status, type(err).__name__, str(err), headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        problems = err.errors()
        if any(p.get("type") == "json_invalid" for p in problems):
            return error_response(400, "MalformedJSON", "the body is not valid JSON")
        return error_response(422, "InvalidBody", "; ".join(_describe(p) for p in problems))

    @app.exception_handler(HTTPException)
    async def _http(request: Request, err: HTTPException) -> JSONResponse:
        kind = "BodyTooLarge" if isinstance(err, BodyTooLarge) else "HTTPError"
        return error_response(err.status_code, kind, str(err.detail), getattr(err, "headers", None))

    @app.exception_handler(RPCError)
    async def _temporal(request: Request, err: RPCError) -> JSONResponse:
        # What sessions.control does not turn into the project's errors: Temporal's own refusal.
        return error_response(
            503, "TemporalError", f"Temporal answered: {err.message}", {"Retry-After": str(RETRY_AFTER)}
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, err: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return error_response(500, "InternalError", f"{type(err).__name__}: {err}")


def _describe(problem: dict) -> str:
    where = ".".join(str(part) for part in problem.get("loc", ()) if part != "body")
    return f"{where or 'body'}: {problem.get('msg', 'invalid')}"


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int):
        super().__init__(413, f"the body is over {limit} bytes")


class BodyLimit:
    """413 for a body over `limit` bytes, by its Content-Length or by what actually arrives
    (a chunked body has no length to trust)."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES):
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.limit_for(scope)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            return await self._refuse(scope, receive, send, limit)
        seen = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyTooLarge:
            if started:
                raise
            await self._refuse(scope, receive, send, limit)

    def limit_for(self, scope: Scope) -> int:
        """A session's start may carry attachments; every other body is small."""
        starting = scope.get("method") == "POST" and scope.get("path", "").rstrip("/") == START_PATH
        return max(self.limit, START_BODY_BYTES) if starting else self.limit

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        response = error_response(413, "BodyTooLarge", f"the body is over {limit} bytes")
        await response(scope, receive, send)
