"""What a topic refuses: a record batch above its `max.message.bytes` (or the producer's
`max_request_size`) and, on a compacted topic, a record without a key.

A refused record fails its whole batch (and, under exactly-once, its transaction), so every record
is checked before it is sent: `send` raises, and the processing error policy decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aiokafka.errors import (
    CorruptRecordException,
    InvalidTimestampError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
)

from runtime.kafka.aiokafka_internals import estimate_record_size
from runtime.kafka.encoded_batch import EncodedHeaders
from runtime.telemetry.trace_headers import TRACEPARENT, TRACEPARENT_CLASS, Traceparent, fields_of

DEFAULT_MAX_REQUEST_SIZE = 1048576  # aiokafka's, as the Java producer's

HeaderList = Sequence[tuple[str, bytes]]
Headers = HeaderList | Traceparent | EncodedHeaders
"""A record's headers; bytes are a `traceparent` value, its only header (a traced record's output); a dead
letter's come encoded (`EncodedHeaders`)."""

# What the broker answers about one record rather than about the request: the other records of the
# batch are fine, and the refused one goes to the error policy.
REFUSALS: tuple[type[Exception], ...] = (
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    InvalidTimestampError,
    CorruptRecordException,
)

# Above what a record carries besides its key and value bytes when it has at most a traceparent:
# the batch and record overhead, the traceparent header, and the key's and value's length varints.
_MOST_OVERHEAD = estimate_record_size(None, None, [(TRACEPARENT, bytes(64))]) + 10


def record_size(key: bytes | None, value: bytes | None, headers: Headers) -> int:
    """The size of a batch holding this record alone (aiokafka's upper bound, as its `send` checks)."""
    return estimate_record_size(key, value, as_header_list(headers))


def as_header_list(headers: Headers) -> list[tuple[str, bytes]]:
    """`headers` as the list aiokafka's batch builder takes."""
    kind = headers.__class__
    if kind is TRACEPARENT_CLASS:
        return fields_of(headers)  # type: ignore[arg-type]
    if kind is EncodedHeaders:
        return headers.decoded()  # type: ignore[union-attr]
    return list(headers)  # type: ignore[arg-type]


@dataclass(frozen=True)
class TopicLimits:
    """`max_bytes`: the largest one-record batch the topic takes from this app's producer."""

    max_bytes: int
    needs_key: bool = False

    @property
    def plain_bytes(self) -> int:
        """Key plus value bytes below which a record with no headers but a traceparent always fits."""
        return self.max_bytes - _MOST_OVERHEAD


class RecordRefused(ValueError):
    """A record the topic would refuse: found before it was sent, it is a processing error."""


def check_record(topic: str, key: bytes | None, value: bytes | None, headers: Headers, limits: TopicLimits) -> None:
    """Raise `RecordRefused` for a record `topic` would refuse (the exact check behind `send`'s quick one)."""
    if key is None and limits.needs_key:
        raise RecordRefused(f"topic '{topic}' is compacted: a record sent to it needs a key")
    size = record_size(key, value, headers)
    if size > limits.max_bytes:
        raise RecordRefused(
            f"a record for topic '{topic}' is {size:,} bytes (key {_length(key):,}, value {_length(value):,}), "
            f"above the {limits.max_bytes:,} bytes it takes (the smaller of the topic's max.message.bytes "
            "and the producer's max_request_size)"
        )


def broker_refusal(topic: str, key: bytes | None, value: bytes | None, headers: Headers, error: Exception) -> str:
    """What the processing policy is told about an output the broker refused."""
    size = record_size(key, value, headers)
    return f"the broker refused an output for topic '{topic}' ({size:,} bytes): {type(error).__name__}: {error}"


def _length(data: bytes | None) -> int:
    return 0 if data is None else len(data)


Limits = Mapping[str, TopicLimits]
