"""Traces and metrics of real workers against a real broker, read from in-memory exporters."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest
from aiokafka import AIOKafkaProducer
from opentelemetry import trace
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from runtime.config import AppConfig, parse_app
from runtime.telemetry import Telemetry
from runtime.telemetry.tracing import current_fields, extract
from runtime.worker.worker import Worker
from tests.conftest import TopicNamer
from tests.support.kafka_helpers import create_topic, produce, read_topic
from tests.support.running import numbered

pytestmark = pytest.mark.anyio

TRACED_RECORDS = 20
UNTRACED_RECORDS = 30


def echo_app(app_id: str, source: str, sink: str, bootstrap: str, **extra: Any) -> AppConfig:
    params = {"output": sink, **extra.pop("params", {})}
    return parse_app(
        {
            "app_id": app_id,
            "kafka": {"bootstrap_servers": bootstrap},
            "topics": {source: {"key_serde": "str"}, sink: {"key_serde": "str"}},
            "processors": [
                {"name": "echo", "class": "tests.support.apps:Echo", "inputs": [source], "outputs": [sink],
                 "params": params}
            ],
            "commit_interval_ms": 200,
            # Only records that arrive with a sampled context are traced: parent-based sampling.
            "telemetry": {"sampling_ratio": 0.0},
            **extra,
        }
    )  # fmt: skip


async def produce_traced(bootstrap: str, topic: str, provider: TracerProvider) -> None:
    """TRACED_RECORDS records, each sent inside a PRODUCER span whose context is in its headers."""
    tracer = provider.get_tracer("upstream")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for key, value in numbered(TRACED_RECORDS):
            with tracer.start_as_current_span(f"send {topic}", kind=SpanKind.PRODUCER):
                await producer.send_and_wait(topic, value, key=key, headers=current_fields())
    finally:
        await producer.stop()


async def produce_traced_and_untraced(bootstrap: str, topic: str) -> InMemorySpanExporter:
    """A new topic with TRACED_RECORDS records sent in PRODUCER spans (in the exporter returned),
    then UNTRACED_RECORDS without context."""
    await create_topic(bootstrap, topic)
    upstream = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(upstream))
    await produce_traced(bootstrap, topic, provider)
    await produce(bootstrap, topic, numbered(UNTRACED_RECORDS, start=TRACED_RECORDS))
    provider.shutdown()
    return upstream


def by_trace(spans: tuple[ReadableSpan, ...], name: str) -> dict[int, ReadableSpan]:
    found: dict[int, ReadableSpan] = {}
    for span in spans:
        if span.name == name:
            assert span.context is not None
            assert span.context.trace_id not in found, f"two {name} spans in one trace"
            found[span.context.trace_id] = span
    return found


async def run_traced(
    config: AppConfig, bootstrap: str, reader: InMemoryMetricReader | None = None
) -> InMemorySpanExporter:
    spans = InMemorySpanExporter()
    telemetry = Telemetry(config.telemetry, config.app_id, span_exporter=spans, metric_reader=reader)
    worker = Worker(config, bootstrap, until_caught_up=True, telemetry=telemetry)
    await asyncio.wait_for(worker.run(), 120)
    return spans


async def test_a_record_is_one_trace_from_its_producer_through_two_apps(
    kafka_bootstrap: str, topic_name: TopicNamer
) -> None:
    source, middle, sink = topic_name("in"), topic_name("middle"), topic_name("out")
    upstream = await produce_traced_and_untraced(kafka_bootstrap, source)

    first = await run_traced(echo_app(topic_name("a"), source, middle, kafka_bootstrap), kafka_bootstrap)
    second = await run_traced(echo_app(topic_name("b"), middle, sink, kafka_bootstrap), kafka_bootstrap)

    sent = by_trace(upstream.get_finished_spans(), f"send {source}")
    in_first = by_trace(first.get_finished_spans(), f"process {source}")
    in_second = by_trace(second.get_finished_spans(), f"process {middle}")
    assert len(sent) == TRACED_RECORDS
    # The records without context were not sampled (ratio 0), in either app.
    assert set(in_first) == set(sent) and set(in_second) == set(sent)
    for trace_id, producer_span in sent.items():
        a, b = in_first[trace_id], in_second[trace_id]
        assert producer_span.context is not None and a.context is not None
        assert a.parent is not None and a.parent.span_id == producer_span.context.span_id and a.parent.is_remote
        assert b.parent is not None and b.parent.span_id == a.context.span_id
        assert a.kind is SpanKind.CONSUMER and b.kind is SpanKind.CONSUMER
        assert a.status.status_code is StatusCode.UNSET
        attributes: dict[str, Any] = dict(a.attributes or {})
        assert attributes["messaging.system"] == "kafka"
        assert attributes["messaging.destination.name"] == source
        assert attributes["messaging.destination.partition.id"] == "0"
        assert attributes["messaging.consumer.group.name"] == topic_name("a")
        assert attributes["messaging.kafka.message.key"].startswith("k")
        assert 0 <= attributes["messaging.kafka.offset"] < TRACED_RECORDS

    # Every output carries a context; those of unsampled records are flagged unsampled, and the
    # second app passes them on as they came.
    contexts = {}
    for record in await read_topic(kafka_bootstrap, middle):
        span_context = trace.get_current_span(extract(record.headers)).get_span_context()
        assert span_context.is_valid
        n = msgpack.unpackb(record.value)["value"]["n"]
        assert span_context.trace_flags.sampled == (n < TRACED_RECORDS)
        contexts[n] = span_context
    assert len(contexts) == TRACED_RECORDS + UNTRACED_RECORDS
    passed_on = {}
    for record in await read_topic(kafka_bootstrap, sink):
        n = msgpack.unpackb(record.value)["value"]["value"]["n"]
        passed_on[n] = trace.get_current_span(extract(record.headers)).get_span_context()
    assert len(passed_on) == TRACED_RECORDS + UNTRACED_RECORDS
    for n in range(TRACED_RECORDS, TRACED_RECORDS + UNTRACED_RECORDS):
        assert passed_on[n] == contexts[n]


async def test_without_propagate_unsampled_only_sampled_records_pass_a_context_on(
    kafka_bootstrap: str, topic_name: TopicNamer
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    upstream = await produce_traced_and_untraced(kafka_bootstrap, source)
    telemetry = {"sampling_ratio": 0.0, "propagate_unsampled": False}
    spans = await run_traced(echo_app(topic_name("a"), source, sink, kafka_bootstrap, telemetry=telemetry),
                             kafka_bootstrap)  # fmt: skip

    processed = by_trace(spans.get_finished_spans(), f"process {source}")
    assert set(processed) == set(by_trace(upstream.get_finished_spans(), f"send {source}"))
    outputs = {
        msgpack.unpackb(record.value)["value"]["n"]: record for record in await read_topic(kafka_bootstrap, sink)
    }
    assert len(outputs) == TRACED_RECORDS + UNTRACED_RECORDS
    for n, record in outputs.items():
        names = [name for name, _ in record.headers]
        if n < TRACED_RECORDS:  # sampled upstream: the trace goes on through this app's span
            span_context = trace.get_current_span(extract(record.headers)).get_span_context()
            assert span_context.trace_flags.sampled and span_context.trace_id in processed
        else:
            assert "traceparent" not in names, f"record {n} carries {record.headers}"


def point_values(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, Any], Any]]]:
    data = reader.get_metrics_data()
    values: dict[str, list[tuple[dict[str, Any], Any]]] = {}
    if data is None:
        return values
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                values[metric.name] = [
                    (dict(point.attributes or {}), point.value if isinstance(point, NumberDataPoint) else point)
                    for point in metric.data.data_points
                ]
    return values


def every_series(app_id: str) -> dict[str, Any]:
    """The attributes of every metric series of a worker, the only one (index 0) of its app."""
    return {"kafka_actor.app_id": app_id, "kafka_actor.worker": 0}


def single(values: dict[str, list[tuple[dict[str, Any], Any]]], name: str) -> Any:
    points = values.get(name, [])
    assert len(points) <= 1, points
    return points[0][1] if points else None


async def test_with_metrics_only_the_headers_a_processor_copies_pass_on_as_they_came(
    kafka_bootstrap: str, topic_name: TopicNamer
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source)
    headers = [("app", b"x"), ("traceparent", b"00-" + b"a" * 32 + b"-" + b"b" * 16 + b"-01"), ("baggage", b"k=v")]
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(source, msgpack.packb({"n": 1}), key=b"k", headers=headers)
    finally:
        await producer.stop()
    config = echo_app(topic_name("app"), source, sink, kafka_bootstrap, params={"keep_headers": True})
    telemetry = Telemetry(config.telemetry, config.app_id, metric_reader=InMemoryMetricReader())
    assert telemetry.metrics.enabled and not telemetry.tracer.enabled
    await asyncio.wait_for(Worker(config, kafka_bootstrap, until_caught_up=True, telemetry=telemetry).run(), 120)
    (output,) = await read_topic(kafka_bootstrap, sink)
    assert list(output.headers) == headers  # untraced, as with telemetry off: the runtime leaves them alone


async def test_metrics_follow_the_records_lag_and_a_paused_partition(
    kafka_bootstrap: str, topic_name: TopicNamer
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    total = 200
    await create_topic(kafka_bootstrap, source)
    await produce(kafka_bootstrap, source, numbered(total))
    config = echo_app(topic_name("app"), source, sink, kafka_bootstrap, params={"sleep_ms": 20},
                      queue={"pause_at": 50, "resume_at": 10})  # fmt: skip
    reader = InMemoryMetricReader()
    worker = Worker(config, kafka_bootstrap, telemetry=Telemetry(config.telemetry, config.app_id,
                    metric_reader=reader))  # fmt: skip
    running = asyncio.create_task(worker.run())
    lags: list[int] = []
    paused: list[int] = []
    processed: list[int] = []
    try:
        deadline = time.monotonic() + 90
        while not lags or lags[-1] > 0 or processed[-1] < total:
            assert time.monotonic() < deadline, f"processed {processed[-1:]}, lag {lags[-1:]}"
            assert not running.done()
            await asyncio.sleep(0.3)
            values = point_values(reader)
            lag = values.get("kafka_actor.consumer.lag", [])
            if lag:
                ((attributes, value),) = lag
                assert attributes["messaging.destination.name"] == source
                assert attributes["messaging.destination.partition.id"] == "0"
                lags.append(value)
            paused.append(single(values, "kafka_actor.partitions.paused") or 0)
            processed.append(single(values, "kafka_actor.records.processed") or 0)
        consumed = single(values, "kafka_actor.records.consumed")
        produced = single(values, "kafka_actor.records.produced")
        durations = single(values, "kafka_actor.process.duration")
        depth = values["kafka_actor.task.queue.depth"]
    finally:
        worker.stop()
        await asyncio.wait_for(running, 60)

    assert lags[0] > 100 and lags[-1] == 0 and sorted(lags, reverse=True) == lags, lags
    assert 1 in paused and paused[-1] == 0, paused
    assert consumed >= total and produced >= total
    assert durations.count == total and durations.sum >= total * 20 * 0.9  # each sleeps 20 ms
    assert depth == [({**every_series(config.app_id), "kafka_actor.task": "echo[0]"}, 0)]


async def test_restores_and_transactions_have_spans_and_metrics(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source)
    await produce(kafka_bootstrap, source, numbered(300))
    app = {
        "app_id": topic_name("app"),
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "topics": {source: {"key_serde": "str"}, sink: {"key_serde": "str"}},
        "processors": [
            {"name": "count", "class": "tests.support.apps:CountPerKey", "inputs": [source], "outputs": [sink],
             "params": {"output": sink}, "stores": {"counts": {"backend": "memory"}}}
        ],
        "guarantee": "exactly_once",
        "state_dir": str(tmp_path / "state"),
    }  # fmt: skip
    await asyncio.wait_for(Worker(parse_app(app), kafka_bootstrap, until_caught_up=True).run(), 120)
    await produce(kafka_bootstrap, source, numbered(50, start=300))
    # One changelog record per key and commit: at least one per key (numbered() has 97 keys).
    logged = len(await read_topic(kafka_bootstrap, parse_app(app).changelog_topic("counts")))
    assert 97 <= logged <= 300

    # A memory store starts empty: the second run restores it from its changelog, then commits.
    reader = InMemoryMetricReader()
    config = parse_app(app)
    spans = (await run_traced(config, kafka_bootstrap, reader)).get_finished_spans()

    (restore,) = [span for span in spans if span.name == "restore"]
    changelog = config.changelog_topic("counts")
    attributes = dict(restore.attributes or {})
    assert attributes["kafka_actor.store"] == "counts"
    assert attributes["messaging.destination.name"] == changelog
    assert attributes["kafka_actor.restore.records"] == logged
    commits = [span for span in spans if span.name == "commit transaction"]
    assert commits and all(dict(span.attributes or {})["kafka_actor.tasks"] == ("count[0]",) for span in commits)
    assert all(span.status.status_code is StatusCode.UNSET for span in commits)

    values = point_values(reader)
    assert values["kafka_actor.restore.records.done"] == [
        ({"messaging.system": "kafka", "messaging.destination.name": changelog,
          "messaging.destination.partition.id": "0", "messaging.consumer.group.name": config.app_id,
          **every_series(config.app_id)}, logged)
    ]  # fmt: skip
    assert [value for _, value in values["kafka_actor.restore.records.remaining"]] == [0]
    assert single(values, "kafka_actor.restore.records") == logged
    assert single(values, "kafka_actor.records.processed") == 50
    ((transactional, durations),) = values["kafka_actor.commit.duration"]
    assert transactional == {**every_series(config.app_id), "kafka_actor.transactional": True}
    assert durations.count == len(commits)
