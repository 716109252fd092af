"""A record's event time: the Kafka timestamp, a field of its value, or a user function of the record.

A topic with a `timestamp` setting gets its records built by `stamping`, which reads the event time
into `Record.timestamp`; the others are built by `Record` itself, so the per-record loop calls one
function either way and a topic without the setting costs nothing more. A record whose event time
cannot be read fails as an undecodable record does (the deserialization policy).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from processors.record import Headers, Record
from runtime.config import AppConfig
from runtime.config.timestamps import TimestampConfig
from stores.serdes import import_object

TimestampOf = Callable[[Record], int]
RecordBuilder = Callable[[str, int, int, int, Any, Any, Headers], Record]
Decode = Callable[[bytes], Any]


class TimestampError(ValueError):
    """A record's event time cannot be read; the message names where it was looked for."""


def epoch_ms(found: object, where: str) -> int:
    """Epoch milliseconds from an int, or a float (truncated); anything else, a bool included, is refused."""
    if isinstance(found, bool) or not isinstance(found, int | float):
        raise TimestampError(f"{where} is {type(found).__name__} {found!r}, not epoch milliseconds")
    if isinstance(found, float) and not math.isfinite(found):
        raise TimestampError(f"{where} is {found!r}, not epoch milliseconds")
    timestamp = int(found)
    if timestamp < 0:
        raise TimestampError(f"{where} is {found!r}: a timestamp cannot be negative")
    return timestamp


def field_reader(path: str) -> TimestampOf:
    """Reads the field at the dotted `path` of a record's value (a mapping at every step)."""
    names = path.split(".")
    where = f"field '{path}' of the value"

    def timestamp_of(record: Record) -> int:
        found: Any = record.value
        for name in names:
            if not isinstance(found, Mapping):
                raise TimestampError(f"{where} is missing: the value holds no mapping there ({type(found).__name__})")
            if name not in found:
                raise TimestampError(f"{where} is missing")
            found = found[name]
        return epoch_ms(found, where)

    return timestamp_of


def extractor_reader(path: str) -> TimestampOf:
    """Calls the user's function; what it returns is checked as a field's value is."""
    extract: Callable[[Record], object] = import_object(path)
    where = f"the timestamp extractor {path}'s result"

    def timestamp_of(record: Record) -> int:
        return epoch_ms(extract(record), where)

    return timestamp_of


def timestamp_reader(config: TimestampConfig) -> TimestampOf:
    return field_reader(config.field) if config.field is not None else extractor_reader(str(config.extractor))


def timestamp_readers(app: AppConfig) -> dict[str, TimestampOf]:
    """How the event time of each topic that has a `timestamp` setting is read."""
    return {
        name: timestamp_reader(topic.timestamp) for name, topic in app.topics.items() if topic.timestamp is not None
    }


def stamping(timestamp_of: TimestampOf) -> RecordBuilder:
    """Builds a record as `Record` does, with its event time as its timestamp."""

    def build(topic: str, partition: int, offset: int, kafka_ts: int, key: Any, value: Any, headers: Headers) -> Record:
        record = Record(topic, partition, offset, kafka_ts, key, value, headers)
        record.timestamp = timestamp_of(record)
        return record

    return build


def raw_event_time(build: RecordBuilder, decode_key: Decode, decode_value: Decode) -> Callable[[Any], int]:
    """The event time of a record as fetched, for ordering it before it is processed: read from the
    decoded record. A record that cannot be decoded or read orders first (-1): processing it decodes it
    again and hands it to the deserialization policy at once."""

    def event_time_of(raw: Any) -> int:
        try:
            key = None if raw.key is None else decode_key(raw.key)
            value = None if raw.value is None else decode_value(raw.value)
            return build(raw.topic, raw.partition, raw.offset, raw.timestamp, key, value, raw.headers).timestamp
        except Exception:  # any failure: the loop meets it again and applies the policy
            return -1

    return event_time_of
