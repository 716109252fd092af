"""Record spans as an OTLP `ExportTraceServiceRequest`, written straight in protobuf's wire format.

The SDK's encoder builds a Python protobuf object per span, attribute and value, and hashes the
resource (as JSON) once per span: about 110 µs a span on a small machine, ten records' worth of
processing. Record spans share their shape and most attribute values, so the bytes are written
here directly, the constant ones once (about 5 µs a span). The result is message-for-message what
the SDK's encoder gives: tests/unit/test_otlp_encoding.py parses both and compares them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from struct import Struct
from typing import Any, Final

from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import SpanContext, SpanKind

from runtime.telemetry.record_span import UNSET_STATUS, RecordSpan

log = logging.getLogger(__name__)

_FIXED64: Final = Struct("<Q")
_FIXED32: Final = Struct("<I")
_DOUBLE: Final = Struct("<d")
_HAS_IS_REMOTE: Final = 0x100
_IS_REMOTE: Final = 0x200
_LENGTH_DELIMITED: Final = 2
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1
MAX_CACHED: Final = 4096


def _varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _SMALL[value]
    if value < 0:
        value += 1 << 64  # int64 as protobuf writes it: two's complement, ten bytes
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL: Final = [bytes((value,)) for value in range(0x80)]


def _tag(field: int, wire_type: int) -> bytes:
    return _varint(field << 3 | wire_type)


def _field(field: int, payload: bytes) -> bytes:
    """A length-delimited field: bytes, a string's UTF-8, or an embedded message."""
    return _tag(field, _LENGTH_DELIMITED) + _varint(len(payload)) + payload


def _any_value(value: Any) -> bytes:
    if isinstance(value, str):
        return _field(1, value.encode())
    if isinstance(value, bool):  # before int: a bool is an int
        return _tag(2, 0) + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ValueError(f"{value} does not fit an int64")
        return _tag(3, 0) + _varint(value)
    if isinstance(value, float):
        return _tag(4, 1) + _DOUBLE.pack(value)
    if isinstance(value, bytes):
        return _field(7, value)
    if isinstance(value, Sequence):
        return _field(5, b"".join(_field(1, _any_value(item)) for item in value))
    if isinstance(value, Mapping):
        return _field(6, b"".join(_field(1, _key_value(key, item)) for key, item in value.items()))
    if value is None:
        return b""  # an empty AnyValue, as the SDK's encoder writes it
    raise TypeError(f"cannot encode attribute value {value!r}")


def _key_value(key: str, value: Any) -> bytes:
    return _field(1, key.encode()) + _field(2, _any_value(value))


def _key_values(field: int, attributes: Mapping[str, Any]) -> bytes:
    """Each attribute as a KeyValue in `field`, but those OTLP cannot carry (see `_left_out`)."""
    encoded = []
    for key, value in attributes.items():
        try:
            encoded.append(_field(field, _key_value(key, value)))
        except (TypeError, ValueError) as error:  # UnicodeEncodeError is a ValueError
            _left_out(key, error)
    return b"".join(encoded)


def _left_out(key: str, error: Exception) -> None:
    """An attribute OTLP cannot carry (an int beyond 64 bits, text that is no valid Unicode, another
    type) is left out with a warning, as the SDK's encoder does, rather than failing the request and
    the other spans in it."""
    log.warning("attribute %r left out of the exported span: %s", key, error)


class SpanRequestEncoder:
    """Encodes batches of record spans of one resource and instrumentation scope."""

    def __init__(self, resource: Resource, scope_name: str):
        resource_message = _key_values(1, resource.attributes)
        self._resource = _field(1, resource_message)
        self._resource_schema = _field(3, resource.schema_url.encode()) if resource.schema_url else b""
        self._scope = _field(1, _field(1, scope_name.encode()))
        # Encoded once: span names, attribute keys, and the attributes spans share (by their mapping's id).
        self._names: dict[str, bytes] = {}
        self._keys: dict[str, bytes] = {}
        self._shared_attributes: dict[int, tuple[Mapping[str, Any], bytes]] = {}

    def encode(self, spans: Sequence[RecordSpan]) -> bytes:
        """One ExportTraceServiceRequest holding `spans`."""
        scope_spans = self._scope + b"".join([self._span(span) for span in spans])
        resource_spans = self._resource + _field(2, scope_spans) + self._resource_schema
        return _field(1, resource_spans)

    def _span(self, span: RecordSpan) -> bytes:
        """Field 2 of ScopeSpans: one span."""
        context, parent = span.context, span.parent
        parts = [b"\x0a\x10", context.trace_id.to_bytes(16, "big"), b"\x12\x08", context.span_id.to_bytes(8, "big")]
        if context.trace_state:  # 3: trace_state
            parts.append(_field(3, context.trace_state.to_header().encode()))
        if parent is not None:  # 4: parent_span_id
            parts += (b"\x22\x08", parent.span_id.to_bytes(8, "big"))
        parts += (
            self._name(span.name),  # 5: name
            _KINDS[span.kind],  # 6: kind
            b"\x39",
            _FIXED64.pack(span.start_ns),  # 7: start, fixed64
            b"\x41",
            _FIXED64.pack(span.end_ns),  # 8: end, fixed64
        )
        shared, own = span.shared, span.attributes
        if shared and own.keys().isdisjoint(shared):
            parts.append(self._shared(shared))
        elif shared:  # an attribute set on the span replaces a shared one, where that one stood
            own = {**shared, **own}
        parts += [self._attribute(key, value) for key, value in own.items()]
        for name, timestamp, attributes in span.events:
            event = b"\x09" + _FIXED64.pack(timestamp) + _field(2, name.encode()) + _key_values(3, attributes)
            parts.append(_field(11, event))
        for link in span.links:
            parts.append(_field(13, _link(link.context, link.attributes or {})))
        status = span.status
        if status is not UNSET_STATUS and (status.description or status.status_code.value):
            message = _field(2, status.description.encode()) if status.description else b""
            code = b"\x18" + _varint(status.status_code.value) if status.status_code.value else b""
            parts.append(_field(15, message + code))
        else:
            parts.append(b"\x7a\x00")  # 15: status, empty: the SDK always writes it
        parts.append(_REMOTE_PARENT if parent is not None and parent.is_remote else _LOCAL_PARENT)  # 16: flags
        encoded = b"".join(parts)
        return b"\x12" + _varint(len(encoded)) + encoded

    def _name(self, name: str) -> bytes:
        encoded = self._names.get(name)
        if encoded is None:
            encoded = _field(5, name.encode())
            if len(self._names) >= MAX_CACHED:
                self._names.clear()  # a stream of distinct names: start over rather than grow
            self._names[name] = encoded
        return encoded

    def _shared(self, attributes: Mapping[str, Any]) -> bytes:
        """Attributes many spans share (one mapping per topic partition), encoded once. Cached by
        the mapping's id, with the mapping: no other object can take that id while it is cached."""
        cached = self._shared_attributes.get(id(attributes))
        if cached is None:
            if len(self._shared_attributes) >= MAX_CACHED:
                self._shared_attributes.clear()
            encoded = b"".join([self._attribute(key, value) for key, value in attributes.items()])
            cached = self._shared_attributes[id(attributes)] = (attributes, encoded)
        return cached[1]

    def _attribute(self, key: str, value: Any) -> bytes:
        """Field 9 of a span: a KeyValue, with the key's part encoded once per key."""
        try:
            prefix = self._keys.get(key)
            if prefix is None:
                if len(self._keys) >= MAX_CACHED:
                    self._keys.clear()
                prefix = self._keys[key] = _field(1, key.encode()) + b"\x12"
            any_value = _any_value(value)
        except (TypeError, ValueError) as error:
            _left_out(key, error)
            return b""
        key_value = prefix + _varint(len(any_value)) + any_value
        return b"\x4a" + _varint(len(key_value)) + key_value


_KINDS: Final = {kind: b"\x30" + bytes((kind.value + 1,)) for kind in SpanKind}  # 6: kind (OTLP's enum is one higher)
_LOCAL_PARENT: Final = b"\x85\x01" + _FIXED32.pack(_HAS_IS_REMOTE)  # 16: flags, fixed32
_REMOTE_PARENT: Final = b"\x85\x01" + _FIXED32.pack(_HAS_IS_REMOTE | _IS_REMOTE)


def _link(context: SpanContext, attributes: Mapping[str, Any]) -> bytes:
    link = b"\x0a\x10" + context.trace_id.to_bytes(16, "big") + b"\x12\x08" + context.span_id.to_bytes(8, "big")
    if context.trace_state:
        link += _field(3, context.trace_state.to_header().encode())
    link += _key_values(4, attributes)
    return link + (_LINK_REMOTE if context.is_remote else _LINK_LOCAL)  # 6: flags, fixed32


_LINK_LOCAL: Final = b"\x35" + _FIXED32.pack(_HAS_IS_REMOTE)
_LINK_REMOTE: Final = b"\x35" + _FIXED32.pack(_HAS_IS_REMOTE | _IS_REMOTE)
