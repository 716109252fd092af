"""Per-record spans: continue the trace a record carries in its headers, and carry it on to outputs.

`RecordTracer` (the disabled variant) does nothing, and says so with `enabled = False`: the engine
checks that once per batch and then runs its untraced loop, so telemetry off costs one attribute
read per batch. `OtelRecordTracer` is the real one.

Most records are not sampled, so the engine first asks `decide`, for a whole batch at once, which
records' spans would be dropped: a record with no trace context whose new trace the sampler drops,
or one whose parent was not sampled. Such a record gets no span object at all; its outputs get an
unsampled context, as the SDK would give them: a new trace id, or the parent's context as it came.
While it is processed, the current span is a non-recording one shared by the batch
(`batch_context`), so spans a processor opens below it are dropped too. A sampled record gets a
`RecordSpan` (see there for why not the SDK's span).

With telemetry off a record takes about 10 µs here, so the 99% of records a 1% ratio drops must
cost well under a microsecond each. New traces are therefore decided per batch: random ids from
`os.urandom`, as hex digits. The low 64 bits are what `TraceIdRatioBased` decides on, so comparing
their digits with the ratio's bound (as hex) is the sampler's own decision, and the same id then
becomes the span's (or the unsampled `traceparent`, built for the whole batch by C-level calls).
"""

from __future__ import annotations

import re
from binascii import hexlify
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from operator import attrgetter
from os import urandom
from random import getrandbits
from typing import Any, Final, cast

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.trace.sampling import Decision, ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from runtime.telemetry.record_span import RecordSpan, RecordSpanSink
from runtime.telemetry.span_scopes import BAGGAGE_PROPAGATOR, NO_FIELDS, NO_PARENT, ActiveSpan, Attached, ProcessScope
from runtime.telemetry.trace_headers import TRACEPARENT, UNTRACED, TraceDecision

HeaderList = Sequence[tuple[str, bytes]]

# Messaging semantic conventions, as in opentelemetry-semantic-conventions 0.66b2.
MESSAGING_SYSTEM: Final = "messaging.system"
MESSAGING_OPERATION_NAME: Final = "messaging.operation.name"
MESSAGING_OPERATION_TYPE: Final = "messaging.operation.type"
MESSAGING_DESTINATION_NAME: Final = "messaging.destination.name"
MESSAGING_DESTINATION_PARTITION_ID: Final = "messaging.destination.partition.id"
MESSAGING_CONSUMER_GROUP_NAME: Final = "messaging.consumer.group.name"
MESSAGING_KAFKA_OFFSET: Final = "messaging.kafka.offset"
MESSAGING_KAFKA_MESSAGE_KEY: Final = "messaging.kafka.message.key"

INSTRUMENTATION_NAME: Final = "kafka_actor_runtime"

# W3C Trace Context and Baggage, whatever OTEL_PROPAGATORS says: the headers are a wire format
# other apps in the chain read, not a per-process choice.
PROPAGATOR: Final = CompositePropagator([TraceContextTextMapPropagator(), BAGGAGE_PROPAGATOR])
PROPAGATION_HEADERS: Final = frozenset(PROPAGATOR.fields)

_NOTHING: Final[AbstractContextManager[None]] = nullcontext()
BAGGAGE: Final = "baggage"
_SAMPLED: Final = TraceFlags(TraceFlags.SAMPLED)
_UNSAMPLED: Final = TraceFlags(TraceFlags.DEFAULT)
_LOW_STRIDE: Final = 17  # a low half's 16 hex digits and the "|" after it
_HEADERS: Final = attrgetter("headers")


class RecordTracer:
    """Tracing switched off: every method is a no-op, and `enabled` tells the engine to skip the calls."""

    enabled: bool = False

    def batch_context(self) -> AbstractContextManager[None]:
        """Entered around a batch's per-record spans."""
        return _NOTHING

    def decide(self, records: Sequence[Any]) -> list[TraceDecision]:
        """For each record (aiokafka's): its outputs' context when its span is dropped (bytes or a
        list; `UNTRACED` here), else what `start_process_span` takes as `decision`."""
        return [UNTRACED] * len(records)

    def start_process_span(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        headers: HeaderList,
        group: str | None = None,
        decision: TraceDecision = None,
    ) -> ProcessScope:
        """A span around one record's processing: see `OtelRecordTracer`."""
        return ProcessScope(RecordSpan("", trace.INVALID_SPAN_CONTEXT, None, {}, None), NO_PARENT)

    def span(
        self, name: str, attributes: Mapping[str, AttributeValue] | None = None
    ) -> AbstractContextManager[Span | None]:
        return _NOTHING

    def inject(self, headers: HeaderList = ()) -> list[tuple[str, bytes]]:
        return list(headers)


class OtelRecordTracer(RecordTracer):
    """One CONSUMER span per record, handed to `sink` when it ends; runtime spans through `tracer`.

    `ratio`, the ratio of the provider's `sampler` when that is `ParentBased(TraceIdRatioBased(ratio))`,
    lets the tracer apply that rule itself; otherwise (a sampler from OTEL_TRACES_SAMPLER) every
    record asks the sampler. Without `propagate_unsampled`, the outputs of a dropped record carry no
    trace context at all (68 bytes less each), and an app reading them decides on its own.
    """

    enabled = True

    def __init__(
        self,
        tracer: trace.Tracer,
        sink: RecordSpanSink,
        group: str | None = None,
        sampler: Sampler | None = None,
        ratio: float | None = None,
        propagate_unsampled: bool = True,
    ):
        self._tracer = tracer
        self._propagate_unsampled = propagate_unsampled
        self._sink = sink
        self._group = group
        self._sampler = sampler
        self._parent_decides = isinstance(sampler, ParentBased)
        self._bound = None if ratio is None else TraceIdRatioBased.get_bound_for_rate(ratio)
        # The bound as 16 hex digits, compared with the ids' low halves as drawn; b"g" is above them all.
        self._bound_digits = None
        if self._bound is not None:
            self._bound_digits = b"%016x" % self._bound if self._bound <= TraceIdRatioBased.TRACE_ID_LIMIT else b"g"
        # Maps a low half's first digit to b"1" when it is at most the bound's first digit, else b"0".
        first = (self._bound_digits or b"0")[0]
        self._candidate_digits = bytes(0x31 if digit <= first else 0x30 for digit in range(256))
        shared = SpanContext(getrandbits(128) or 1, getrandbits(64) or 1, is_remote=False)
        self._dropped_context = trace.set_span_in_context(NonRecordingSpan(shared), NO_PARENT)
        self._base_attributes: dict[tuple[str, int, str | None], dict[str, AttributeValue]] = {}
        self._names: dict[str, str] = {}

    def batch_context(self) -> AbstractContextManager[None]:
        """Makes the shared non-recording span current, for the records that get no span of their own."""
        return Attached(self._dropped_context)

    def decide(self, records: Sequence[Any]) -> list[TraceDecision]:
        """For each record: its outputs' context when its span is dropped, else what
        `start_process_span` takes as `decision`.

        Dropped: a record without trace context whose new trace the sampler drops, or one whose parent
        was not sampled (its context passes on as it came). A record with baggage is never dropped
        here: its baggage must be current while it is processed.
        """
        if self._bound_digits is None:
            return [self._decide(raw) for raw in records]
        decisions = self._new_traces(len(records))
        if any(map(_HEADERS, records)):  # the common case has none: every record starts a trace
            for index, raw in enumerate(records):
                propagation = _propagation(raw.headers)
                if propagation:
                    decisions[index] = self._dropped_child(propagation)
        return decisions

    def _decide(self, raw: Any) -> TraceDecision:
        """One record's decision by the configured sampler (not the parent-based ratio)."""
        propagation = _propagation(raw.headers)
        if propagation:
            return self._dropped_child(propagation)
        trace_id = getrandbits(128) or 1
        attributes = self._attributes(raw.topic, raw.partition, self._group)
        if self._sampled(NO_PARENT, trace_id, self._name(raw.topic), attributes):
            return trace_id
        if not self._propagate_unsampled:
            return NO_FIELDS
        return b"00-%032x-%016x-00" % (trace_id, getrandbits(64) or 1)

    def _dropped_child(self, propagation: list[tuple[str, bytes]]) -> TraceDecision:
        if not self._parent_decides:
            return None
        traceparent = None
        for header_name, value in propagation:
            if header_name == BAGGAGE:
                return None
            if header_name == TRACEPARENT:
                traceparent = value
        if not _is_unsampled_parent(traceparent):
            return None
        if not self._propagate_unsampled:
            return NO_FIELDS
        return traceparent if len(propagation) == 1 else propagation

    def _new_traces(self, count: int) -> list[TraceDecision]:
        """Decisions for `count` new traces under the ratio: each a random trace id, sampled when its
        low half is below the bound. The high half and the unsampled span id are shared by the call;
        the low halves make the ids unique.

        Drawn per batch and built by C-level calls (hexlify, replace, split), not a Python loop: a
        dropped record costs one bytes object, which the collector does not track. Only a low
        half whose first digit is at most the bound's can be below it; C-level scans find those, so
        at a small ratio Python looks at a few records of a batch.
        """
        assert self._bound_digits is not None
        if not count:
            return []
        lows = hexlify(urandom(8 * count), b"|", 8)  # the low halves, 16 hex digits each, "|" between
        high = hexlify(urandom(8))
        decisions: list[TraceDecision]
        if self._propagate_unsampled:
            span_id = hexlify(urandom(8))
            while span_id == b"0" * 16:  # an all-zero span id is invalid
                span_id = hexlify(urandom(8))
            # "|" around every low half becomes a traceparent's tail and the next one's head: the whole
            # batch is written by one replace, and split, with the bare tail before the first and the
            # bare head after the last left out.
            framed = b"".join((b"|", lows, b"|")).replace(b"|", b"-" + span_id + b"-00|00-" + high)
            decisions = cast(list[TraceDecision], framed.split(b"|")[1:-1])
        else:
            decisions = [NO_FIELDS] * count
        bound = self._bound_digits
        candidates = lows[::_LOW_STRIDE].translate(self._candidate_digits)  # b"1": the first digit may be
        index = candidates.find(b"1")
        while index >= 0:
            low = lows[_LOW_STRIDE * index : _LOW_STRIDE * index + 16]
            if low < bound:
                decisions[index] = int(high + low, 16)
            index = candidates.find(b"1", index + 1)
        return decisions

    def start_process_span(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        headers: HeaderList,
        group: str | None = None,
        decision: TraceDecision = None,
    ) -> ProcessScope:
        """A span around one record's processing, current while it runs (user spans nest in it).

        Its parent is the context in the record's `traceparent` header (a new trace without one);
        the record's baggage becomes current too. An exception escaping the block is recorded and
        sets the status to ERROR. The scope's `fields` are what the record's outputs carry on.
        `decision`, from `decide`: the new trace's id when it already sampled one.
        """
        parent = extract(headers) if headers else NO_PARENT
        shared = self._attributes(topic, partition, group or self._group)
        attributes: dict[str, AttributeValue] = {MESSAGING_KAFKA_OFFSET: offset}
        if key is not None:
            try:  # noqa: SIM105 (try/except is cheaper than suppress)
                attributes[MESSAGING_KAFKA_MESSAGE_KEY] = key.decode()
            except UnicodeDecodeError:
                pass  # the conventions want no attribute for a key without a canonical string form
        name = self._name(topic)
        parent_span = trace.get_current_span(parent).get_span_context() if headers else trace.INVALID_SPAN_CONTEXT
        trace_state = parent_span.trace_state if parent_span.is_valid else None
        if decision.__class__ is int:
            trace_id, sampled = decision, True
        else:
            trace_id = parent_span.trace_id if parent_span.is_valid else getrandbits(128) or 1
            if self._bound is None:
                sampled = self._sampled(parent, trace_id, name, {**shared, **attributes})
            elif parent_span.is_valid:
                sampled = parent_span.trace_flags.sampled
            else:
                sampled = trace_id & TraceIdRatioBased.TRACE_ID_LIMIT < self._bound
        context = SpanContext(trace_id, getrandbits(64) or 1, False, _SAMPLED if sampled else _UNSAMPLED, trace_state)
        span = RecordSpan(
            name,
            context,
            parent_span if parent_span.is_valid else None,
            attributes,
            self._sink if sampled else None,
            SpanKind.CONSUMER,
            shared,
        )
        return ProcessScope(span, parent, self._propagate_unsampled)

    def _sampled(self, parent: Context, trace_id: int, name: str, attributes: Mapping[str, AttributeValue]) -> bool:
        assert self._sampler is not None
        result = self._sampler.should_sample(parent, trace_id, name, SpanKind.CONSUMER, attributes)
        return result.decision is not Decision.DROP

    def span(
        self, name: str, attributes: Mapping[str, AttributeValue] | None = None
    ) -> AbstractContextManager[Span | None]:
        """An INTERNAL span for runtime work (restore, commit, transaction, global-store bootstrap)."""
        return ActiveSpan(self._tracer, name, attributes)

    def inject(self, headers: HeaderList = ()) -> list[tuple[str, bytes]]:
        """`headers` with the current trace context (traceparent, tracestate, baggage) in place of any they had."""
        fields = current_fields()
        return with_fields(headers, fields) if fields else list(headers)

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


def _propagation(headers: HeaderList | None) -> list[tuple[str, bytes]]:
    """The trace context and baggage headers among a record's headers."""
    return [header for header in headers if header[0] in PROPAGATION_HEADERS] if headers else []


def _is_unsampled_parent(traceparent: bytes | None) -> bool:
    """A valid version-00 `traceparent` whose sampled flag is off."""
    return traceparent is not None and _UNSAMPLED_TRACEPARENT.fullmatch(traceparent) is not None


# Version 00, trace id and parent id in lowercase hex and not all zeros, flags with the sampled bit off.
_UNSAMPLED_TRACEPARENT: Final = re.compile(rb"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f][02468ace]")


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


def with_fields(headers: HeaderList, fields: HeaderList) -> list[tuple[str, bytes]]:
    """`headers` without propagation headers (a processor may copy its input's), plus `fields`."""
    if not headers:
        return list(fields)
    merged = [header for header in headers if header[0] not in PROPAGATION_HEADERS]
    merged.extend(fields)
    return merged
