"""Context managers that make a span current for a block and end it after: a record's span, an SDK
span a processor opens below it, and a context attached for a batch.

Each is a small class with `__slots__` rather than the SDK's generator-based context managers, as
one is entered per sampled record.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from contextvars import Token
from types import TracebackType
from typing import Final

from opentelemetry import baggage, trace
from opentelemetry import context as context_api
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from runtime.telemetry.record_span import RecordSpan, qualified_name
from runtime.telemetry.trace_headers import TRACEPARENT, Fields

ERROR_TYPE: Final = "error.type"
BAGGAGE_PROPAGATOR: Final = W3CBaggagePropagator()
NO_PARENT: Final = Context()
NO_FIELDS: Final[Fields] = []


class ProcessScope(AbstractContextManager[RecordSpan]):
    """A record's span, current for the block (with the record's baggage), ended after it."""

    __slots__ = ("_parent", "_propagate_unsampled", "_token", "span")

    def __init__(self, span: RecordSpan, parent: Context, propagate_unsampled: bool = True):
        self.span = span
        self._parent = parent
        self._propagate_unsampled = propagate_unsampled
        self._token: Token[Context] | None = None

    def __enter__(self) -> RecordSpan:
        self._token = context_api.attach(trace.set_span_in_context(self.span, self._parent))
        return self.span

    @property
    def fields(self) -> Fields:
        """The headers that carry this span's context (and the record's baggage) on to its outputs;
        an unsampled context only when it is propagated."""
        span_context = self.span.context
        if not span_context.is_valid:
            return NO_FIELDS
        fields: Fields = []
        if self._propagate_unsampled or span_context.trace_flags.sampled:
            ids = (span_context.trace_id, span_context.span_id, span_context.trace_flags)
            fields.append((TRACEPARENT, b"00-%032x-%016x-%02x" % ids))
            if span_context.trace_state:
                fields.append(("tracestate", span_context.trace_state.to_header().encode("latin-1")))
        if self._parent is not NO_PARENT and baggage.get_all(self._parent):
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
        token, self._token = self._token, None
        end_span(self.span, token, exc)


class ActiveSpan(AbstractContextManager[Span | None]):
    """An SDK span, child of the current one, current for the block; cheaper than the SDK's generator-based one."""

    __slots__ = ("_attributes", "_name", "_span", "_token", "_tracer")

    def __init__(self, tracer: trace.Tracer, name: str, attributes: Mapping[str, AttributeValue] | None):
        self._tracer = tracer
        self._name = name
        self._attributes = attributes
        self._span: Span = trace.INVALID_SPAN
        self._token: Token[Context] | None = None

    def __enter__(self) -> Span:
        span = self._span = self._tracer.start_span(self._name, None, SpanKind.INTERNAL, self._attributes)
        self._token = context_api.attach(trace.set_span_in_context(span))
        return span

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        token, self._token = self._token, None
        end_span(self._span, token, exc)


def end_span(span: Span, token: Token[Context] | None, exc: BaseException | None) -> None:
    """Ends a span that was current: an exception escaping its block is recorded and sets the status
    to ERROR (not cancellation: the task stopping is no error), and the context before it is back."""
    try:
        if isinstance(exc, Exception):
            span.record_exception(exc)
            span.set_attribute(ERROR_TYPE, qualified_name(type(exc)))
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
    finally:
        if token is not None:
            context_api.detach(token)
        span.end()


class Attached(AbstractContextManager[None]):
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
