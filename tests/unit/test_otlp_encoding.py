"""Record spans written as OTLP by the runtime's encoder parse to what the SDK's own encoder gives."""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, StatusCode, TraceFlags, TraceState
from opentelemetry.util.types import AttributeValue

from runtime.telemetry.otlp_encoding import MAX_CACHED, SpanRequestEncoder
from runtime.telemetry.record_span import RecordSpan
from runtime.telemetry.record_span_export import readable_span

RESOURCE = Resource.create({"service.name": "orders-app", "deployment.replicas": 3, "region.ids": ("eu", "us")})
SCOPE = "kafka_actor_runtime"


SHARED: dict[str, AttributeValue] = {
    "messaging.system": "kafka",
    "messaging.destination.name": "orders",
    "messaging.destination.partition.id": "3",
}


def record_span(
    offset: int,
    parent: SpanContext | None = None,
    shared: Mapping[str, AttributeValue] = SHARED,
    **attributes: AttributeValue,
) -> RecordSpan:
    sink: list[RecordSpan] = []
    state = TraceState([("vendor", "x1")]) if parent is not None else None
    context = SpanContext(0x1F2E3D4C5B6A79880011223344556677 + offset, 0xABCDEF0123456789 + offset, False,
                          TraceFlags(TraceFlags.SAMPLED), state)  # fmt: skip
    own: dict[str, AttributeValue] = {"messaging.kafka.offset": offset, **attributes}
    return RecordSpan("process orders", context, parent, own, sink.append, SpanKind.CONSUMER, shared)


def test_the_encoding_matches_the_sdk_encoder_message_for_message() -> None:
    remote_parent = SpanContext(0x1F2E3D4C5B6A79880011223344556677 + 1, 0x42, True, TraceFlags(TraceFlags.SAMPLED))
    spans = [
        record_span(0),
        record_span(1, remote_parent, SHARED, **{"messaging.kafka.message.key": "customer-7"}),
        record_span(2, None, ratio=0.25, retried=True, negative=-5, tags=["a", "b"], counts=[1, 2]),
        record_span(10**15),
        record_span(7, None, {}),
        record_span(8),
    ]
    spans[1].add_event("cache miss", {"cache.key": "c-7", "cache.size": 10}, timestamp=1_700_000_000_000_000_000)
    spans[1].add_link(SpanContext(0x99, 0x98, True, TraceFlags(TraceFlags.SAMPLED)), {"link.kind": "batch"})
    spans[2].record_exception(ValueError("bad amount"))
    spans[2].set_status(StatusCode.ERROR, "ValueError: bad amount")
    spans[3].set_status(StatusCode.OK)
    spans[5].set_attribute("messaging.destination.name", "orders-renamed")  # replaces a shared one, in its place
    for span in spans:
        span.end()

    ours = ExportTraceServiceRequest.FromString(SpanRequestEncoder(RESOURCE, SCOPE).encode(spans))
    scope = InstrumentationScope(SCOPE)
    theirs = encode_spans([readable_span(span, RESOURCE, scope) for span in spans])
    assert ours == theirs
    assert len(ours.resource_spans[0].scope_spans[0].spans) == 6
    assert [kv.value.string_value for kv in ours.resource_spans[0].scope_spans[0].spans[5].attributes][:2] == [
        "kafka",
        "orders-renamed",
    ]


def test_values_encoded_once_stay_right_past_the_cache_limit() -> None:
    encoder = SpanRequestEncoder(RESOURCE, SCOPE)
    spans = [
        record_span(n, None, {**SHARED, "messaging.destination.partition.id": str(n)}, **{f"tag.{n}": f"customer-{n}"})
        for n in range(MAX_CACHED + 100)
    ]
    for span in spans:
        span.end()
    batches = [spans[start : start + 512] for start in range(0, len(spans), 512)]
    scope = InstrumentationScope(SCOPE)
    for batch in batches + batches:  # the second time from the cache, as far as it reaches
        ours = ExportTraceServiceRequest.FromString(encoder.encode(batch))
        assert ours == encode_spans([readable_span(span, RESOURCE, scope) for span in batch])


def test_an_attribute_otlp_cannot_carry_is_left_out_as_the_sdk_encoder_does() -> None:
    beyond_int64: dict[str, AttributeValue] = {"uint64": 2**63 + 5, "big": 2**70, "below": -(2**64), "ids": [1, 2**70]}
    spans = [record_span(0, None, SHARED, text="a\ud800", **beyond_int64), record_span(1)]  # the second one is fine
    spans[0].add_event("retry", {"attempt": 2**64, "reason": "timeout"})
    spans[0].add_link(SpanContext(0x99, 0x98, True, TraceFlags(TraceFlags.SAMPLED)), {"none": None, "kind": "batch"})
    for span in spans:
        span.end()

    ours = ExportTraceServiceRequest.FromString(SpanRequestEncoder(RESOURCE, SCOPE).encode(spans))
    theirs = encode_spans([readable_span(span, RESOURCE, InstrumentationScope(SCOPE)) for span in spans])
    assert ours == theirs
    first = ours.resource_spans[0].scope_spans[0].spans[0]
    assert [kv.key for kv in first.attributes] == [*SHARED, "messaging.kafka.offset"]
    assert [kv.key for kv in first.events[0].attributes] == ["reason"]
    assert [(kv.key, kv.value.WhichOneof("value")) for kv in first.links[0].attributes] == [
        ("none", None),  # an empty value, as the SDK writes None
        ("kind", "string_value"),
    ]
