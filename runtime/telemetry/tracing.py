"""Per-record spans: continue the trace a record carries in its headers, and carry it on to outputs.

`RecordTracer` (the disabled variant) does nothing, and says so with `enabled = False`: the engine
checks that once per batch and then runs its untraced loop, so telemetry off costs one attribute
read per batch. `OtelRecordTracer` is the real one.

A full SDK span costs tens of microseconds even when the sampler drops it, so the engine first asks
`dropped_fields`, cheaply, whether the record's span would be dropped: a record with no trace context
whose new trace the sampler drops, or one whose parent was not sampled. Such a record skips the SDK
and its outputs get an unsampled context, as the SDK would give them: a new trace id, or the
parent's context as it came. While it is processed, the current span is a non-recording one shared
by the batch (`batch_context`), so spans a processor opens below it are dropped too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from contextvars import Token
from random import getrandbits
from types import TracebackType
from typing import Final

from opentelemetry import baggage, trace
from opentelemetry import context as context_api
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import Decision, ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags
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
_NO_PARENT: Final = Context()
TRACEPARENT: Final = "traceparent"
BAGGAGE: Final = "baggage"


class RecordTracer:
    """Tracing switched off: every method is a no-op, and `enabled` tells the engine to skip the calls."""

    enabled: bool = False

    def batch_context(self) -> AbstractContextManager[None]:
        """Entered around a batch's per-record spans."""
        return _NOTHING

    def dropped_fields(self, topic: str, partition: int, headers: HeaderList) -> list[tuple[str, bytes]] | None:
        """The propagation headers for the outputs of a record whose span would be dropped (to be given
        them with `write_fields`), or None: start its span."""
        return None

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


class RecordIds(RandomIdGenerator):
    """The provider's id generator: the trace id a pre-check sampled is the one the SDK's span then gets,
    so the SDK's sampler reaches the same decision on it."""

    reserved: int | None = None

    def generate_trace_id(self) -> int:
        reserved = self.reserved
        if reserved is None:
            return super().generate_trace_id()
        self.reserved = None
        return reserved


class OtelRecordTracer(RecordTracer):
    """Spans through an OpenTelemetry tracer, one CONSUMER span per record.

    Given the provider's `sampler` and `ids`, records whose span would be dropped skip the SDK (see
    the module's docstring). An unsampled parent is taken as final only under a parent-based sampler.
    `ratio`, the sampler's ratio for new traces when it is a `ParentBased(TraceIdRatioBased(ratio))`,
    lets the check apply that rule itself instead of calling the sampler.
    """

    enabled = True

    def __init__(
        self,
        tracer: trace.Tracer,
        group: str | None = None,
        sampler: Sampler | None = None,
        ids: RecordIds | None = None,
        ratio: float | None = None,
    ):
        self._tracer = tracer
        self._group = group
        self._sampler = sampler if ids is not None else None
        self._ids = ids
        self._parent_decides = isinstance(sampler, ParentBased)
        self._bound = None if ratio is None else TraceIdRatioBased.get_bound_for_rate(ratio)
        shared = SpanContext(getrandbits(128) or 1, getrandbits(64) or 1, is_remote=False)
        self._dropped_context = trace.set_span_in_context(NonRecordingSpan(shared), _NO_PARENT)
        self._base_attributes: dict[tuple[str, int, str | None], dict[str, AttributeValue]] = {}
        self._names: dict[str, str] = {}

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
        return _ActiveSpan(self._tracer, self._name(topic), parent, SpanKind.CONSUMER, attributes, outputs)

    def batch_context(self) -> AbstractContextManager[None]:
        """Makes the shared non-recording span current, for the records that skip the SDK."""
        return _Attached(self._dropped_context) if self._sampler is not None else _NOTHING

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
            write_fields(outputs, start, current_fields())

    def dropped_fields(self, topic: str, partition: int, headers: HeaderList) -> list[tuple[str, bytes]] | None:
        """For a record without trace context: the sampler's decision on a new trace id (reserved for
        the SDK's span when sampled, so the SDK's sampler decides the same); for one whose parent is
        unsampled, that parent's context as it came. A record with baggage takes the full path: its
        baggage must be current while it is processed."""
        if self._ids is None or self._sampler is None:
            return None
        propagation = [header for header in headers if header[0] in PROPAGATION_HEADERS] if headers else None
        if not propagation:
            trace_id = getrandbits(128) or 1
            if self._bound is not None:
                sampled = trace_id & TraceIdRatioBased.TRACE_ID_LIMIT < self._bound
            else:
                attributes = self._attributes(topic, partition, self._group)
                result = self._sampler.should_sample(
                    _NO_PARENT, trace_id, self._name(topic), SpanKind.CONSUMER, attributes
                )
                sampled = result.decision is not Decision.DROP
            if sampled:
                self._ids.reserved = trace_id
                return None
            return [(TRACEPARENT, b"00-%032x-%016x-00" % (trace_id, getrandbits(64) or 1))]
        if not self._parent_decides:
            return None
        traceparent = None
        for header_name, value in propagation:
            if header_name == BAGGAGE:
                return None
            if header_name == TRACEPARENT:
                traceparent = value
        return propagation if _is_unsampled_parent(traceparent) else None

    def _name(self, topic: str) -> str:
        name = self._names.get(topic)
        if name is None:
            name = self._names[topic] = f"process {topic}"
        return name

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
                TRACEPARENT,
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
                    write_fields(self._outputs, self._start, self._fields(span))
            elif isinstance(exc, Exception):  # not cancellation: the task stopping is no error
                span.record_exception(exc)
                span.set_attribute(ERROR_TYPE, _qualified_name(type(exc)))
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        finally:
            if self._token is not None:
                context_api.detach(self._token)
                self._token = None
            span.end()


class _Attached(AbstractContextManager[None]):
    """`context` is the current one for the block."""

    __slots__ = ("_context", "_token")

    def __init__(self, context: Context):
        self._context = context
        self._token: Token[Context] | None = None

    def __enter__(self) -> None:
        self._token = context_api.attach(self._context)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._token is not None:
            context_api.detach(self._token)
            self._token = None


def _is_unsampled_parent(traceparent: bytes | None) -> bool:
    """A valid version-00 `traceparent` whose sampled flag is off."""
    if traceparent is None or len(traceparent) != 55 or not traceparent.startswith(b"00-"):
        return False
    try:
        trace_id = int(traceparent[3:35], 16)
        span_id = int(traceparent[36:52], 16)
        flags = int(traceparent[53:55], 16)
    except ValueError:
        return False
    return not flags & TraceFlags.SAMPLED and trace_id != 0 and span_id != 0


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


def write_fields(outputs: list[PendingOutput], start: int, fields: list[tuple[str, bytes]]) -> None:
    """Give `outputs[start:]` the propagation headers `fields` in place of any they had."""
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
