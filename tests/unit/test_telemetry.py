"""Telemetry without a broker: in-memory exporters stand in for the collector."""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry import baggage, trace
from opentelemetry import context as context_api
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from opentelemetry.trace import SpanKind, StatusCode
from pydantic import ValidationError

from runtime.config.telemetry import TelemetryConfig
from runtime.counters import Counters
from runtime.task.context import TaskContext
from runtime.telemetry import RecordTracer, Telemetry, setup
from runtime.telemetry.setup import _http_endpoint
from runtime.telemetry.tracing import extract
from stores.serdes import resolve_serde
from tests.support.otlp_receiver import OtlpReceiver

TRACED = TelemetryConfig.model_validate({"traces": {"exporter": "none"}})


@pytest.fixture
def spans() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def telemetry(spans: InMemorySpanExporter) -> Iterator[Telemetry]:
    telemetry = Telemetry(TRACED, "orders-app", span_exporter=spans)
    yield telemetry
    telemetry.shutdown()


def upstream_headers(telemetry: Telemetry, **bag: str) -> tuple[list[tuple[str, bytes]], trace.SpanContext]:
    """Headers an upstream producer wrote: its span's context, and baggage."""
    assert telemetry.tracer_provider is not None
    producer = telemetry.tracer_provider.get_tracer("upstream")
    ctx = context_api.get_current()
    for name, value in bag.items():
        ctx = baggage.set_baggage(name, value, ctx)
    token = context_api.attach(ctx)
    try:
        with producer.start_as_current_span("send orders", kind=SpanKind.PRODUCER) as span:
            headers = telemetry.tracer.inject([("app", b"upstream")])
            return headers, span.get_span_context()
    finally:
        context_api.detach(token)


def finished(spans: InMemorySpanExporter, name: str) -> ReadableSpan:
    matching = [span for span in spans.get_finished_spans() if span.name == name]
    assert len(matching) == 1, [span.name for span in spans.get_finished_spans()]
    return matching[0]


def test_process_span_continues_the_trace_in_the_record_headers(
    telemetry: Telemetry, spans: InMemorySpanExporter
) -> None:
    headers, upstream = upstream_headers(telemetry)
    assert dict(headers)["app"] == b"upstream"

    with telemetry.tracer.start_process_span("orders", 3, 42, b"customer-7", headers):
        pass

    span = finished(spans, "process orders")
    assert span.kind is SpanKind.CONSUMER
    assert span.context is not None and span.parent is not None
    assert span.context.trace_id == upstream.trace_id
    assert span.parent.span_id == upstream.span_id
    assert span.parent.is_remote
    assert dict(span.attributes or {}) == {
        "messaging.system": "kafka",
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.destination.name": "orders",
        "messaging.destination.partition.id": "3",
        "messaging.consumer.group.name": "orders-app",
        "messaging.kafka.offset": 42,
        "messaging.kafka.message.key": "customer-7",
    }
    assert span.resource.attributes["service.name"] == "orders-app"


def test_a_record_without_context_starts_a_trace_and_binary_keys_are_left_out(
    telemetry: Telemetry, spans: InMemorySpanExporter
) -> None:
    assert telemetry.tracer_provider is not None
    # A span current in the task must not become the record's parent.
    unrelated = telemetry.tracer_provider.get_tracer("test").start_as_current_span("unrelated")
    with unrelated, telemetry.tracer.start_process_span("orders", 0, 1, b"\xff\xfe", [], group="other"):
        pass
    span = finished(spans, "process orders")
    assert span.parent is None
    attributes = span.attributes or {}
    assert "messaging.kafka.message.key" not in attributes
    assert attributes["messaging.consumer.group.name"] == "other"


def test_user_spans_nest_inside_the_process_span(telemetry: Telemetry, spans: InMemorySpanExporter) -> None:
    assert telemetry.tracer_provider is not None
    user_tracer = telemetry.tracer_provider.get_tracer("user-code")
    with telemetry.tracer.start_process_span("orders", 0, 1, None, []) as process_span:
        assert process_span is not None
        assert trace.get_current_span() is process_span
        with user_tracer.start_as_current_span("lookup customer"):
            pass
    assert trace.get_current_span() is trace.INVALID_SPAN  # detached again

    process = finished(spans, "process orders")
    user = finished(spans, "lookup customer")
    assert process.context is not None and user.parent is not None and user.context is not None
    assert user.parent.span_id == process.context.span_id
    assert user.context.trace_id == process.context.trace_id


def test_an_exception_is_recorded_and_the_status_is_error(telemetry: Telemetry, spans: InMemorySpanExporter) -> None:
    with pytest.raises(ValueError, match="bad amount"), telemetry.tracer.start_process_span("orders", 0, 1, None, []):
        raise ValueError("bad amount")
    span = finished(spans, "process orders")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "ValueError: bad amount"
    assert (span.attributes or {})["error.type"] == "ValueError"
    [event] = span.events
    assert event.name == "exception"
    assert (event.attributes or {})["exception.message"] == "bad amount"


def test_cancellation_is_not_an_error(telemetry: Telemetry, spans: InMemorySpanExporter) -> None:
    with pytest.raises(asyncio.CancelledError), telemetry.tracer.start_process_span("orders", 0, 1, None, []):
        raise asyncio.CancelledError
    assert finished(spans, "process orders").status.status_code is StatusCode.UNSET


def test_inject_gives_outputs_the_process_span_context(telemetry: Telemetry, spans: InMemorySpanExporter) -> None:
    headers, _ = upstream_headers(telemetry)
    with telemetry.tracer.start_process_span("orders", 0, 1, None, headers):
        # A processor that copies its input headers must not pass the upstream context on.
        out = telemetry.tracer.inject(headers)
    span = finished(spans, "process orders")
    assert span.context is not None
    assert [name for name, _ in out].count("traceparent") == 1
    assert dict(out)["app"] == b"upstream"
    parent = trace.get_current_span(extract(out)).get_span_context()
    assert parent.trace_id == span.context.trace_id
    assert parent.span_id == span.context.span_id
    assert telemetry.tracer.inject([("a", b"1")]) == [("a", b"1")]  # nothing current: unchanged


def test_the_scope_fields_carry_the_span_context_on(telemetry: Telemetry, spans: InMemorySpanExporter) -> None:
    scope = telemetry.tracer.start_process_span("orders", 0, 1, None, [])
    with scope:
        fields = scope.fields
    span = finished(spans, "process orders")
    assert span.context is not None
    parent = trace.get_current_span(extract(fields)).get_span_context()
    assert (parent.trace_id, parent.span_id) == (span.context.trace_id, span.context.span_id)
    assert parent.trace_flags.sampled


def test_baggage_travels_from_input_to_process_and_outputs(telemetry: Telemetry) -> None:
    headers, _ = upstream_headers(telemetry, tenant="acme")
    assert b"tenant=acme" in dict(headers)["baggage"]
    scope = telemetry.tracer.start_process_span("orders", 0, 1, None, headers)
    with scope:
        assert baggage.get_baggage("tenant") == "acme"
        out = telemetry.tracer.inject()
    assert baggage.get_baggage("tenant") is None
    assert dict(out)["baggage"] == b"tenant=acme"
    assert dict(scope.fields)["baggage"] == b"tenant=acme"


def test_process_span_stays_current_across_awaits(telemetry: Telemetry, spans: InMemorySpanExporter) -> None:
    assert telemetry.tracer_provider is not None
    user_tracer = telemetry.tracer_provider.get_tracer("user-code")

    async def process() -> None:
        await asyncio.sleep(0)
        with user_tracer.start_as_current_span("async work"):
            await asyncio.sleep(0)

    async def batch() -> None:
        for offset in range(2):
            with telemetry.tracer.start_process_span("orders", 0, offset, None, []):
                await process()

    asyncio.run(batch())
    processes = [span for span in spans.get_finished_spans() if span.name == "process orders"]
    works = [span for span in spans.get_finished_spans() if span.name == "async work"]
    assert len(processes) == len(works) == 2
    for process_span, work in zip(processes, works, strict=True):
        assert process_span.context is not None and work.parent is not None
        assert work.parent.span_id == process_span.context.span_id
        assert process_span.parent is None  # each record its own trace, not nested in the previous one


def test_runtime_spans_nest_and_record_errors(telemetry: Telemetry, spans: InMemorySpanExporter) -> None:
    commit_span = telemetry.tracer.span("commit", {"kafka_actor.transactional": True})
    restore_span = telemetry.tracer.span("restore payments-changelog", {"messaging.destination.partition.id": "2"})
    with commit_span, pytest.raises(OSError), restore_span:
        raise OSError("disk full")
    commit = finished(spans, "commit")
    restore = finished(spans, "restore payments-changelog")
    assert commit.kind is SpanKind.INTERNAL
    assert (commit.attributes or {})["kafka_actor.transactional"] is True
    assert commit.context is not None and restore.parent is not None
    assert restore.parent.span_id == commit.context.span_id
    assert restore.status.status_code is StatusCode.ERROR
    assert commit.status.status_code is StatusCode.UNSET


def test_sampling_ratio_zero_records_no_new_trace_but_follows_a_sampled_parent(spans: InMemorySpanExporter) -> None:
    sampled = Telemetry(TRACED, "upstream", span_exporter=InMemorySpanExporter())
    headers, _ = upstream_headers(sampled)
    sampled.shutdown()

    config = TelemetryConfig.model_validate({"sampling_ratio": 0.0})
    telemetry = Telemetry(config, "app", span_exporter=spans)
    try:
        with telemetry.tracer.start_process_span("orders", 0, 1, None, []) as span:
            assert span is not None and not span.is_recording()
            # Not recorded, but still passed on (flagged unsampled) so the chain stays one trace.
            traceparent = dict(telemetry.tracer.inject())["traceparent"]
            assert int(traceparent[-2:], 16) & 1 == 0
        assert spans.get_finished_spans() == ()

        with telemetry.tracer.start_process_span("orders", 0, 2, None, headers):
            pass
        assert len(spans.get_finished_spans()) == 1
    finally:
        telemetry.shutdown()


def consumed(*headers: list[tuple[str, bytes]]) -> list[SimpleNamespace]:
    """Records as aiokafka gives them, as far as `decide` looks."""
    return [SimpleNamespace(topic="orders", partition=0, headers=record_headers) for record_headers in headers]


def test_dropped_records_get_no_span_and_pass_an_unsampled_context_on(spans: InMemorySpanExporter) -> None:
    config = TelemetryConfig.model_validate({"sampling_ratio": 0.0})
    telemetry = Telemetry(config, "app", span_exporter=spans)
    user_spans = InMemorySpanExporter()
    assert telemetry.tracer_provider is not None
    telemetry.tracer_provider.add_span_processor(SimpleSpanProcessor(user_spans))
    user_tracer = telemetry.tracer_provider.get_tracer("user")
    tracer = telemetry.tracer
    try:
        decisions = tracer.decide(consumed([("app", b"upstream")], []))
        with tracer.batch_context(), user_tracer.start_as_current_span("lookup") as user_span:
            assert not user_span.is_recording()  # below the batch's dropped span: dropped too
        assert all(isinstance(decision, bytes) for decision in decisions)  # the outputs' traceparent
        contexts = [
            trace.get_current_span(extract([("traceparent", decision)])).get_span_context()  # type: ignore[list-item]
            for decision in decisions
        ]
        assert all(context.is_valid and not context.trace_flags.sampled for context in contexts)
        assert contexts[0].trace_id != contexts[1].trace_id  # a trace of its own each, as the SDK would give

        # A record whose parent was not sampled passes that parent's context on as it came.
        traceparent = ("traceparent", b"00-" + b"a" * 32 + b"-" + b"b" * 16 + b"-00")
        unsampled = [traceparent, ("tracestate", b"k=v")]
        decisions = tracer.decide(consumed([traceparent, ("app", b"x")], [*unsampled, ("app", b"x")]))
        assert decisions == [traceparent[1], unsampled]
        # Sampled parents, baggage and malformed contexts take the full path.
        full = consumed(
            [("traceparent", b"00-" + b"a" * 32 + b"-" + b"b" * 16 + b"-01")],
            [*unsampled, ("baggage", b"tenant=acme")],
            [("traceparent", b"00-" + b"z" * 32 + b"-" + b"b" * 16 + b"-00")],
        )
        assert tracer.decide(full) == [None, None, None]
        assert spans.get_finished_spans() == () and user_spans.get_finished_spans() == ()
    finally:
        telemetry.shutdown()


def test_without_propagate_unsampled_a_dropped_record_passes_no_context_on(
    monkeypatch: pytest.MonkeyPatch, spans: InMemorySpanExporter
) -> None:
    config = TelemetryConfig.model_validate({"sampling_ratio": 0.01, "propagate_unsampled": False})
    telemetry = Telemetry(config, "app", span_exporter=spans)
    serdes = {"out": (resolve_serde("str"), resolve_serde("str"))}
    context = TaskContext("app", "echo", 0, {}, frozenset(["out"]), serdes, {})
    unsampled_parent = [("traceparent", b"00-" + b"a" * 32 + b"-" + b"b" * 16 + b"-00")]
    sampled_parent = [("traceparent", b"00-" + b"a" * 32 + b"-" + b"b" * 16 + b"-01")]
    try:
        decisions = telemetry.tracer.decide(consumed(*([] for _ in range(10_000)), unsampled_parent, sampled_parent))
        new, from_unsampled, from_sampled = decisions[:10_000], decisions[10_000], decisions[10_001]
        chosen = [decision for decision in new if isinstance(decision, int)]
        assert 60 < len(chosen) < 145  # new traces are still sampled at the ratio
        assert all(decision == [] for decision in new if not isinstance(decision, int))
        assert from_unsampled == [] and from_sampled is None  # a sampled parent is followed as before
        context.trace_fields = new[new.index([])]  # type: ignore[assignment]
        context.send("out", "dropped")
        scope = telemetry.tracer.start_process_span("orders", 0, 0, None, [], decision=chosen[0])
        with scope as span:
            fields = context.trace_fields = scope.fields
            context.send("out", "sampled")
        assert [output.headers for output in context.pending] == [[], fields]
        assert fields[0][1].endswith(b"-01") and span.get_span_context().trace_id == chosen[0]
    finally:
        telemetry.shutdown()
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")  # a sampler of the environment's: the same
    telemetry = Telemetry(TelemetryConfig(propagate_unsampled=False), "app", span_exporter=spans)
    try:
        assert telemetry.tracer.decide(consumed([], unsampled_parent)) == [[], None]
        # The span's own path (the sampler asked with the parent) passes only the record's baggage on.
        with_baggage = [*unsampled_parent, ("baggage", b"tenant=acme")]
        with telemetry.tracer.start_process_span("orders", 0, 1, None, with_baggage) as span:
            assert not span.is_recording()
        assert telemetry.tracer.start_process_span("orders", 0, 1, None, with_baggage).fields == [
            ("baggage", b"tenant=acme")
        ]
    finally:
        telemetry.shutdown()


@pytest.mark.parametrize(("ratio", "fewest", "most"), [(0.25, 2_200, 2_800), (0.01, 60, 145), (0.9, 8_800, 9_200)])
def test_the_ratio_samples_that_share_of_new_traces_with_the_trace_id_it_decided_on(
    spans: InMemorySpanExporter, ratio: float, fewest: int, most: int
) -> None:
    config = TelemetryConfig.model_validate({"sampling_ratio": ratio})
    telemetry = Telemetry(config, "app", span_exporter=spans)
    try:
        decisions = telemetry.tracer.decide(consumed(*([] for _ in range(10_000))))
        chosen = [decision for decision in decisions if isinstance(decision, int)]
        for offset, decision in enumerate(chosen):
            with telemetry.tracer.start_process_span("orders", 0, offset, None, [], decision=decision):
                pass
        sampled = spans.get_finished_spans()
        assert fewest < len(sampled) < most
        bound = TraceIdRatioBased.get_bound_for_rate(ratio)
        for span, decision in zip(sampled, chosen, strict=True):
            assert span.context is not None and span.context.trace_id == decision
            assert span.context.trace_id & TraceIdRatioBased.TRACE_ID_LIMIT < bound
        dropped = [decision for decision in decisions if isinstance(decision, bytes)]
        assert len(dropped) + len(chosen) == 10_000
        for traceparent in dropped:
            trace_id = trace.get_current_span(extract([("traceparent", traceparent)])).get_span_context().trace_id
            assert trace_id & TraceIdRatioBased.TRACE_ID_LIMIT >= bound  # the sampler's own decision
        assert len({traceparent[3:35] for traceparent in dropped}) == len(dropped)  # every trace id new
    finally:
        telemetry.shutdown()


def metric_points(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, Any], Any]]]:
    data = reader.get_metrics_data()
    assert data is not None
    points: dict[str, list[tuple[dict[str, Any], Any]]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points[metric.name] = [
                    (dict(point.attributes or {}), getattr(point, "value", point)) for point in metric.data.data_points
                ]
    return points


def test_metrics_read_counters_and_gauge_callbacks() -> None:
    reader = InMemoryMetricReader()
    telemetry = Telemetry(TelemetryConfig(), "app", worker=3, metric_reader=reader)
    every = {"kafka_actor.app_id": "app", "kafka_actor.worker": 3}  # the attributes of every series
    metrics = telemetry.metrics
    assert metrics.enabled and telemetry.tracer_provider is None and not telemetry.tracer.enabled
    counters = Counters()
    metrics.register_counters(counters)
    metrics.register_counters(Counters(consumed=5))  # a second worker with the same attributes: summed
    metrics.register_consumer_lag(lambda: {("orders", 0): 7, ("orders", 1): 0})
    metrics.register_queue_depth(lambda: {"enrich[0]": 12})
    metrics.register_paused_partitions(lambda: 2)
    metrics.register_restore(lambda: {("app-payments-changelog", 0): (300, 700)})
    unregister = metrics.register_global_store_offsets(lambda: {("rates", 0): (6, 10)})
    metrics.register_paused_partitions(lambda: 1 // 0)  # a broken callback costs only its own values

    counters.consumed += 10
    counters.processed += 9
    counters.dead_lettered += 1
    counters.aborted_transactions += 1
    metrics.record_processing(0.3, "enrich")
    metrics.record_commit(12.0, transactional=True)
    points = metric_points(reader)

    assert points["kafka_actor.records.consumed"] == [(every, 15)]
    assert points["kafka_actor.records.processed"] == [(every, 9)]
    assert points["kafka_actor.records.dead_lettered"] == [(every, 1)]
    assert points["kafka_actor.transactions.aborted"] == [(every, 1)]
    lag = {
        attributes["messaging.destination.partition.id"]: value
        for attributes, value in points["kafka_actor.consumer.lag"]
    }
    assert lag == {"0": 7, "1": 0}
    attributes, _ = points["kafka_actor.consumer.lag"][0]
    assert attributes["messaging.destination.name"] == "orders"
    assert attributes["messaging.consumer.group.name"] == "app"
    assert attributes.items() >= every.items()
    assert points["kafka_actor.task.queue.depth"] == [({**every, "kafka_actor.task": "enrich[0]"}, 12)]
    assert points["kafka_actor.partitions.paused"] == [(every, 2)]
    assert [value for _, value in points["kafka_actor.restore.records.done"]] == [300]
    assert [value for _, value in points["kafka_actor.restore.records.remaining"]] == [700]
    assert [value for _, value in points["kafka_actor.global_store.lag"]] == [4]
    assert [value for _, value in points["kafka_actor.global_store.position"]] == [6]
    assert [value for _, value in points["kafka_actor.global_store.end_offset"]] == [10]
    [(attributes, histogram)] = points["kafka_actor.process.duration"]
    assert attributes == {**every, "kafka_actor.processor": "enrich"}
    assert histogram.count == 1 and histogram.sum == pytest.approx(0.3)
    [(attributes, histogram)] = points["kafka_actor.commit.duration"]
    assert attributes == {**every, "kafka_actor.transactional": True} and histogram.count == 1

    counters.consumed += 1
    unregister()
    points = metric_points(reader)
    assert points["kafka_actor.records.consumed"] == [(every, 16)]
    assert points.get("kafka_actor.global_store.lag", []) == []
    telemetry.shutdown()


def test_none_creates_no_providers_and_a_disabled_tracer() -> None:
    telemetry = Telemetry(TelemetryConfig(), "app")
    assert not telemetry.enabled
    assert telemetry.tracer_provider is None and telemetry.meter_provider is None
    assert type(telemetry.tracer) is RecordTracer and not telemetry.tracer.enabled
    assert not telemetry.metrics.enabled
    # No span, and the outputs keep the headers the processor gives them (an empty tuple).
    assert telemetry.tracer.decide(consumed([("traceparent", b"junk")])) == [()]
    with telemetry.tracer.start_process_span("orders", 0, 1, None, [("traceparent", b"junk")]) as span:
        assert not span.is_recording() and not span.get_span_context().is_valid
    headers = [("a", b"1")]
    assert telemetry.tracer.inject(headers) == headers
    telemetry.metrics.register_counters(Counters())  # accepted, never read
    telemetry.metrics.record_processing(1.0, "p")
    telemetry.shutdown()


def test_console_exporters_and_service_name(monkeypatch: pytest.MonkeyPatch) -> None:
    # The SDK binds sys.stdout when it is imported, before any capture fixture: hand it a buffer.
    buffer = io.StringIO()
    monkeypatch.setattr(setup, "ConsoleSpanExporter", lambda: ConsoleSpanExporter(out=buffer))
    monkeypatch.setattr(setup, "ConsoleMetricExporter", lambda: ConsoleMetricExporter(out=buffer))
    config = TelemetryConfig.model_validate(
        {
            "service_name": "payments",
            "resource_attributes": {"deployment.environment.name": "test"},
            "traces": {"exporter": "console"},
            "metrics": {"exporter": "console", "export_interval_ms": 60000},
        }
    )
    telemetry = Telemetry(config, "app")
    telemetry.metrics.register_counters(Counters(consumed=1))
    with telemetry.tracer.start_process_span("orders", 0, 1, None, []):
        pass
    telemetry.shutdown()
    out = buffer.getvalue()
    assert '"name": "process orders"' in out
    assert '"service.name": "payments"' in out
    assert '"deployment.environment.name": "test"' in out
    assert '"name": "kafka_actor.records.consumed"' in out  # the final collection at shutdown

    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    spans = InMemorySpanExporter()
    telemetry = Telemetry(TelemetryConfig(), "app", span_exporter=spans)
    with telemetry.tracer.span("bootstrap"):
        pass
    assert finished(spans, "bootstrap").resource.attributes["service.name"] == "from-env"
    telemetry.shutdown()


def test_otlp_exporters_are_built_for_both_protocols(monkeypatch: pytest.MonkeyPatch) -> None:
    for protocol in ("http/protobuf", "grpc"):
        config = TelemetryConfig.model_validate(
            {"traces": {"exporter": "otlp", "protocol": protocol, "endpoint": "http://localhost:1"}}
        )
        Telemetry(config, "app").shutdown()  # nothing was sent: shutdown needs no collector
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(Exception, match="http/json"):
        Telemetry(TelemetryConfig.model_validate({"traces": {"exporter": "otlp"}}), "app")


def test_http_endpoints_get_the_signal_path() -> None:
    assert _http_endpoint(None, "/v1/traces") is None
    assert _http_endpoint("http://collector:4318", "/v1/traces") == "http://collector:4318/v1/traces"
    assert _http_endpoint("http://collector:4318/", "/v1/metrics") == "http://collector:4318/v1/metrics"
    assert _http_endpoint("https://gw/otlp/v1/traces", "/v1/traces") == "https://gw/otlp/v1/traces"


def test_config_rejects_unknown_fields_and_bad_values() -> None:
    with pytest.raises(ValidationError):
        TelemetryConfig.model_validate({"tracing": {}})
    with pytest.raises(ValidationError):
        TelemetryConfig.model_validate({"sampling_ratio": 1.5})
    with pytest.raises(ValidationError):
        TelemetryConfig.model_validate({"traces": {"exporter": "jaeger"}})
    with pytest.raises(ValidationError):
        TelemetryConfig.model_validate({"metrics": {"exporter": "prometheus", "port": 0}})
    assert not TelemetryConfig().enabled
    assert TelemetryConfig.model_validate({"metrics": {"exporter": "prometheus"}}).enabled


def test_prometheus_endpoint_serves_the_metrics() -> None:
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = TelemetryConfig.model_validate({"metrics": {"exporter": "prometheus", "host": "127.0.0.1", "port": port}})
    telemetry = Telemetry(config, "app", worker=2)
    try:
        telemetry.metrics.register_counters(Counters(consumed=3))
        telemetry.metrics.register_consumer_lag(lambda: {("orders", 1): 5})
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    finally:
        telemetry.shutdown()
    series = [line for line in text.splitlines() if line.startswith("kafka_actor_")]
    assert any(line.startswith("kafka_actor_records_consumed_total{") for line in series)
    assert any(line.startswith("kafka_actor_consumer_lag{") for line in series)
    assert any('messaging_destination_name="orders"' in line for line in series)
    assert all('kafka_actor_app_id="app"' in line and 'kafka_actor_worker="2"' in line for line in series), series
    assert "otel_scope" not in text


def test_send_gives_outputs_the_records_trace_fields_in_place_of_copied_ones() -> None:
    serdes = {"out": (resolve_serde("str"), resolve_serde("str"))}
    context = TaskContext("app", "echo", 0, {}, frozenset(["out"]), serdes, {})
    fields = [("traceparent", b"00-" + b"a" * 32 + b"-" + b"b" * 16 + b"-01")]
    context.send("out", "plain")
    context.trace_fields = fields
    context.send("out", "traced")
    stale = ("traceparent", b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01")  # copied from the input
    context.send("out", "copied", headers=[("app", b"x"), stale])
    context.trace_fields = fields[0][1]  # a dropped record's: its traceparent alone
    context.send("out", "dropped")
    context.send("out", "copied", headers=[("app", b"x"), stale])
    context.trace_fields = []  # a dropped record's when unsampled contexts are not propagated
    context.send("out", "copied", headers=[("app", b"x"), stale])
    assert [output.headers for output in context.pending] == [
        (),
        fields,
        [("app", b"x"), *fields],
        fields[0][1],
        [("app", b"x"), *fields],
        [("app", b"x")],
    ]


def test_record_spans_reach_an_otlp_http_endpoint_with_the_resource_and_scope() -> None:
    with OtlpReceiver(keep=True) as receiver:
        config = TelemetryConfig.model_validate(
            {"service_name": "orders-app", "traces": {"exporter": "otlp", "endpoint": receiver.endpoint}}
        )
        telemetry = Telemetry(config, "app")
        export = telemetry._record_span_export
        assert export is not None and export.encodes  # the runtime's encoder, through the exporter's client
        try:
            for offset in range(3):
                scope = telemetry.tracer.start_process_span("orders", 2, offset, b"customer-7", [])
                with contextlib.suppress(ValueError), scope:
                    if offset == 2:
                        raise ValueError("bad amount")
            with telemetry.tracer.span("commit offsets", {"kafka_actor.partitions": 1}):
                pass
            telemetry.force_flush()
        finally:
            telemetry.shutdown()
        received = [
            (resource_spans, scope_spans, span)
            for export in receiver.exports()
            for resource_spans in export.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
        ]
    names = sorted(span.name for _, _, span in received)
    assert names == ["commit offsets", "process orders", "process orders", "process orders"]
    for resource_spans, scope_spans, span in received:
        resource = {kv.key: kv.value.string_value for kv in resource_spans.resource.attributes}
        assert resource["service.name"] == "orders-app"
        assert scope_spans.scope.name == "kafka_actor_runtime"
        assert len(span.trace_id) == 16 and len(span.span_id) == 8
    records = sorted((span for _, _, span in received if span.name == "process orders"),
                     key=lambda span: span.start_time_unix_nano)  # fmt: skip
    offsets = [{kv.key: kv.value for kv in span.attributes}["messaging.kafka.offset"].int_value for span in records]
    assert offsets == [0, 1, 2]
    assert [span.status.code for span in records] == [0, 0, 2]  # UNSET, UNSET, ERROR
    assert records[2].events[0].name == "exception"


@pytest.mark.parametrize(("sampler", "sampled"), [("always_on", True), ("parentbased_always_off", False)])
def test_a_sampler_from_the_environment_decides_each_new_trace(
    monkeypatch: pytest.MonkeyPatch, spans: InMemorySpanExporter, sampler: str, sampled: bool
) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    telemetry = Telemetry(TelemetryConfig(), "app", span_exporter=spans)
    try:
        decisions = telemetry.tracer.decide(consumed([], []))
        if sampled:  # the trace ids the sampler was asked about become the spans'
            assert all(isinstance(decision, int) for decision in decisions) and decisions[0] != decisions[1]
            for offset, decision in enumerate(decisions):
                with telemetry.tracer.start_process_span("orders", 0, offset, None, [], decision=decision):
                    pass
            finished = spans.get_finished_spans()
            assert [span.context.trace_id for span in finished if span.context] == decisions
        else:  # dropped: a new unsampled context each, for the outputs
            contexts = [
                trace.get_current_span(extract([("traceparent", decision)])).get_span_context()  # type: ignore[list-item]
                for decision in decisions
            ]
            assert all(context.is_valid and not context.trace_flags.sampled for context in contexts)
            assert contexts[0].trace_id != contexts[1].trace_id
    finally:
        telemetry.shutdown()


@pytest.mark.parametrize(("ratio", "sampled"), [(0.0, 0), (1.0, 5_000)])
def test_ratios_zero_and_one_sample_none_and_all(ratio: float, sampled: int) -> None:
    config = TelemetryConfig.model_validate({"sampling_ratio": ratio})
    telemetry = Telemetry(config, "app", span_exporter=InMemorySpanExporter())
    try:
        decisions = telemetry.tracer.decide(consumed(*([] for _ in range(5_000))))
        trace_ids = [decision if isinstance(decision, int) else int(decision[3:35], 16) for decision in decisions]  # type: ignore[index,arg-type]
        assert sum(isinstance(decision, int) for decision in decisions) == sampled
        assert len(set(trace_ids)) == 5_000
    finally:
        telemetry.shutdown()
