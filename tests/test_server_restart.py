"""Temporal server restarts: a dev server of the test's own, with its state in a SQLite file,
stopped in the middle of a session and started again on the same port with the same file.

The worker process and the test's client stay up across the restart and reconnect.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from devservers import temporal_server
from devservers.fakemodel import FakeModelServer
from infra.connection import connect
from tests.conftest import answer, tool_use
from tests.support.procs import (
    ProcessHarness,
    Workers,
    effects_of,
    result_of,
    wait_for_effects,
    wait_for_status,
    wait_until,
)
from tests.support.reliability import record
from workflows.contract import Decision, SessionStatus

pytestmark = pytest.mark.process

AREA = "Temporal server restarts"
DOWN_S = 3.0  # how long the server stays down


class OwnServer:
    """A dev server on a fixed port and database file, restartable; ended by its PID."""

    def __init__(self, db_file: Path, log_file: Path):
        self.db_file, self.log_file = db_file, log_file
        self.port = temporal_server.free_port()
        self.server: temporal_server.DevServer | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.server = temporal_server.start(port=self.port, db_file=self.db_file, log_file=self.log_file)

    def stop(self, *, kill: bool = False) -> float:
        """Stop the server by its PID; returns the wall-clock time it was gone."""
        assert self.server is not None
        self.server.stop(kill=kill)
        return time.time()

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()


@pytest.fixture
def own_server(tmp_path: Path):
    server = OwnServer(tmp_path / "temporal.db", tmp_path / "temporal.log")
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest_asyncio.fixture
async def procs(
    own_server: OwnServer, fake_model: FakeModelServer, data_dir: Path, tmp_path: Path
) -> AsyncIterator[ProcessHarness]:
    client = await connect(target_host=own_server.address)
    workers = Workers(
        address=own_server.address, model_url=fake_model.url, data_dir=data_dir, log_dir=tmp_path
    )
    harness = ProcessHarness(client, fake_model, workers)
    try:
        yield harness
    finally:
        workers.close()  # the sessions go with the server's database file
        print(workers.logs())  # shown by pytest when the test failed


async def _restart(own_server: OwnServer, *, kill: bool) -> tuple[float, float]:
    """Stop the server, keep it down DOWN_S seconds, start it again on the same port and file."""
    down_at = own_server.stop(kill=kill)
    assert not temporal_server.port_open("127.0.0.1", own_server.port)
    await asyncio.sleep(DOWN_S)
    own_server.start()
    return down_at, time.time()


async def test_server_killed_mid_run_and_started_again(procs: ProcessHarness, own_server: OwnServer):
    worker = await procs.worker()
    handle = await procs.start(
        [tool_use("slow_upsert", {"key": "s1", "seconds": 2}, id="u1"), answer("Saved.")]
    )
    await wait_for_effects(handle.id, "slow_upsert")
    # The tool finishes while the server is down: its result has nowhere to go until it is back.
    down_at, up_at = await _restart(own_server, kill=True)

    result = await result_of(handle, timeout=90)
    done_after = time.time() - up_at
    assert result.status == "completed" and result.answer == "Saved."
    assert result.steps == 2
    runs = effects_of(handle.id, "slow_upsert")
    assert 1 <= len(runs) <= 2, runs
    assert {r["idempotency_key"] for r in runs} == {f"{handle.id}:u1"}
    assert all(r["pid"] == worker.pid for r in runs)
    assert worker.alive(), "the worker did not survive the server restart"
    step2 = procs.requests(handle.id, step=2)
    assert len(step2) == 1
    tool_result = step2[0]["body"]["messages"][-1]["content"][0]
    assert not tool_result.get("is_error") and "upserted s1" in str(tool_result["content"])
    record(
        AREA,
        f"dev server killed (kill -9) during a tool call, down {DOWN_S:g} s, started again on its database file",
        "the same worker process reconnected; the tool's result arrived"
        + (" after a retry with the same idempotency key" if len(runs) == 2 else "")
        + "; the session completed",
        {
            "server gone": f"{up_at - down_at:.1f} s",
            "restart to session completed": f"{done_after:.1f} s",
            "tool runs": len(runs),
        },
    )


async def test_server_stopped_while_waiting_for_approval(procs: ProcessHarness, own_server: OwnServer):
    worker = await procs.worker()
    email = {"to": "b@example.com", "subject": "hi", "body": "x"}
    handle = await procs.start([tool_use("send_email", email, id="e1"), answer("Sent.")])
    await wait_for_status(handle, "waiting_approval")
    await _restart(own_server, kill=False)

    snapshot = await wait_until(
        lambda: handle.query("status", result_type=SessionStatus),
        timeout=30,
        what="the session to answer a query after the restart",
    )
    assert snapshot.status == "waiting_approval"
    assert [p.tool_use_id for p in snapshot.pending_approvals] == ["e1"]
    asked = time.monotonic()
    reply = await handle.execute_update("approve_call", Decision(tool_use_id="e1"), result_type=str)
    answered = time.monotonic() - asked
    assert reply == "approved send_email (e1)"
    result = await result_of(handle, timeout=60)
    assert result.status == "completed" and result.answer == "Sent."
    runs = effects_of(handle.id, "send_email")
    assert len(runs) == 1 and runs[0]["pid"] == worker.pid
    record(
        AREA,
        f"dev server stopped while the session waits for an approval, down {DOWN_S:g} s, started again",
        "the pending approval survived; approve sent after the restart was recorded, the email sent once",
        {"approve answered after": f"{answered:.1f} s"},
    )


def test_gomaxprocs_reaches_the_server(tmp_path: Path):
    """`devserver.py --gomaxprocs N` runs the server's Go runtime with GOMAXPROCS=N."""
    server = temporal_server.start(log_file=tmp_path / "temporal.log", gomaxprocs=1)
    try:
        environ = Path(f"/proc/{server.pid}/environ").read_bytes().split(b"\0")
        assert b"GOMAXPROCS=1" in environ
    finally:
        server.stop()
