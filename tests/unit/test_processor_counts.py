"""What processors count (`ctx.count`) lands in the worker's counters, per processor, and in its metrics."""

from __future__ import annotations

from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from runtime.config.telemetry import TelemetryConfig
from runtime.counters import Counters
from runtime.task.context import TaskContext
from runtime.telemetry import Telemetry
from tests.unit.test_telemetry import metric_points


def test_counts_are_kept_per_processor_and_reported_as_a_metric() -> None:
    counters = Counters()
    for processor, partition in (("totals", 0), ("totals", 1), ("sessions", 0)):
        context = TaskContext("app", processor, partition, {}, frozenset(), {}, {}, None, {}, counters)
        context.count("late_records")
        context.count("late_records", 2)
    TaskContext("app", "sessions", 1, {}, frozenset(), {}, {}, None, {}, counters).count("merges", 5)
    assert counters.by_processor == {"totals": {"late_records": 6}, "sessions": {"late_records": 3, "merges": 5}}
    assert counters.snapshot()["by_processor"] == counters.by_processor

    reader = InMemoryMetricReader()
    telemetry = Telemetry(TelemetryConfig(), "app", metric_reader=reader)
    try:
        telemetry.metrics.register_counters(counters)
        telemetry.metrics.register_counters(Counters(by_processor={"totals": {"late_records": 1}}))  # another worker
        points = metric_points(reader)["kafka_actor.processor.count"]
    finally:
        telemetry.shutdown()
    counted = [
        (attributes["kafka_actor.processor"], attributes["kafka_actor.counter"], value) for attributes, value in points
    ]
    assert sorted(counted) == [
        ("sessions", "late_records", 3),
        ("sessions", "merges", 5),
        ("totals", "late_records", 7),
    ]
