"""Metrics that survive load, from a real worker process with `--metrics-port`.

Sessions wait for an approval, then the list reads every one of them (a query each), as
`client.py list --limit N` does: about 20 metric points a query. The Prometheus endpoint must
still serve the SDK's `temporal_*` series afterwards and go on exporting, Core's "metrics
buffer is full" must not reach the log line by line (one warning a minute at most, with the
count on `/metrics`), and SIGTERM must end the worker with exit code 0.

The default test runs worker.py with the SDK's buffer cut to `SMALL_BUFFER` points, so that
a few sessions fill it whatever the machine's speed: what 1,000 sessions do to the real
buffer. The slow test is the real thing: 1,000 sessions, a 1,000-row list, the worker's own
buffer.
"""

from __future__ import annotations

import asyncio
import re
import socket
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client

from devservers.fakemodel import FakeModelServer
from sessions import control, listing
from tests.conftest import answer, tool_use
from tests.support.procs import Workers, wait_polling, wait_until
from workflows.contract import SessionInput

pytestmark = pytest.mark.process

SMALL_BUFFER = 300
SLOW_DRAIN_S = 5.0
# worker.py itself, with the SDK's metric buffer this small and drained this seldom: the
# sessions' points overflow it however slowly a loaded machine makes them.
SMALL_BUFFER_WORKER = [
    "-c",
    "import runpy, sys; import infra.otel, infra.metric_drain; "
    f"infra.otel.METRIC_BUFFER_SIZE = {SMALL_BUFFER}; infra.metric_drain.DRAIN_INTERVAL_S = {SLOW_DRAIN_S}; "
    "sys.argv[0] = 'worker.py'; runpy.run_path('worker.py', run_name='__main__')",
]
CORE_FLOOD = "metrics buffer is full"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def metrics_port() -> int:
    return _free_port()


@pytest_asyncio.fixture
async def workers(
    dev_server, fake_model: FakeModelServer, data_dir: Path, tmp_path: Path, metrics_port: int
) -> AsyncIterator[Callable[..., Workers]]:
    made: list[Workers] = []

    def make(program: list[str] | None = None) -> Workers:
        found = Workers(
            address=dev_server.address, model_url=fake_model.url, data_dir=data_dir, log_dir=tmp_path,
            args=["--metrics-port", f"127.0.0.1:{metrics_port}"], program=program,
        )  # fmt: skip
        made.append(found)
        return found

    try:
        yield make
    finally:
        for found in made:
            found.close()
            print(found.logs())


def _series(port: int) -> dict[str, float]:
    """Every sample of the Prometheus page, by its line's name and labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        page = response.read().decode()
    found: dict[str, float] = {}
    for line in page.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            found[name] = float(value)
    return found


def _sum(series: dict[str, float], prefix: str) -> float:
    return sum(v for k, v in series.items() if k.startswith(prefix))


async def _waiting_sessions(client: Client, fake_model: FakeModelServer, queue: str, count: int) -> None:
    """`count` sessions on `queue`, each waiting for its approval of an email."""
    turns = [tool_use("send_email", {"to": "a@example.com", "subject": "s", "body": "b"}, id="e1"),
             answer("Sent.")]  # fmt: skip
    gate = asyncio.Semaphore(50)

    async def one() -> None:
        session_id = f"load-{uuid.uuid4().hex[:10]}"
        fake_model.script.set(session_id, turns)
        async with gate:
            await control.start(client, SessionInput(goal="send it", search_attributes=True), session_id,
                                task_queue=queue)  # fmt: skip

    await asyncio.gather(*(one() for _ in range(count)))
    query = f"TaskQueue = '{queue}' AND AgentStatus = 'waiting_approval'"

    async def all_waiting() -> bool:
        return (await client.count_workflows(query)).count == count

    await wait_until(all_waiting, timeout=180 + count, what=f"{count} sessions waiting for approval")


async def _list_them_all(client: Client, port: int, count: int) -> dict[str, float]:
    """The list of every session (each row read from its history), then the metrics page once it
    has exported since."""
    rows = await listing.rows(client, listing.Filter(), limit=count)
    assert len(rows) == count
    before = _sum(_series(port), "temporal_request_total")

    def exported_since() -> dict[str, float] | None:
        series = _series(port)
        return series if _sum(series, "temporal_request_total") > before else None

    # The worker keeps making requests (its heartbeat, every second): points that arrive
    # after the list show the exporter is still exporting.
    return await wait_until(exported_since, timeout=60, what="metric points exported after the list")


async def _exporting(port: int) -> None:
    """Wait until the worker's own series are exported: the instruments it made at start
    are drained before any load (a point dropped before that would break them for good)."""

    def found() -> bool:
        return any(k.startswith("temporal_") for k in _series(port))

    await wait_until(found, timeout=60, what="the worker's temporal_* series")


def _flood_lines(log: str) -> int:
    return len(re.findall(CORE_FLOOD, log, flags=re.IGNORECASE))


async def test_metrics_survive_a_full_buffer_and_sigterm_exits_0(
    client: Client, fake_model: FakeModelServer, workers, metrics_port: int
):
    pool: Workers = workers(SMALL_BUFFER_WORKER)
    worker = pool.start()
    await wait_polling(client, worker)
    await _exporting(metrics_port)
    await _waiting_sessions(client, fake_model, pool.task_queue, 20)
    series = await _list_them_all(client, metrics_port, 20)  # and the exporter still exports

    names = sorted({k.partition("{")[0] for k in series})
    assert {"temporal_request_total", "temporal_num_pollers"} <= set(names), " ".join(names)
    dropped = _sum(series, "agent_metric_points_dropped_total")
    assert dropped > 0, f"a buffer of {SMALL_BUFFER} points never filled: the test proved nothing"
    log = worker.log_file.read_text(errors="replace")
    assert _flood_lines(log) <= 1, f"{_flood_lines(log)} lines about the full buffer"

    worker.terminate()
    await worker.exited(60)
    assert worker.process.returncode == 0, worker.log()


@pytest.mark.slow
async def test_metrics_survive_a_1000_row_list(
    client: Client, fake_model: FakeModelServer, workers, metrics_port: int
):
    """The issue's load with the worker's own buffer and defaults (minutes on 2 cores)."""
    pool: Workers = workers()
    worker = pool.start()
    await wait_polling(client, worker)
    await _waiting_sessions(client, fake_model, pool.task_queue, 1000)
    series = await _list_them_all(client, metrics_port, 1000)

    assert any(k.startswith("temporal_workflow_task_execution_latency") for k in series)
    assert any(k.startswith("agent_tokens_total") for k in series)
    assert _sum(series, "agent_metric_points_dropped_total") == 0
    assert _flood_lines(worker.log_file.read_text(errors="replace")) == 0

    worker.terminate()
    await worker.exited(60)
    assert worker.process.returncode == 0, worker.log()
