"""Traces and metrics, in process: the span tree of a session with a retried model call,
a tool call and an approval, read from the OpenTelemetry SDK's in-memory exporter; a
sub-agent's spans inside its parent's trace; the metric values after a scripted session,
read from an in-memory metric reader fed by the worker's Temporal runtime.

The worker runs with `max_cached_workflows=0`: every workflow task replays the session
from its first event, so a span emitted again on replay would show here as a duplicate.
"""

# OpenTelemetry types a span's context, parent and attributes as optional; a finished
# span of the SDK has them all.
# pyright: reportOptionalMemberAccess=false, reportOptionalSubscript=false

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from temporalio.client import Client
from temporalio.contrib.opentelemetry import OpenTelemetryInterceptor
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from devservers.fakemodel import FakeModelServer
from infra import otel
from infra.connection import connect
from infra.definitions import load_definitions
from sessions.start_input import session_input
from tests.conftest import Harness, answer, model_activities, tool_use
from tests.record_histories import load_history
from tests.support.procs import wait_for_status
from tests.support.reliability import record
from tests.support.tools import TOOLS
from tests.test_agents import TEAM
from tests.test_replay import FILES as HISTORY_FILES
from worker import build_worker
from workflows.agent import AgentWorkflow
from workflows.contract import Decision

AREA = "Telemetry"
EMAIL = {"to": "a@example.com", "subject": "hi", "body": "x"}
USAGE = {"input_tokens": 100, "output_tokens": 10}
# The fake model answers 500 once, then the scripted turns: step 1 is retried once.
SCRIPT = [
    {"status": 500, "message": "Internal server error"},
    tool_use("get_time", id="t1") | {"usage": USAGE},
    tool_use("send_email", EMAIL, id="e1") | {"usage": USAGE},
    answer("Sent.", usage=USAGE),
]

_exporter = InMemorySpanExporter()


@pytest.fixture(scope="session")
def spans() -> InMemorySpanExporter:
    # One tracer provider per process (OpenTelemetry's rule): installed once, shared.
    otel.install_tracing(SimpleSpanProcessor(_exporter))
    return _exporter


@pytest_asyncio.fixture
async def traced(spans, dev_server, fake_model: FakeModelServer, data_dir: Path) -> AsyncIterator[Harness]:
    client = await connect(target_host=dev_server.address)
    assert client.config()["interceptors"], "tracing is on: the client carries the tracing interceptor"
    async for harness in _harness(client, fake_model, data_dir):
        yield harness


async def _harness(client: Client, fake_model: FakeModelServer, data_dir: Path) -> AsyncIterator[Harness]:
    queue = f"otel-{uuid.uuid4().hex[:8]}"
    model = model_activities(fake_model, data_dir)
    async with build_worker(client, TOOLS, queue=queue, model=model, max_cached_workflows=0):
        yield Harness(client, fake_model, queue)


async def _run_scripted(harness: Harness) -> str:
    handle = await harness.start(SCRIPT, user_id="dana")
    await wait_for_status(handle, "waiting_approval")
    await handle.execute_update(AgentWorkflow.approve_call, Decision(tool_use_id="e1", decided_by="carol"))
    result = await asyncio.wait_for(handle.result(), timeout=60)
    assert result.status == "completed"
    return handle.id


def _trace(spans: InMemorySpanExporter, session_id: str) -> list[ReadableSpan]:
    finished = spans.get_finished_spans()
    traces = {
        s.context.trace_id
        for s in finished
        if (s.attributes or {}).get("gen_ai.conversation.id") == session_id
    }
    return [s for s in finished if s.context.trace_id in traces]


def _named(spans: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def _parent(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


async def test_session_trace_tree_and_attributes(traced: Harness, spans: InMemorySpanExporter):
    session_id = await _run_scripted(traced)
    trace = _trace(spans, session_id)
    assert len({s.context.trace_id for s in trace}) == 1, "one trace per session run"
    assert len({s.context.span_id for s in trace}) == len(trace), "no span twice"

    [root] = _named(trace, "invoke_agent")
    assert root.parent is None and root.name == "invoke_agent default"
    attrs = dict(root.attributes or {})
    assert attrs["agent.session.id"] == session_id and attrs["agent.user.id"] == "dana"
    assert (attrs["agent.status"], attrs["agent.steps"], attrs["gen_ai.operation.name"]) == (
        "completed",
        3,
        "invoke_agent",
    )

    chats = _named(trace, "chat ")
    assert [(s.attributes["agent.step"], s.attributes["agent.attempt"]) for s in chats] == [
        (1, 1),
        (1, 2),
        (2, 1),
        (3, 1),
    ]
    assert all(_parent(s) == root.context.span_id for s in chats)
    failed, *ok = chats
    assert failed.status.status_code == StatusCode.ERROR and [e.name for e in failed.events] == ["exception"]
    first = dict(ok[0].attributes or {})
    assert first["gen_ai.operation.name"] == "chat" and first["gen_ai.provider.name"] == "anthropic"
    assert first["gen_ai.request.model"] == "claude-sonnet-4-6" and first["gen_ai.response.model"]
    assert (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"]) == (100, 10)
    assert (
        "gen_ai.usage.cache_read.input_tokens" in first
        and "gen_ai.usage.cache_creation.input_tokens" in first
    )
    assert first["gen_ai.response.finish_reasons"] == ("tool_use",)
    assert (first["agent.session.id"], first["agent.name"], first["agent.user.id"]) == (
        session_id,
        "default",
        "dana",
    )
    assert not any("gen_ai.input.messages" in (s.attributes or {}) for s in trace), "no content unless asked"

    calls = {s.attributes["gen_ai.tool.call.id"]: s for s in _named(trace, "execute_tool")}
    assert set(calls) == {"t1", "e1"} and all(_parent(s) == root.context.span_id for s in calls.values())
    [approval] = _named(trace, "approval")
    assert _parent(approval) == calls["e1"].context.span_id
    assert approval.attributes["agent.approval.decision"] == "approved"
    assert approval.attributes["agent.approval.decided_by"] == "carol"
    runs = {s.attributes["gen_ai.tool.call.id"]: s for s in _named(trace, "run_tool")}
    assert {k: _parent(s) for k, s in runs.items()} == {k: s.context.span_id for k, s in calls.items()}
    run = dict(runs["t1"].attributes or {})
    assert (run["gen_ai.tool.name"], run["agent.attempt"], run["agent.user.id"]) == ("get_time", 1, "dana")
    record(
        AREA,
        "trace of a session: a 500 on the first model call, a tool call, an approval (in-memory exporter, "
        "no workflow cache: every task replays)",
        "one trace: invoke_agent > chat per attempt (the failed one marked with its error), execute_tool > "
        "approval (decided_by) and run_tool; GenAI attributes set; no span twice",
        {"spans": len(trace)},
    )


async def test_prompt_text_only_when_asked(traced: Harness, spans: InMemorySpanExporter, monkeypatch):
    monkeypatch.setenv("AGENT_TRACE_CONTENT", "1")
    result = await traced.run([answer("The secret word.")], goal="say the secret word")
    [chat] = _named(_trace(spans, result.session_id), "chat ")
    assert "say the secret word" in str(chat.attributes["gen_ai.input.messages"])
    assert "The secret word." in str(chat.attributes["gen_ai.output.messages"])


async def test_subagent_spans_are_inside_the_parent_trace(
    traced: Harness, spans: InMemorySpanExporter, tmp_path: Path
):
    path = tmp_path / "agents.toml"
    path.write_text(TEAM)
    parent = f"test-{uuid.uuid4().hex[:10]}"
    traced.script(parent, [tool_use("agent__helper", {"task": "say hi"}, id="h1"), answer("It said hi.")])
    traced.script(f"{parent}.sub-1", [answer("hi")])
    start = session_input(load_definitions(path), "lead", goal="get it said", limits={}, fields={})
    handle = await traced.client.start_workflow(
        AgentWorkflow.run, start, id=parent, task_queue=traced.task_queue
    )
    assert (await asyncio.wait_for(handle.result(), timeout=60)).status == "completed"

    trace = _trace(spans, parent)
    roots = {s.attributes["agent.session.id"]: s for s in _named(trace, "invoke_agent")}
    assert set(roots) == {parent, f"{parent}.sub-1"} and len({s.context.trace_id for s in trace}) == 1
    [call] = _named(trace, "execute_tool agent__helper")
    assert _parent(call) == roots[parent].context.span_id
    assert _parent(roots[f"{parent}.sub-1"]) == call.context.span_id, (
        "the child's run hangs under the parent's call"
    )
    child_chats = [s for s in _named(trace, "chat ") if s.attributes["agent.session.id"] == f"{parent}.sub-1"]
    assert [s.attributes["agent.name"] for s in child_chats] == ["helper"]
    assert all(_parent(s) == roots[f"{parent}.sub-1"].context.span_id for s in child_chats)
    record(
        AREA,
        "trace of a session whose agent hands a task to a sub-agent",
        "the child's invoke_agent span is a child of the parent's execute_tool agent__helper span, one trace",
        {},
    )


# ---- metrics ---------------------------------------------------------------------------


def _points(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, Any], Any]]]:
    """Metric name -> [(attributes, point)] from the reader's current collection."""
    found: dict[str, list[tuple[dict[str, Any], Any]]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    found.setdefault(metric.name, []).append((dict(point.attributes or {}), point))
    return found


def _total(points: dict[str, list], name: str, **match: str) -> float:
    """The sum of a counter's values (or a histogram's counts) whose attributes match."""
    total = 0.0
    for attributes, point in points.get(name, []):
        if all(attributes.get(k) == v for k, v in match.items()):
            total += point.count if hasattr(point, "count") else point.value
    return total


async def test_metric_values_after_a_scripted_session(
    dev_server, fake_model: FakeModelServer, data_dir: Path
):
    reader = InMemoryMetricReader()
    metrics = otel.metrics(readers=[reader])
    assert metrics is not None
    client = await connect(target_host=dev_server.address, runtime=metrics.runtime, interceptors=[])
    drain = asyncio.create_task(metrics.exporter.run())
    try:
        async for harness in _harness(client, fake_model, data_dir):
            await _run_scripted(harness)
    finally:
        await metrics.exporter.shutdown()
        await drain
    points = _points(reader)

    assert _total(points, "agent_sessions_started", agent="default") == 1
    assert _total(points, "agent_sessions_ended", agent="default", status="completed", stop_reason="") == 1
    assert _total(points, "agent_model_calls", model="claude-sonnet-4-6", outcome="ok") == 3
    assert _total(points, "agent_model_calls", outcome="ModelRetryable") == 1
    assert _total(points, "agent_model_call_duration", outcome="ok") == 3
    assert _total(points, "agent_retries", activity="model", error_class="ModelRetryable") == 1
    assert _total(points, "agent_tool_calls", tool="get_time", outcome="ok") == 1
    assert _total(points, "agent_tool_calls", tool="send_email", outcome="ok") == 1
    assert _total(points, "agent_tool_call_duration", tool="get_time") == 1
    assert _total(points, "agent_tokens", agent="default", model="claude-sonnet-4-6", kind="input") == 300
    assert _total(points, "agent_tokens", kind="output") == 30
    assert _total(points, "agent_approval_wait", tool="send_email", decision="approved") == 1
    assert any(name.startswith("temporal_") for name in points), sorted(points)
    record(
        AREA,
        "metrics after a scripted session (a 500, two tool calls, an approval), read from an "
        "in-memory reader fed by the worker's Temporal runtime",
        "sessions started/ended, model calls by outcome, one retry by error class, tool calls, tokens, "
        "approval wait; the SDK's temporal_* metrics alongside",
        {"metrics": len(points)},
    )


# ---- replay ----------------------------------------------------------------------------


async def test_recorded_histories_replay_with_tracing_and_add_no_span(spans: InMemorySpanExporter):
    before = len(spans.get_finished_spans())
    replayer = Replayer(
        workflows=[AgentWorkflow],
        data_converter=pydantic_data_converter,
        interceptors=[OpenTelemetryInterceptor()],
    )
    for path in HISTORY_FILES:
        history = load_history(path)
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"
    assert len(spans.get_finished_spans()) == before, "a replay ends no span"
    record(
        AREA,
        "every recorded history replayed with the tracing interceptor and the replay-safe tracer",
        "replays without non-determinism; no span emitted",
        {"histories": len(HISTORY_FILES)},
    )


# ---- configuration from the environment ------------------------------------------------


@pytest.mark.parametrize(
    ("env", "exporter"),
    [
        ({}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, "otlp"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, "otlp"),
        ({"OTEL_TRACES_EXPORTER": "console"}, "console"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, None),
    ],
)
def test_tracing_is_off_unless_asked_for(monkeypatch, env: dict[str, str], exporter: str | None):
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert otel.traces_exporter() == exporter


def test_otlp_grpc_exporter_from_the_environment(monkeypatch):
    """OTEL_EXPORTER_OTLP_PROTOCOL=grpc sends spans to a gRPC collector on loopback."""
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
    from opentelemetry.sdk.trace import TracerProvider

    received: list[str] = []

    class Collector(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):
            received.extend(
                s.name for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans
            )
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Collector(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        provider = TracerProvider()  # not the global one: that is installed once per process
        provider.add_span_processor(otel._span_processor("otlp"))
        provider.get_tracer("test").start_span("over grpc").end()
        provider.shutdown()  # flushes the batch
    finally:
        server.stop(grace=None)
    assert received == ["over grpc"]


def test_tracing_off_imports_no_sdk():
    """Without OTEL_* the worker installs no interceptor and never imports the OpenTelemetry SDK."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    check = (
        "import sys, worker\n"
        "from infra import otel\n"
        "assert otel.client_interceptors() == [] and otel.metrics(None) is None\n"
        "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', 'temporalio.contrib.opentelemetry'))))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", check], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# ---- eviction --------------------------------------------------------------------------


async def test_a_run_closed_after_eviction_logs_no_context_error(spans: InMemorySpanExporter, caplog):
    """A run dropped from the worker's cache may be closed later by the garbage collector,
    from another context: its open spans neither end nor log OpenTelemetry's 'Failed to
    detach context' (one ERROR line per open span, on every eviction, in an operator's logs)."""
    import contextvars
    import logging

    from workflows.spans import _span

    async def run() -> None:
        with _span("evicted", {}), _span("evicted inner", {}):
            await asyncio.Event().wait()

    coro = run()
    contextvars.copy_context().run(coro.send, None)  # the run's own context enters both spans
    with caplog.at_level(logging.ERROR, logger="opentelemetry.context"):
        coro.close()  # GeneratorExit, thrown in from this (another) context
    assert [r.getMessage() for r in caplog.records] == []
    assert not [s for s in spans.get_finished_spans() if s.name.startswith("evicted")], (
        "the run goes on elsewhere"
    )
