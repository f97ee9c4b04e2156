"""Traces and metrics: read the standard `OTEL_*` variables, build the providers and
exporters, and hand the client its interceptor and the worker its runtime.

Tracing is on when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`) or
`OTEL_TRACES_EXPORTER` (`otlp`, `console`; `none` is off) is set. Off, nothing of the
OpenTelemetry SDK is imported and no interceptor is installed. On, the global tracer
provider is the Temporal SDK's replay-safe one (`create_tracer_provider`): spans that
workflow code starts get deterministic ids and are not ended again on replay, so a
worker that replays a session after a crash adds no duplicate span.

Metrics go through the Temporal runtime of the worker's client: the SDK's own metrics
and ours (`activity.metric_meter()`, `workflow.metric_meter()`, the latter silent on
replay) land in one `MetricBuffer`, which a thread drains (infra/metric_drain.py) into an
OpenTelemetry `MeterProvider` with a Prometheus reader (`--metrics-port`) and/or an OTLP
reader (`OTEL_METRICS_EXPORTER=otlp`, or an OTLP endpoint unless `OTEL_METRICS_EXPORTER=none`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from infra.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor

SERVICE_NAME = "agent-loop"
DEFAULT_PROTOCOL = "http/protobuf"
# Metric points the SDK's buffer holds between two drains (infra/metric_drain.py: every
# 0.1 s, on a thread of its own). A worker records about 20 points per workflow task, so a
# few thousand tasks a second leave it nearly empty; the 10,000 it had filled during a
# 1,000-row list. Each point held costs about 100 bytes: 10 MB, allocated at start.
METRIC_BUFFER_SIZE = 100_000
METER_NAME = "agent-loop"
OTLP_METRICS_INTERVAL_MS = 10_000

_installed: Any = None  # the tracer provider, once per process: OpenTelemetry allows one


def _env(name: str) -> str:
    return os.environ.get(name, "").strip()


def _endpoint_set(signal: str) -> bool:
    return bool(_env("OTEL_EXPORTER_OTLP_ENDPOINT") or _env(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT"))


def traces_exporter() -> str | None:
    """`otlp`, `console`, or None when tracing is off."""
    name = _env("OTEL_TRACES_EXPORTER").lower()
    if name == "none":
        return None
    if name:
        return name
    return "otlp" if _endpoint_set("TRACES") else None


def otlp_metrics_wanted() -> bool:
    name = _env("OTEL_METRICS_EXPORTER").lower()
    return name == "otlp" or (name == "" and _endpoint_set("METRICS"))


def enabled_by() -> str | None:
    """The setting that turns tracing or OTLP metrics on, as `NAME=value`; None when both are off."""
    candidates = []
    if traces_exporter() is not None:
        candidates += ["OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    if otlp_metrics_wanted():
        candidates += ["OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"]
    if candidates:
        candidates.append("OTEL_EXPORTER_OTLP_ENDPOINT")
    return next((f"{name}={_env(name)}" for name in candidates if _env(name)), None)


def _protocol(signal: str) -> str:
    specific = _env(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL")
    return specific or _env("OTEL_EXPORTER_OTLP_PROTOCOL") or DEFAULT_PROTOCOL


def _resource() -> Any:
    from opentelemetry.sdk.resources import Resource

    named = _env("OTEL_SERVICE_NAME") or "service.name=" in _env("OTEL_RESOURCE_ATTRIBUTES")
    # Attributes given here win over the environment's, so the default only when unnamed.
    return Resource.create({} if named else {"service.name": SERVICE_NAME})


# ---- traces ----------------------------------------------------------------------------


def install_tracing(processor: SpanProcessor | None = None) -> bool:
    """Install the replay-safe tracer provider once; False when tracing is off.

    `processor` (a span processor) replaces the one the environment asks for (tests)."""
    global _installed
    if _installed is not None:
        return True
    if processor is None:
        exporter = traces_exporter()
        if exporter is None:
            return False
        processor = _span_processor(exporter)
    import opentelemetry.trace
    from temporalio.contrib.opentelemetry import create_tracer_provider

    provider = create_tracer_provider(resource=_resource())
    provider.add_span_processor(processor)
    opentelemetry.trace.set_tracer_provider(provider)
    _installed = provider
    return True


def _span_processor(exporter: str) -> SpanProcessor:
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    if exporter == "console":
        return BatchSpanProcessor(ConsoleSpanExporter())
    if exporter != "otlp":
        raise ConfigError(f"OTEL_TRACES_EXPORTER={exporter!r}: this worker knows otlp, console and none")
    if _protocol("TRACES") == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    # The exporters read the endpoint, headers and timeout from OTEL_EXPORTER_OTLP_*.
    return BatchSpanProcessor(OTLPSpanExporter())


def flush_traces() -> None:
    """Send what the span processor still holds (before a clean exit)."""
    if _installed is not None:
        _installed.force_flush()


def client_interceptors() -> list[Any]:
    """The client's interceptors: the contrib's tracing interceptor when tracing is on.

    Set on the client, it also applies to every worker built from that client; it adds
    no spans of its own (`add_temporal_spans=False`), it carries the trace context from
    the client into workflows, from workflows into activities and child workflows."""
    if not install_tracing():
        return []
    from temporalio.contrib.opentelemetry import OpenTelemetryInterceptor

    return [OpenTelemetryInterceptor()]


# ---- metrics ---------------------------------------------------------------------------


@dataclass
class Metrics:
    """The runtime to connect with and the exporter that must run beside the worker."""

    runtime: Any
    exporter: Any
    meter_provider: Any

    async def run(self) -> None:
        """Drain the SDK's buffer into the meter provider until cancelled."""
        try:
            await self.exporter.run()
        finally:
            self.meter_provider.shutdown()


def metrics(
    prometheus: tuple[str, int] | None = None, readers: Sequence[Any] = (), worker_heartbeat: Any = None
) -> Metrics | None:
    """The metrics pipeline the worker was asked for, or None: a Prometheus endpoint at
    `prometheus` (host, port), OTLP per the environment, and any extra `readers` (tests).
    `worker_heartbeat` (a timedelta) is the runtime's worker heartbeat interval (default:
    the SDK's). Core's own log lines go through Python logging (`temporalio.core`), where a
    full metrics buffer is counted instead of logged line by line (infra/metric_drain.py)."""
    readers = list(readers)
    if prometheus is not None:
        readers.append(_prometheus_reader(*prometheus))
    if otlp_metrics_wanted():
        readers.append(_otlp_metrics_reader())
    if not readers:
        return None
    from opentelemetry.sdk.metrics import MeterProvider
    from temporalio.runtime import (
        LogForwardingConfig,
        LoggingConfig,
        MetricBuffer,
        Runtime,
        TelemetryConfig,
        TelemetryFilter,
    )

    from infra.metric_drain import CORE_LOGGER, CoreLogFilter, Losses, MetricDrain

    provider = MeterProvider(metric_readers=readers, resource=_resource())
    losses = Losses(provider.get_meter(METER_NAME))
    core_log = logging.getLogger(CORE_LOGGER)
    for old in [f for f in core_log.filters if isinstance(f, CoreLogFilter)]:
        core_log.removeFilter(old)  # a pipeline built before in this process (tests)
    core_log.addFilter(CoreLogFilter(losses))
    logging_config = LoggingConfig(
        filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),  # the SDK's default levels
        forwarding=LogForwardingConfig(logger=core_log, append_target_to_name=False),
    )
    buffer = MetricBuffer(METRIC_BUFFER_SIZE)
    heartbeat = {"worker_heartbeat_interval": worker_heartbeat} if worker_heartbeat is not None else {}
    runtime = Runtime(telemetry=TelemetryConfig(metrics=buffer, logging=logging_config), **heartbeat)
    return Metrics(runtime, MetricDrain(buffer, provider, losses, meter_name=METER_NAME), provider)


def _prometheus_reader(host: str, port: int) -> Any:
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import start_http_server

    try:
        start_http_server(port, addr=host)
    except OSError as err:
        why = err.strerror or err
        raise ConfigError(f"--metrics-port: cannot serve metrics on {host}:{port}: {why}") from err
    return PrometheusMetricReader()


def _otlp_metrics_reader() -> Any:
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    if _protocol("METRICS") == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    interval = int(_env("OTEL_METRIC_EXPORT_INTERVAL") or OTLP_METRICS_INTERVAL_MS)
    return PeriodicExportingMetricReader(OTLPMetricExporter(), export_interval_millis=interval)


async def run_beside(metrics_: Metrics | None, main: Any) -> None:
    """Run `main` (a coroutine) with the metrics exporter draining beside it."""
    if metrics_ is None:
        await main
        return
    drain = asyncio.create_task(metrics_.run())
    try:
        await main
    finally:
        await metrics_.exporter.shutdown()
        await drain
