"""The background export of record spans: full batches go as they fill, the rest on the interval or
a flush, and spans beyond the queue's bound are dropped and counted, never waited for."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanContext

from runtime.telemetry import record_span_export
from runtime.telemetry.record_span import RecordSpan
from runtime.telemetry.record_span_export import BATCH, RecordSpanExport


class BatchSizes(SpanExporter):
    """Keeps the size of each export call."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.sizes.append(len(spans))
        return SpanExportResult.SUCCESS


def end_spans(export: RecordSpanExport, count: int) -> None:
    for index in range(count):
        RecordSpan("process orders", SpanContext(index + 1, index + 1, False), None, {}, export).end()


def wait_for(condition: Callable[[], object], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_full_batches_go_as_they_fill_and_the_rest_on_a_flush(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record_span_export, "SEND_INTERVAL_S", 60.0)
    exporter = BatchSizes()
    export = RecordSpanExport(exporter, Resource({}), "test")
    try:
        end_spans(export, BATCH + 88)
        wait_for(lambda: exporter.sizes)
        time.sleep(0.3)
        assert exporter.sizes == [BATCH]  # the 88 wait: a request per few spans costs as much as a full one
        assert export.force_flush()
        assert exporter.sizes == [BATCH, 88]
    finally:
        export.shutdown()


def test_spans_beyond_the_bound_are_dropped_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record_span_export, "MAX_QUEUED", 100)
    monkeypatch.setattr(record_span_export, "BATCH", 1_000)  # no batch fills: nothing leaves before the flush
    exporter = BatchSizes()
    export = RecordSpanExport(exporter, Resource({}), "test")
    try:
        end_spans(export, 130)
        assert export.dropped == 30
        assert export.force_flush()
        assert exporter.sizes == [100]
    finally:
        export.shutdown()
