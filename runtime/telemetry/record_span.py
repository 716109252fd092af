"""The span of one processed record: the OpenTelemetry `Span` API over plain fields.

The SDK's span validates and locks on every call and its export encodes each span through Python
protobuf objects: about 200 µs per span on a small machine, against the ~10 µs a record takes to
process. A record's span is made here instead, for a few microseconds, and handed whole to a
`RecordSpanSink` when it ends, which exports it away from the event loop (see `record_span_export`
and `otlp_encoding`). To the processor it is an ordinary span: current while `process()` runs,
the parent of the spans it opens, and open to `set_attribute`, `add_event` or `set_status`.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.util import types

log = logging.getLogger(__name__)

UNSET_STATUS: Final = Status(StatusCode.UNSET)
_NO_ATTRIBUTES: Mapping[str, types.AttributeValue] = MappingProxyType({})

RecordSpanSink = Callable[["RecordSpan"], None]
"""Takes a record's span when it ends."""

Event = tuple[str, int, Mapping[str, types.AttributeValue]]  # name, time (ns since the epoch), attributes


class RecordSpan(Span):
    """A CONSUMER span, recording until it ends; `recording=False` gives the unsampled kind, which
    keeps its context (passed on to outputs) and records nothing."""

    __slots__ = (
        "_recording",
        "_sink",
        "attributes",
        "context",
        "end_ns",
        "events",
        "kind",
        "links",
        "name",
        "parent",
        "shared",
        "start_ns",
        "status",
    )

    def __init__(
        self,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        attributes: dict[str, types.AttributeValue],
        sink: RecordSpanSink | None,
        kind: SpanKind = SpanKind.CONSUMER,
        shared: Mapping[str, types.AttributeValue] = _NO_ATTRIBUTES,
    ):
        """`attributes` are the span's own (and take those set on it); `shared` come before them and
        are the same mapping, never changed, for every span of a topic partition, so that it is
        neither copied per span nor encoded more than once."""
        self.name = name
        self.context = context
        self.parent = parent
        self.attributes = attributes
        self.shared = shared
        self.kind = kind
        self.events: list[Event] = []
        self.links: list[Link] = []
        self.status = UNSET_STATUS
        self.start_ns = time.time_ns()
        self.end_ns = 0
        self._sink = sink
        self._recording = sink is not None

    def get_span_context(self) -> SpanContext:
        return self.context

    def is_recording(self) -> bool:
        return self._recording

    def all_attributes(self) -> dict[str, types.AttributeValue]:
        """The shared attributes, then the span's own (which replace a shared one of the same key)."""
        return {**self.shared, **self.attributes} if self.shared else dict(self.attributes)

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        if self._recording:
            cleaned = attribute_value(key, value)
            if cleaned is not None:
                self.attributes[key] = cleaned

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def add_event(self, name: str, attributes: types.Attributes = None, timestamp: int | None = None) -> None:
        if self._recording:
            cleaned = {}
            for key, value in (attributes or {}).items():
                kept = attribute_value(key, value)
                if kept is not None:
                    cleaned[key] = kept
            self.events.append((name, time.time_ns() if timestamp is None else timestamp, cleaned))

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        if self._recording and context.is_valid:
            self.links.append(Link(context, attributes))

    def update_name(self, name: str) -> None:
        if self._recording:
            self.name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        """As the SDK's: OK is final, UNSET is ignored."""
        if not self._recording or self.status.status_code is StatusCode.OK:
            return
        if isinstance(status, StatusCode):
            status = Status(status, description)
        if status.status_code is not StatusCode.UNSET:
            self.status = status

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        """An `exception` event with the attributes the SDK gives it."""
        event: dict[str, types.AttributeValue] = {
            "exception.type": qualified_name(type(exception)),
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        if attributes:
            event.update(attributes)
        self.add_event("exception", event, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._recording and self._sink is not None:
            self._recording = False
            self.end_ns = time.time_ns() if end_time is None else end_time
            self._sink(self)


def qualified_name(cls: type) -> str:
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def attribute_value(key: str, value: Any) -> types.AttributeValue | None:
    """What the SDK keeps of an attribute: a str, bool, int or float, or a sequence of them (as a
    tuple); anything else is left out with a warning, as the SDK does."""
    if isinstance(value, str | bool | int | float):
        return value
    if (
        isinstance(value, Sequence)
        and not isinstance(value, str | bytes)
        and all(isinstance(item, str | bool | int | float) for item in value)
    ):
        return tuple(value)
    log.warning("span attribute %r left out: invalid value %r", key, value)
    return None
