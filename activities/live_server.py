"""The worker's live text server: the model's text, while it writes it, outside Temporal.

Each worker process serves the text of its model calls in progress (activities/deltas.py)
over HTTP, on `--live-host`/`--live-port` (127.0.0.1 and any free port by default), and
puts the server's URL in its worker identity (`PID@HOST live=http://127.0.0.1:PORT`). A
follower (sessions/live_text.py) finds the worker running a session's model call in the
session's description, which lists the pending `call_model` activity with its attempt and
`last_worker_identity` (DescribeWorkflowExecution is not a billable action), and reads:

    GET /live/{session_id}[?attempt=N][&thinking=1]
    Authorization: Bearer CREDENTIAL

an `application/x-ndjson` stream of the session's latest call on this worker (waiting a
few seconds for it to begin): first one line with the text so far, then one per chunk as
it comes, then `{"end": "done"}` or `{"end": "failed"}` when the call ends. 404 when no
call of that session runs here. Each text line is `{"payload": ...}`: a `TextDelta` (step,
attempt, text), or with `thinking=1` also a `ThinkingDelta` (the model's thinking, the
same fields), as a Temporal payload encoded by the worker's data converter, base64, so
the live text is encrypted as the session's history is when payload keys are set
(infra/codec.py), and a follower decodes it with its own client's converter.

Every request is checked first (`refusal`): a Host header that is not one this server is
reached at is 421 (a page of another site that rebinds its name to this address reads
nothing), and a request without a valid credential for the session in its path is 401
with no text. The credential (infra/live_auth.py) is an HMAC of `session|expiry` keyed
with the deployment's live key, which followers hold and mint from; it is never logged
(this server keeps no access log) and never part of the identity. A route added to this
server calls `refusal` with its session before doing anything else.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import socket
from collections.abc import AsyncIterator, Generator
from typing import Any

from pydantic import TypeAdapter
from temporalio.api.common.v1 import Payload
from temporalio.converter import DataConverter

from activities.deltas import LIVE, LiveCalls
from activities.model_queue import ModelQueueWorker
from activities.wire import LiveDelta, TextDelta, ThinkingDelta
from infra.errors import ConfigError
from infra.live_auth import LiveKey, presented

LIVE_DELTAS: TypeAdapter[TextDelta | ThinkingDelta] = TypeAdapter(LiveDelta)

log = logging.getLogger("activities.live_server")
KEY = "live"  # the identity's token: live=URL
WAIT_FOR_CALL_S = 3.0  # a follower may ask as soon as the attempt started, before its text opened
SHUTDOWN_GRACE_S = 1


def with_live(identity: str, url: str) -> str:
    """A worker identity (`PID@HOST` by default) that names the live server's URL too."""
    return f"{identity} {KEY}={url}"


def live_url(identity: str | None) -> str | None:
    """The live server's URL a worker identity names, if it names one."""
    for token in (identity or "").split():
        key, _, value = token.partition("=")
        if key == KEY and value.startswith(("http://", "https://")):
            return value.rstrip("/")
    return None


async def encode_delta(converter: DataConverter, delta: TextDelta | ThinkingDelta) -> bytes:
    payloads = converter.payload_converter.to_payloads([delta])
    if converter.payload_codec is not None:
        payloads = await converter.payload_codec.encode(payloads)
    data = base64.b64encode(payloads[0].SerializeToString()).decode()
    return json.dumps({"payload": data}).encode() + b"\n"


async def decode_line(converter: DataConverter, line: bytes | str) -> TextDelta | ThinkingDelta | str:
    """One line of the stream: a delta (of text or thinking), or how the call ended ("done", "failed")."""
    body = json.loads(line)
    if "end" in body:
        return str(body["end"])
    payloads = [Payload.FromString(base64.b64decode(body["payload"]))]
    if converter.payload_codec is not None:
        payloads = await converter.payload_codec.decode(payloads)
    return LIVE_DELTAS.validate_python(converter.payload_converter.from_payloads(payloads, [dict])[0])


def refusal(request: Any, session_id: str, key: LiveKey, hosts: frozenset[str]) -> Any:
    """The answer to a request this server must not serve, or None when it may go on: 421
    for a Host it is not reached at, 401 without a valid credential for `session_id`."""
    from starlette.responses import JSONResponse

    if request.headers.get("host", "").lower() not in hosts:
        return JSONResponse({"error": "this server is not reached at that host"}, status_code=421)
    if not key.check(session_id, presented(request.headers.get("authorization"))):
        return JSONResponse(
            {"error": "a live credential for this session is needed (Authorization: Bearer)"},
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )
    return None


def reached_at(url: str, bound: str) -> frozenset[str]:
    """The Host headers a request to this server may carry: the advertised URL's, the bound
    address's, and on a loopback address its other loopback names."""
    netloc = url.split("://", 1)[1]
    port = netloc.rsplit(":", 1)[1]
    names = {netloc.rsplit(":", 1)[0], bound if ":" not in bound else f"[{bound}]"}
    if names & {"127.0.0.1", "localhost", "[::1]"}:
        names |= {"127.0.0.1", "localhost", "[::1]"}
    return frozenset(f"{name.lower()}:{port}" for name in names if name)


def build_app(
    converter: DataConverter, calls: LiveCalls = LIVE, *, key: LiveKey, hosts: frozenset[str]
) -> Any:
    """The Starlette app with the one route; every request checked by `refusal`."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    async def live(request: Request) -> Response:
        session_id = request.path_params["session_id"]
        if (refused := refusal(request, session_id, key, hosts)) is not None:
            return refused
        try:
            attempt = int(request.query_params.get("attempt", "0"))
        except ValueError:
            return JSONResponse({"error": "attempt must be a whole number"}, status_code=400)
        thinking = request.query_params.get("thinking") == "1"
        call = await calls.wait_for(session_id, attempt, WAIT_FOR_CALL_S)
        if call is None:
            return JSONResponse(
                {"error": f"no model call of session {session_id} runs here"}, status_code=404
            )

        async def lines() -> AsyncIterator[bytes]:
            async for delta in call.follow(thinking=thinking):
                yield await encode_delta(converter, delta)
            yield json.dumps({"end": call.ended}).encode() + b"\n"

        return StreamingResponse(
            lines(), media_type="application/x-ndjson", headers={"Cache-Control": "no-store"}
        )

    return Starlette(routes=[Route("/live/{session_id:path}", live)])


class LiveServer:
    """The live text server of this process, on uvicorn in the worker's own event loop.

    `bind` takes the port (then `url` is known, for the worker's identity); `serve` starts
    answering on it, `stop` ends it and the streams still open. As an async context it
    does all three."""

    def __init__(
        self,
        converter: DataConverter,
        host: str = "127.0.0.1",
        port: int = 0,
        calls: LiveCalls = LIVE,
        key: LiveKey | None = None,
    ):
        """`key`: the live key (default: `AGENT_LIVE_SECRET` or the data directory's, a
        `ConfigError` when unusable)."""
        self.converter, self.host, self.port, self.calls = converter, host, port, calls
        self.key = key or LiveKey.from_env()
        self.url: str | None = None
        self._socket: socket.socket | None = None
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LiveServer:
        self.bind()
        await self.serve()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def bind(self) -> str:
        """Take the port; the URL followers reach it at. One that cannot be bound is a ConfigError."""
        if self.url is not None:
            return self.url
        sock: socket.socket | None = None
        try:
            family, kind, proto, _, address = socket.getaddrinfo(
                self.host, self.port, type=socket.SOCK_STREAM
            )[0]
            sock = socket.socket(family, kind, proto)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(128)
        except OSError as err:
            if sock is not None:
                sock.close()
            raise ConfigError(
                f"the live text server cannot listen on {self.host}:{self.port}: {err.strerror or err} "
                "(--live-host, --live-port, or --no-live)"
            ) from None
        self._socket = sock
        self.url = f"http://{_advertised(self.host)}:{sock.getsockname()[1]}"
        return self.url

    async def serve(self) -> None:
        """Answer on the bound port, from a task of this event loop."""
        import uvicorn

        class _Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Generator[None]:
                yield  # the worker handles SIGTERM and SIGINT itself (drain)

        self.bind()
        if self._task is not None:
            return
        assert self.url is not None  # bound
        app = build_app(self.converter, self.calls, key=self.key, hosts=reached_at(self.url, self.host))
        config = uvicorn.Config(
            app, log_config=None, log_level="warning", access_log=False,
            lifespan="off", timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        )  # fmt: skip
        self._server = _Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[self._socket]), name="live text server")

    async def stop(self) -> None:
        """Stop serving and release the port; the streams still open end."""
        task, self._task = self._task, None
        if self._server is not None and task is not None:
            self._server.should_exit = True
            try:
                await asyncio.wait_for(task, SHUTDOWN_GRACE_S + 5)
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()
            except Exception:
                log.exception("the live text server failed")
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        self.url = None


class LiveWorker(ModelQueueWorker):
    """A Worker that serves its live text while it and its model call worker run
    (`build_worker` makes one)."""

    def __init__(self, *args: Any, live: LiveServer, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.live = live

    async def run(self) -> None:
        await self.live.serve()
        try:
            await super().run()
        finally:
            await self.live.stop()  # after the drain: the calls that finished in it were served


def _advertised(host: str) -> str:
    """The host followers reach this server at: the machine's name for a wildcard address."""
    if host in ("", "0.0.0.0", "::"):
        host = socket.gethostname()
    return f"[{host}]" if ":" in host else host
