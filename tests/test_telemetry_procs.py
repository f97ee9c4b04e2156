"""Traces and metrics from real worker processes, configured by environment variables
alone, received by a small OTLP/HTTP collector on loopback (tests/support/otlp.py) that
outlives the workers: the exporter path from `OTEL_*` variables, the Prometheus endpoint
of `--metrics-port`, and no duplicate span after a worker is killed with kill -9 and the
session replays on another worker.
"""

from __future__ import annotations

import socket
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client

from devservers.fakemodel import FakeModelServer
from tests.conftest import answer, tool_use
from tests.support.otlp import OtlpReceiver, ReceivedSpan
from tests.support.procs import ProcessHarness, Workers, result_of, wait_for_effects, wait_until
from tests.support.reliability import record

pytestmark = pytest.mark.process

AREA = "Telemetry"
SERVICE = "agent-worker-under-test"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    found = OtlpReceiver().start()
    yield found
    found.stop()


@pytest.fixture
def metrics_port() -> int:
    return _free_port()


@pytest_asyncio.fixture
async def procs(
    client: Client, dev_server, fake_model: FakeModelServer, data_dir: Path, tmp_path: Path,
    receiver: OtlpReceiver, metrics_port: int,
) -> AsyncIterator[ProcessHarness]:  # fmt: skip
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_SERVICE_NAME": SERVICE,
        # Export within a tenth of a second, so a span ended before a kill has left.
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_METRIC_EXPORT_INTERVAL": "500",
    }
    workers = Workers(
        address=dev_server.address, model_url=fake_model.url, data_dir=data_dir, log_dir=tmp_path,
        env=env, args=["--metrics-port", f"127.0.0.1:{metrics_port}"],
    )  # fmt: skip
    harness = ProcessHarness(client, fake_model, workers)
    try:
        yield harness
    finally:
        await harness.close()
        print(workers.logs())


def _named(spans: list[ReceivedSpan], prefix: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


async def _spans_once_ended(receiver: OtlpReceiver, session_id: str) -> list[ReceivedSpan]:
    """The session's spans, once its run's span (the last to end) has arrived."""
    await wait_until(lambda: _named(receiver.spans_of(session_id), "invoke_agent"), timeout=30,
                     what=f"the invoke_agent span of {session_id}")  # fmt: skip
    return receiver.spans_of(session_id)


async def test_worker_exports_over_otlp_http_from_environment_alone(
    procs: ProcessHarness, receiver: OtlpReceiver, metrics_port: int
):
    await procs.worker()
    handle = await procs.start([tool_use("get_time", id="t1"), answer("It is noon.")])
    assert (await result_of(handle)).status == "completed"

    spans = await _spans_once_ended(receiver, handle.id)
    assert {s.service for s in spans} == {SERVICE}
    names = Counter(s.name.split(" ")[0] for s in spans)
    # The anthropic client traces its own HTTP call (metadata only) under our model span.
    assert names == {
        "invoke_agent": 1,
        "chat": 2,
        "execute_tool": 1,
        "run_tool": 1,
        "anthropic.messages.create": 2,
    }, names
    chats = {s.span_id for s in _named(spans, "chat")}
    assert {s.parent_span_id for s in _named(spans, "anthropic.")} == chats
    await wait_until(lambda: {"agent_model_calls", "agent_sessions_ended"} <= receiver.metric_names, timeout=30,
                     what="our metrics at the OTLP receiver")  # fmt: skip
    assert any(n.startswith("temporal_") for n in receiver.metric_names)

    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
        page = response.read().decode()
    assert "agent_model_calls_total{" in page and 'outcome="ok"' in page
    assert "agent_tool_call_duration_seconds_bucket{" in page
    assert "temporal_workflow_completed" in page or "temporal_workflow_task_execution_latency" in page
    record(
        AREA,
        "a worker process with only OTEL_* variables and --metrics-port",
        "its spans and metrics arrive at an OTLP/HTTP receiver on loopback under OTEL_SERVICE_NAME; "
        "the Prometheus endpoint serves our metrics and the SDK's",
        {"spans": len(spans)},
    )


async def test_kill_mid_session_adds_no_duplicate_span(procs: ProcessHarness, receiver: OtlpReceiver):
    first = await procs.worker("--heartbeat-timeout", "3")  # the killed call is noticed within 3 s
    handle = await procs.start(
        [tool_use("slow_upsert", {"key": "k1", "seconds": 3}, id="u1"), answer("Saved.")]
    )
    await wait_for_effects(handle.id, "slow_upsert")
    # Step 1's model span has reached the receiver from the worker about to be killed.
    await wait_until(lambda: _named(receiver.spans_of(handle.id), "chat"), timeout=10, what="step 1's span")
    first.kill()
    await procs.worker("--heartbeat-timeout", "3")
    assert (await result_of(handle)).status == "completed"

    spans = await _spans_once_ended(receiver, handle.id)
    assert len({s.trace_id for s in spans}) == 1
    assert len({s.span_id for s in spans}) == len(spans), "no span sent twice"
    [root] = _named(spans, "invoke_agent")
    chats = Counter(s.attributes["agent.step"] for s in _named(spans, "chat"))
    assert chats == {1: 1, 2: 1}, chats
    [call] = _named(spans, "execute_tool")
    assert call.parent_span_id == root.span_id and call.attributes["agent.tool.status"] == "done"
    attempts = sorted(s.attributes["agent.attempt"] for s in _named(spans, "run_tool"))
    # The killed attempt never ended, so it was never sent; the retry was, under the same call.
    assert attempts == [2] and all(s.parent_span_id == call.span_id for s in _named(spans, "run_tool"))
    assert all(s.parent_span_id == root.span_id for s in _named(spans, "chat"))
    record(
        AREA,
        "kill -9 during an idempotent tool call, the session replays on a new worker "
        "(spans counted at an OTLP receiver outside the workers)",
        "one invoke_agent, one chat span per step, one execute_tool span with the retried attempt under it; "
        "no span twice; one trace",
        {"spans": len(spans)},
    )
