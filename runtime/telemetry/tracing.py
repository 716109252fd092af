"""Per-record spans: continue the trace a record carries in its headers, and carry it on to outputs.

`RecordTracer` (the disabled variant) does nothing, and says so with `enabled = False`: the engine
checks that once per batch and then runs its untraced loop, so telemetry off costs one attribute
read per batch. `OtelRecordTracer` is the real one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from contextvars import Token
from types import TracebackType
from typing import Final

from opentelemetry import baggage, trace
from opentelemetry import context as context_api
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

HeaderList = Sequence[tuple[str, bytes]]
# Same shape as runtime.task_context.PendingOutput: (topic, key, value, headers), encoded.
PendingOutput = tuple[str, bytes | None, bytes | None, HeaderList]

# Messaging semantic conventions, as in opentelemetry-semantic-conventions 0.66b2.
MESSAGING_SYSTEM: Final = "messaging.system"
MESSAGING_OPERATION_NAME: Final = "messaging.operation.name"
MESSAGING_OPERATION_TYPE: Final = "messaging.operation.type"
MESSAGING_DESTINATION_NAME: Final = "messaging.destination.name"
MESSAGING_DESTINATION_PARTITION_ID: Final = "messaging.destination.partition.id"
MESSAGING_CONSUMER_GROUP_NAME: Final = "messaging.consumer.group.name"
MESSAGING_KAFKA_OFFSET: Final = "messaging.kafka.offset"
MESSAGING_KAFKA_MESSAGE_KEY: Final = "messaging.kafka.message.key"
ERROR_TYPE: Final = "error.type"

INSTRUMENTATION_NAME: Final = "kafka_actor_runtime"

# W3C Trace Context and Baggage, whatever OTEL_PROPAGATORS says: the headers are a wire format
# other apps in the chain read, not a per-process choice.
BAGGAGE_PROPAGATOR: Final = W3CBaggagePropagator()
PROPAGATOR: Final = CompositePropagator([TraceContextTextMapPropagator(), BAGGAGE_PROPAGATOR])
PROPAGATION_HEADERS: Final = frozenset(PROPAGATOR.fields)

_NOTHING: Final[AbstractContextManager[None]] = nullcontext()


class RecordTracer:
    """Tracing switched off: every method is a no-op, and `enabled` tells the engine to skip the calls."""

    enabled: bool = False

    def start_process_span(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        headers: HeaderList,
        group: str | None = None,
        outputs: list[PendingOutput] | None = None,
    ) -> AbstractContextManager[Span | None]:
        return _NOTHING

    def span(
        self, name: str, attributes: Mapping[str, AttributeValue] | None = None
    ) -> AbstractContextManager[Span | None]:
        return _NOTHING

    def inject(self, headers: HeaderList = ()) -> list[tuple[str, bytes]]:
        return list(headers)

    def inject_outputs(self, outputs: list[PendingOutput], start: int = 0) -> None:
        return None


class OtelRecordTracer(RecordTracer):
    """Spans through an OpenTelemetry tracer, one CONSUMER span per record."""

    enabled = True

    def __init__(self, tracer: trace.Tracer, group: str | None = None):
        self._tracer = tracer
        self._group = group
        self._base_attributes: dict[tuple[str, int, str | None], dict[str, AttributeValue]] = {}

    def start_process_span(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        headers: HeaderList,
        group: str | None = None,
        outputs: list[PendingOutput] | None = None,
    ) -> AbstractContextManager[Span | None]:
        """A span around one record's processing, current while it runs (user spans nest in it).

        Its parent is the context in the record's `traceparent` header (a new trace without one);
        the record's baggage becomes current too. An exception escaping the block is recorded and
        sets the status to ERROR. Given `outputs` (the task's pending list), the outputs appended
        inside the block get this span's context in their headers when the block succeeds.
        """
        parent = extract(headers)
        attributes = dict(self._attributes(topic, partition, group or self._group))
        attributes[MESSAGING_KAFKA_OFFSET] = offset
        if key is not None:
            try:  # noqa: SIM105 (per record: try/except is cheaper than suppress)
                attributes[MESSAGING_KAFKA_MESSAGE_KEY] = key.decode()
            except UnicodeDecodeError:
                pass  # the conventions want no attribute for a key without a canonical string form
        return _ActiveSpan(self._tracer, f"process {topic}", parent, SpanKind.CONSUMER, attributes, outputs)

    def span(
        self, name: str, attributes: Mapping[str, AttributeValue] | None = None
    ) -> AbstractContextManager[Span | None]:
        """An INTERNAL span for runtime work (restore, commit, transaction, global-store bootstrap)."""
        return _ActiveSpan(self._tracer, name, None, SpanKind.INTERNAL, attributes, None)

    def inject(self, headers: HeaderList = ()) -> list[tuple[str, bytes]]:
        """`headers` with the current trace context (traceparent, tracestate, baggage) in place of any they had."""
        fields = current_fields()
        return with_fields(headers, fields) if fields else list(headers)

    def inject_outputs(self, outputs: list[PendingOutput], start: int = 0) -> None:
        """Give the current trace context to `outputs[start:]`, computing the headers once for all."""
        if len(outputs) > start:
            _write_fields(outputs, start, current_fields())

    def _attributes(self, topic: str, partition: int, group: str | None) -> dict[str, AttributeValue]:
        cache_key = (topic, partition, group)
        base = self._base_attributes.get(cache_key)
        if base is None:
            base = {
                MESSAGING_SYSTEM: "kafka",
                MESSAGING_OPERATION_NAME: "process",
                MESSAGING_OPERATION_TYPE: "process",
                MESSAGING_DESTINATION_NAME: topic,
                MESSAGING_DESTINATION_PARTITION_ID: str(partition),
            }
            if group is not None:
                base[MESSAGING_CONSUMER_GROUP_NAME] = group
            self._base_attributes[cache_key] = base
        return base


class _ActiveSpan(AbstractContextManager[Span | None]):
    """Starts a span on entry, current for the block, and ends it; cheaper than the SDK's generator-based one.

    `parent` None means the context current on entry.
    """

    __slots__ = ("_attributes", "_kind", "_name", "_outputs", "_parent", "_span", "_start", "_token", "_tracer")

    def __init__(
        self,
        tracer: trace.Tracer,
        name: str,
        parent: Context | None,
        kind: SpanKind,
        attributes: Mapping[str, AttributeValue] | None,
        outputs: list[PendingOutput] | None,
    ):
        self._tracer = tracer
        self._name = name
        self._parent = parent
        self._kind = kind
        self._attributes = attributes
        self._outputs = outputs
        self._start = 0
        self._span: Span = trace.INVALID_SPAN
        self._token: Token[Context] | None = None

    def __enter__(self) -> Span:
        parent = self._parent if self._parent is not None else context_api.get_current()
        span = self._span = self._tracer.start_span(self._name, parent, self._kind, self._attributes)
        self._token = context_api.attach(trace.set_span_in_context(span, parent))
        if self._outputs is not None:
            self._start = len(self._outputs)
        return span

    def _fields(self, span: Span) -> list[tuple[str, bytes]]:
        """What `current_fields()` would give inside the block, without reading the context back."""
        span_context = span.get_span_context()
        if not span_context.is_valid:
            return current_fields()
        fields = [
            (
                "traceparent",
                f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-{span_context.trace_flags:02x}".encode(),
            )
        ]
        if span_context.trace_state:
            fields.append(("tracestate", span_context.trace_state.to_header().encode("latin-1")))
        if self._parent is not None and baggage.get_all(self._parent):
            carrier: dict[str, str] = {}
            BAGGAGE_PROPAGATOR.inject(carrier, self._parent)
            fields.extend((name, value.encode("latin-1")) for name, value in carrier.items())
        return fields

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        span = self._span
        try:
            if exc is None:
                if self._outputs is not None and len(self._outputs) > self._start:
                    _write_fields(self._outputs, self._start, self._fields(span))
            elif isinstance(exc, Exception):  # not cancellation: the task stopping is no error
                span.record_exception(exc)
                span.set_attribute(ERROR_TYPE, _qualified_name(type(exc)))
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        finally:
            if self._token is not None:
                context_api.detach(self._token)
                self._token = None
            span.end()


def extract(headers: HeaderList) -> Context:
    """The trace context and baggage in Kafka record headers; an empty context (a new trace) when none."""
    carrier: dict[str, str] = {}
    for name, value in headers:
        if name in PROPAGATION_HEADERS and value is not None:
            carrier[name] = value.decode("latin-1")
    if not carrier:
        return Context()
    return PROPAGATOR.extract(carrier, context=Context())


def current_fields() -> list[tuple[str, bytes]]:
    """The current trace context and baggage as Kafka headers (empty outside any span and baggage)."""
    carrier: dict[str, str] = {}
    PROPAGATOR.inject(carrier)
    return [(name, value.encode("latin-1")) for name, value in carrier.items()]


def _write_fields(outputs: list[PendingOutput], start: int, fields: list[tuple[str, bytes]]) -> None:
    if fields:
        for index in range(start, len(outputs)):
            topic, key, value, headers = outputs[index]
            outputs[index] = (topic, key, value, with_fields(headers, fields))


def with_fields(headers: HeaderList, fields: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """`headers` without propagation headers (a processor may copy its input's), plus `fields`."""
    if not headers:
        return list(fields)
    merged = [header for header in headers if header[0] not in PROPAGATION_HEADERS]
    merged.extend(fields)
    return merged


def _qualified_name(cls: type) -> str:
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
