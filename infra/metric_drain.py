"""The worker's metric points, from the Temporal SDK's buffer into the OpenTelemetry meter
provider, on a thread of their own, whatever the load.

The SDK's Core records every metric point (its own and those of `workflow.metric_meter()` and
`activity.metric_meter()`) into a bounded buffer that Python must drain. A point that finds
the buffer full is dropped, and one dropped point can break exporting for long after: Core
creates each instrument and attribute set with a point of its own, and a later point of an
attribute set whose creation was dropped makes the whole drain fail (pyo3's
`PanicException`: "You must initialize the reference before using it"), with every point in
it, creations of others included. The contrib's exporter drained once a second from the
worker's event loop, so a busy loop (a 1,000-row list's queries: about 20 points a query)
filled the 10,000 points, the exporter died on that exception, the meter provider shut
down with it, and Core logged one line for every point after.

So here the buffer is drained every `DRAIN_INTERVAL_S` by a daemon thread that the event loop
cannot hold up, into a buffer sized to hold far more than a worker records between two drains
(infra/otel.py). Should it fill anyway, the drain goes on: Core's "buffer is full" lines
(forwarded to Python logging) become the `agent_metric_points_dropped` counter and at most one
warning a minute, and a drain lost to a broken reference counts in `agent_metric_drains_lost`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from temporalio.contrib.opentelemetry import MetricsExporter

log = logging.getLogger(__name__)

DRAIN_INTERVAL_S = 0.1
WARN_EVERY_S = 60.0
# Core's words when the buffer is full (temporalio_sdk_core::telemetry::metrics).
BUFFER_FULL = "metrics buffer is full"
# Core's log lines are forwarded to this logger (through `CoreLogFilter`).
CORE_LOGGER = "temporalio.core"


class Warner:
    """One warning a minute at most, however often it is asked for."""

    def __init__(self, every_s: float = WARN_EVERY_S) -> None:
        self._every_s = every_s
        self._last: float | None = None
        self._lock = threading.Lock()

    def due(self) -> bool:
        with self._lock:
            now = time.monotonic()
            if self._last is not None and now - self._last < self._every_s:
                return False
            self._last = now
            return True


class Losses:
    """What the metrics pipeline lost, as counters on the same meter, and the warning."""

    def __init__(self, meter: Any) -> None:
        self.points = meter.create_counter(
            "agent_metric_points_dropped",
            description="metric points Core dropped because its buffer was full",
        )
        self.drains = meter.create_counter(
            "agent_metric_drains_lost", description="drains of Core's metric buffer lost to a dropped point"
        )
        self.points.add(0)  # the series exists from the start: an alert can compare it with 0
        self.drains.add(0)
        self.warner = Warner()

    def warn(self, what: str) -> None:
        if self.warner.due():
            log.warning(
                "%s; counted in agent_metric_points_dropped_total and agent_metric_drains_lost_total "
                "(this warning comes at most once a minute)",
                what,
            )


class CoreLogFilter(logging.Filter):
    """Core's "buffer is full" lines become a count and at most one warning a minute; the
    rest of Core's log lines pass as they are."""

    def __init__(self, losses: Losses) -> None:
        super().__init__()
        self._losses = losses

    def filter(self, record: logging.LogRecord) -> bool:
        if BUFFER_FULL not in record.getMessage():
            return True
        self._losses.points.add(1)
        self._losses.warn("the SDK's metrics buffer was full: metric points were dropped")
        return False


def _is_panic(err: BaseException) -> bool:
    # pyo3's PanicException derives from BaseException and is not importable by name.
    return type(err).__name__ == "PanicException"


class MetricDrain(MetricsExporter):
    """The contrib's exporter, drained on a thread of its own (see the module's docstring),
    with its instruments found by name.

    The contrib caches instruments and attribute sets by `id()` without keeping the
    objects: once the SDK frees one (our instruments and attribute sets are made per
    activity and per workflow), a new object can get the same id and be recorded as the old
    one (seen: model calls counted as sessions started). Converting a few attributes per
    update costs little; a wrong series costs an alert."""

    def __init__(self, buffer: Any, meter_provider: Any, losses: Losses, *, meter_name: str) -> None:
        super().__init__(buffer, meter_provider, meter_name=meter_name)
        self._by_name: dict[tuple[str, int], Any] = {}
        self._losses = losses
        self._stop = threading.Event()

    async def run(self) -> None:
        """Drain on the thread until `shutdown()`, then once more."""
        thread = threading.Thread(target=self._drain_until_stopped, name="metric-drain", daemon=True)
        thread.start()
        try:
            await self._shutdown_event.wait()
        finally:
            self._stop.set()
            await asyncio.to_thread(thread.join)  # its last drain comes after the stop
            self._shutdown_event.clear()
            self._run_complete_event.set()

    def _drain_until_stopped(self) -> None:
        while not self._stop.wait(DRAIN_INTERVAL_S):
            self._drain_once()
        self._drain_once()

    def _drain_once(self) -> None:
        try:
            updates = self._buffer.retrieve_updates()
        except BaseException as err:  # the thread must outlive whatever one drain meets
            if _is_panic(err):
                self._losses.drains.add(1)
                self._losses.warn("a drain of the SDK's metric buffer was lost to a dropped point")
            else:
                self._handle_error(err if isinstance(err, Exception) else RuntimeError(repr(err)))
            return
        for update in updates:
            try:
                self._apply_update(update)
            except Exception as err:
                self._handle_error(err)

    def _handle_error(self, err: Exception) -> None:
        if self._losses.warner.due():
            log.warning("a metric point could not be exported (at most one such warning a minute): %r", err)

    def _get_or_create_instrument(self, metric: Any) -> Any:
        key = (metric.name, metric.kind)
        found = self._by_name.get(key)
        if found is None:
            self._instruments.pop(id(metric), None)  # a stale entry under a reused id
            found = self._by_name[key] = super()._get_or_create_instrument(metric)
        return found

    def _get_or_create_attributes(self, attributes: Any) -> Any:
        return dict(attributes)
