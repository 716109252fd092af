"""Record spans on their way to an exporter: queued as they end, sent in batches by a background thread.

To the OTLP/HTTP exporter a batch goes as bytes written by `otlp_encoding` and posted through the
exporter's own client (its endpoint, headers, TLS, compression and retries, as configured or from
`OTEL_*`); every other exporter gets the SDK's `ReadableSpan`s. A span that finds `MAX_QUEUED`
spans waiting is dropped and counted, as the SDK's batch processor does: telemetry never holds
the records up.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Final

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from runtime.telemetry.otlp_encoding import SpanRequestEncoder
from runtime.telemetry.record_span import RecordSpan, RecordSpanSink

log = logging.getLogger(__name__)

MAX_QUEUED: Final = 20_000
BATCH: Final = 512
SEND_INTERVAL_S: Final = 1.0
WARNING_INTERVAL_S: Final = 60.0
STOP_TIMEOUT_S: Final = 30.0


class RecordSpanExport:
    """A `RecordSpanSink` that exports from a background thread; `encodes` when it writes OTLP itself."""

    def __init__(self, exporter: SpanExporter, resource: Resource, scope_name: str):
        # Imported here: only an app that traces pays for importing the HTTP exporter.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        self._exporter = exporter
        self._send: Callable[[Sequence[RecordSpan]], bool]
        # The exporter's HTTP client posts an encoded request as it is (tested with 1.45; another
        # version without it gets ReadableSpans, slower but the same on the wire).
        post: Callable[[bytes], Any] | None = getattr(getattr(exporter, "_client", None), "export", None)
        self.encodes = isinstance(exporter, OTLPSpanExporter) and post is not None
        if post is not None and self.encodes:
            encoder = SpanRequestEncoder(resource, scope_name)

            def send_encoded(spans: Sequence[RecordSpan]) -> bool:
                return bool(post(encoder.encode(spans)).success)

            self._send = send_encoded
        else:
            scope = InstrumentationScope(scope_name)

            def send_readable(spans: Sequence[RecordSpan]) -> bool:
                return (
                    exporter.export([readable_span(span, resource, scope) for span in spans])
                    is SpanExportResult.SUCCESS
                )

            self._send = send_readable
        self._queued: deque[RecordSpan] = deque()
        self._wakeup = threading.Event()
        self._flushes = threading.Condition()
        self._flush_requested = self._flush_done = 0
        self._stopping = False
        self.dropped = 0
        self.failed = 0
        self._reported = (0, 0)
        self._next_warning = 0.0
        self._thread = threading.Thread(target=self._run, name="record-span-export", daemon=True)
        self._thread.start()

    def __call__(self, span: RecordSpan) -> None:
        queued = self._queued
        if len(queued) >= MAX_QUEUED:
            self.dropped += 1
            return
        queued.append(span)
        if len(queued) == BATCH:
            self._wakeup.set()

    def force_flush(self, timeout_s: float = 10.0) -> bool:
        """Exports what is queued now; False if that took longer than `timeout_s`."""
        with self._flushes:
            self._flush_requested += 1
            request = self._flush_requested
        self._wakeup.set()
        with self._flushes:
            return self._flushes.wait_for(lambda: self._flush_done >= request, timeout_s)

    def shutdown(self) -> None:
        """Exports what is queued, then stops the thread and the exporter."""
        self._stopping = True
        self._wakeup.set()
        self._thread.join(STOP_TIMEOUT_S)
        self._exporter.shutdown()
        self._report(force=True)

    def _run(self) -> None:
        while True:
            interval_over = not self._wakeup.wait(SEND_INTERVAL_S)
            self._wakeup.clear()
            stopping, flush_request = self._stopping, self._flush_requested
            # Full batches go as they fill; the rest waits for the interval, a flush or the stop:
            # every request costs the exporter (and the backend) about as much as hundreds of spans.
            everything = interval_over or stopping or flush_request != self._flush_done
            while len(self._queued) >= BATCH or (everything and self._queued):
                batch = [self._queued.popleft() for _ in range(min(BATCH, len(self._queued)))]
                try:
                    sent = self._send(batch)
                except Exception:  # an exporter bug must not end the export thread
                    log.exception("exporting %d record spans failed", len(batch))
                    sent = False
                if not sent:
                    self.failed += len(batch)
            with self._flushes:
                self._flush_done = flush_request
                self._flushes.notify_all()
            self._report()
            if stopping:
                return

    def _report(self, force: bool = False) -> None:
        if (self.dropped, self.failed) != self._reported and (force or time.monotonic() >= self._next_warning):
            dropped, failed = self.dropped - self._reported[0], self.failed - self._reported[1]
            self._reported = (self.dropped, self.failed)
            self._next_warning = time.monotonic() + WARNING_INTERVAL_S
            log.warning(
                "record spans lost: %d dropped (the exporter cannot keep up: lower the sampling ratio), "
                "%d not accepted by the exporter",
                dropped,
                failed,
            )


def exporting_now(exporter: SpanExporter, resource: Resource, scope_name: str) -> RecordSpanSink:
    """A sink that exports each span as it ends, as the SDK's `SimpleSpanProcessor` does (tests)."""
    scope = InstrumentationScope(scope_name)

    def export(span: RecordSpan) -> None:
        exporter.export([readable_span(span, resource, scope)])

    return export


def readable_span(span: RecordSpan, resource: Resource, scope: InstrumentationScope) -> ReadableSpan:
    return ReadableSpan(
        span.name,
        span.context,
        span.parent,
        resource,
        span.all_attributes(),
        [Event(name, dict(attributes), timestamp) for name, timestamp, attributes in span.events],
        list(span.links),
        span.kind,
        status=span.status,
        start_time=span.start_ns,
        end_time=span.end_ns,
        instrumentation_scope=scope,
    )
