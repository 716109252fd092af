"""Spans a real app exports over OTLP arrive in a real Jaeger v2 and can be queried there (make test-jaeger)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from runtime.telemetry.tracing import current_fields, extract
from tests.conftest import TopicNamer
from tests.support.jaeger_server import LocalJaeger
from tests.support.kafka_helpers import create_topic, read_topic
from tests.support.running import spawn_worker, write_app

pytestmark = [pytest.mark.anyio, pytest.mark.jaeger]


@pytest.fixture(scope="module")
def jaeger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalJaeger]:
    server = LocalJaeger(tmp_path_factory.mktemp("jaeger") / "jaeger.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def wait_for_trace(jaeger: LocalJaeger, trace_id: int, spans: int, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        found = jaeger.trace(trace_id)
        if found is not None and len(found["spans"]) >= spans:
            return found
        assert time.monotonic() < deadline, f"Jaeger has {found} for trace {trace_id:032x}"
        time.sleep(0.5)


async def test_a_records_trace_reaches_jaeger_across_the_producer_and_the_app(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, jaeger: LocalJaeger
) -> None:
    source, sink, app_id = topic_name("in"), topic_name("out"), topic_name("app")
    await create_topic(kafka_bootstrap, source)
    provider = TracerProvider(resource=Resource.create({"service.name": "upstream"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{jaeger.otlp_endpoint}/v1/traces")))
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        with provider.get_tracer("upstream").start_as_current_span(f"send {source}", kind=SpanKind.PRODUCER) as sent:
            await producer.send_and_wait(source, b"\x81\xa1n\x07", key=b"k7", headers=current_fields())  # {"n": 7}
    finally:
        await producer.stop()
    provider.shutdown()

    app = {
        "app_id": app_id,
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "topics": {source: {"key_serde": "str"}, sink: {"key_serde": "str"}},
        "processors": [
            {"name": "echo", "class": "tests.support.apps:Echo", "inputs": [source], "outputs": [sink],
             "params": {"output": sink}}
        ],
        "telemetry": {"sampling_ratio": 0.01, "traces": {"exporter": "otlp", "endpoint": jaeger.otlp_endpoint}},
    }  # fmt: skip
    worker = spawn_worker(write_app(tmp_path, app), "--until-caught-up", log=tmp_path / "worker.log")
    assert worker.wait(timeout=120) == 0, (tmp_path / "worker.log").read_text()

    trace_id = sent.get_span_context().trace_id
    found = wait_for_trace(jaeger, trace_id, spans=2)
    services = {key: process["serviceName"] for key, process in found["processes"].items()}
    spans = {span["operationName"]: span for span in found["spans"]}
    send, process = spans[f"send {source}"], spans[f"process {source}"]
    assert services[send["processID"]] == "upstream" and services[process["processID"]] == app_id
    assert process["references"] == [{"refType": "CHILD_OF", "traceID": f"{trace_id:032x}", "spanID": send["spanID"]}]
    tags = {tag["key"]: tag["value"] for tag in process["tags"]}
    assert tags["messaging.system"] == "kafka" and tags["messaging.destination.name"] == source
    assert tags["span.kind"] == "consumer"

    # The output carries the trace on: its parent is the app's span.
    (output,) = await read_topic(kafka_bootstrap, sink)
    parent = trace.get_current_span(extract(output.headers)).get_span_context()
    assert parent.trace_id == trace_id and f"{parent.span_id:016x}" == process["spanID"]
