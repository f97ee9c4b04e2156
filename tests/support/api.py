"""The agent service as tests use it: a real `python api.py` process on a free port, its
users file, an HTTP client per user, and a small Server-Sent Events reader.

The process is ended by its PID; nothing here looks a process up by name.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
import pytest_asyncio
from temporalio.client import Client

from devservers import processes, temporal_server
from devservers.fakemodel import FakeModelServer
from devservers.temporal_server import free_port

ROOT = Path(__file__).resolve().parents[2]
WORKER_AGENT = "worker"  # the tests' default agent (`worker_definitions`)
TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-0123456789", "olga": "olga-token-0123456789"}


def users_toml() -> str:
    """alice by token hash, bob by plain token (local use), olga an operator."""
    sha = hashlib.sha256(TOKENS["alice"].encode()).hexdigest()
    olga = hashlib.sha256(TOKENS["olga"].encode()).hexdigest()
    return (
        f'[users.alice]\ntoken_sha256 = "{sha}"\nroles = []\n\n'
        f'[users.bob]\ntoken = "{TOKENS["bob"]}"\n\n'
        f'[users.olga]\ntoken_sha256 = "{olga}"\nroles = ["operator"]\n'
    )


@dataclass
class ApiProcess:
    process: subprocess.Popen
    url: str
    log_file: Path
    env: dict[str, str]
    port: int
    args: tuple[str, ...] = ()

    def restart(self) -> ApiProcess:
        """Stop this process and start another on the same port (the page's cookie stays
        valid). This object then holds the new process, so whoever stops it ends that one."""
        self.stop()
        self.process = start_api(self.env, self.log_file, self.port, self.args).process
        return self

    def stop(self) -> None:
        processes.stop(self.process, grace=10)

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")[-4000:]

    def client(self, user: str | None, **kwargs: Any) -> httpx.AsyncClient:
        headers = {
            **({"Authorization": f"Bearer {TOKENS[user]}"} if user else {}),
            **kwargs.pop("headers", {}),
        }
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30, **kwargs)


def api_env(address: str, task_queue: str, data_dir: Path, users_file: Path | None) -> dict[str, str]:
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": address,
        "TEMPORAL_NAMESPACE": "default",
        "TEMPORAL_TASK_QUEUE": task_queue,
        "AGENT_DATA_DIR": str(data_dir),
        "TEMPORAL_UI_URL": "http://127.0.0.1:8233",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("AGENT_API_USERS", None)
    env.setdefault("AGENT_DEFINITIONS", str(worker_definitions(data_dir)))
    if users_file is not None:
        env["AGENT_API_USERS"] = str(users_file)
    return env


def start_api(
    env: dict[str, str], log_file: Path, port: int | None = None, args: tuple[str, ...] = ()
) -> ApiProcess:
    """Start `python api.py` (with `args` after its port) and wait until /healthz answers."""
    port = port or free_port()
    with open(log_file, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "api.py", "--port", str(port), *args], cwd=ROOT, env=env,
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    server = ApiProcess(process, f"http://127.0.0.1:{port}", log_file, env, port, args)
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            raise AssertionError(f"api.py exited with {process.returncode}:\n{server.log()}")
        try:
            if httpx.get(f"{server.url}/healthz", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise AssertionError(f"api.py did not answer within 30 s:\n{server.log()}")
        time.sleep(0.1)


@dataclass
class Sse:
    id: int | None
    event: str
    data: Any


async def read_sse(response: httpx.Response) -> AsyncIterator[Sse | str]:
    """Events, and the comment lines (keep-alives) as strings, from a streaming response."""
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line.startswith(":"):
            yield line
        elif line == "":
            if "data" in fields:
                yield Sse(int(fields["id"]) if "id" in fields else None, fields.get("event", "message"),
                          json.loads(fields["data"]))  # fmt: skip
            fields = {}
        else:
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value


async def collect_events(
    http: httpx.AsyncClient,
    session_id: str,
    *,
    after: int | None = None,
    limit: int | None = None,
    headers: dict[str, str] | None = None,
) -> list[Sse]:
    """Read the session's events until its `end` (or `limit` of them), then cut the connection."""
    found: list[Sse] = []
    params = {"after": after} if after is not None else None
    async with http.stream(
        "GET", f"/v1/sessions/{session_id}/events", params=params, headers=headers
    ) as response:
        assert response.status_code == 200, await response.aread()
        async for item in read_sse(response):
            if isinstance(item, Sse):
                found.append(item)
                if item.event == "end" or (limit is not None and len(found) >= limit):
                    break
    return found


def worker_definitions(folder: Path) -> Path:
    """The shipped definitions, with a `default_agent` that has every tool of the test
    worker: a start at the service's doors without an agent runs it (without a default
    agent such a start has no tools)."""
    path = folder / "agents-worker.toml"
    shipped = (ROOT / "agents.toml").read_text()
    text = (
        f'default_agent = "{WORKER_AGENT}"\n{shipped}\n'
        f'[agents.{WORKER_AGENT}]\ndescription = "Every tool the test worker has"\n'
    )
    if not path.exists() or path.read_text() != text:  # whole, for a server reading it now
        part = path.with_suffix(f".{uuid.uuid4().hex[:8]}")
        part.write_text(text)
        part.replace(path)
    return path


@asynccontextmanager
async def serve_api(
    client: Client, address: str, fake_model: Any, data_dir: Path, folder: Path,
    args: tuple[str, ...] = (), env: dict[str, str] | None = None, interceptors: tuple[Any, ...] = (),
    users_text: str | None = None,
) -> AsyncIterator[ApiProcess]:  # fmt: skip
    """A worker (with these `interceptors`) on a fresh task queue and `python api.py` (with
    `args` and the variables in `env`) starting sessions on it, for alice, bob and olga
    (operator), or the users of `users_text` (a users file)."""
    from tests.conftest import model_activities
    from tests.support.tools import TOOLS
    from worker import build_worker

    users = folder / "users.toml"
    users.write_text(users_text or users_toml())
    queue = f"api-{uuid.uuid4().hex[:8]}"
    worker = build_worker(
        client,
        TOOLS,
        queue=queue,
        model=model_activities(fake_model, data_dir),
        interceptors=list(interceptors),
    )
    async with worker:
        server = start_api(
            {**api_env(address, queue, data_dir, users), **(env or {})}, folder / "api.log", args=args
        )
        try:
            yield server
        finally:
            server.stop()


async def wait_for(check, timeout: float = 30, what: str = "a condition", interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(interval)


def module_api(name: str) -> Any:
    """A module's `api` fixture: one `python api.py` (and its worker) for the module's tests,
    which share it in one xdist process (`pytest.mark.xdist_group`)."""

    @pytest_asyncio.fixture(scope="module")
    async def api(
        client: Client, dev_server: temporal_server.DevServer, fake_model: FakeModelServer, data_dir: Path,
        tmp_path_factory: pytest.TempPathFactory,
    ) -> AsyncIterator[ApiProcess]:  # fmt: skip
        async with serve_api(
            client, dev_server.address, fake_model, data_dir, tmp_path_factory.mktemp(name)
        ) as server:
            yield server

    return api
