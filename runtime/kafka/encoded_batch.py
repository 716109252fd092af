"""A Kafka record batch the runtime encodes itself, for records whose headers come encoded already.

aiokafka's compiled batch builder takes headers as a list of (str, bytes) pairs, and encodes every name twice
per record (once to size the record, once to write it). A dead letter carries ten headers, five of which are
the same for every failure of one cause, so the failure route (`runtime/task/failures.py`) encodes those once
and the rest as they come, into `EncodedHeaders`, which `EncodedBatch` takes as they are. With every record
failing, appending the dead letter had been two fifths of the failure route, and the header lists held until
the broker acknowledged them most of what the garbage collector walked; the batch's checksum, aiokafka's in
software, took 0.4 µs a dead letter, `google-crc32c`'s in hardware a tenth of that (bench/README.md). To the
producer it is a batch as aiokafka's own (`BatchBuilder`): the sender sets the producer's id, epoch and sequence
on it and builds it once.

The layout is Kafka's record batch, version 2 (KIP-98), as aiokafka's builder writes it: the same records
give the same bytes (tests/unit/test_encoded_batch.py)."""

from __future__ import annotations

import struct
import time

import google_crc32c
import msgspec

from runtime.kafka.aiokafka_internals import COMPRESSORS, BatchSettings, read_varint, write_varint

_SMALL = 1 << 13
# Zigzag varints, as every length and delta in a record is written, of -_SMALL .. _SMALL - 1 (one or two bytes).
_VARINTS = [b""] * (2 * _SMALL)


def _varint(number: int) -> bytes:
    encoded = bytearray()
    write_varint(number, encoded.append)
    return bytes(encoded)


for _number in range(-_SMALL, _SMALL):
    _VARINTS[_number + _SMALL] = _varint(_number)


def varint(number: int) -> bytes:
    """`number` as a record's lengths and deltas are written: zigzag-encoded, seven bits a byte."""
    return _VARINTS[number + _SMALL] if -_SMALL <= number < _SMALL else _varint(number)


def encoded_field(data: bytes | None) -> bytes:
    """A key, a value or a header's part, as a record holds it: its length, then its bytes (-1 for None)."""
    return _NULL if data is None else varint(len(data)) + data


def encoded_header(name: str, value: bytes | None) -> bytes:
    """One header, as a record holds it."""
    return encoded_field(name.encode()) + encoded_field(value)


class EncodedHeaders(msgspec.Struct, gc=False):
    """A record's headers, encoded as its batch holds them: their count, then each header. Built once per
    record from parts mostly encoded before (`encoded_header`), and held until the broker acknowledged the
    record: a struct the garbage collector does not track, holding bytes."""

    section: bytes

    def decoded(self) -> list[tuple[str, bytes]]:
        """The headers as a list, for what takes them so: a batch of aiokafka's, a size check, the test kit."""
        data, position = self.section, 0
        count, position = read_varint(data, position)
        headers = []
        for _ in range(count):
            length, position = read_varint(data, position)
            name = data[position : position + length].decode()
            position += length
            length, position = read_varint(data, position)
            value = data[position : position + length] if length >= 0 else None
            position += max(length, 0)
            headers.append((name, value))
        return headers  # type: ignore[return-value]  # a dead letter's values are never None


def encode_headers(headers: list[tuple[str, bytes]]) -> bytes:
    """A header list as a record holds it (its count first)."""
    return varint(len(headers)) + b"".join([encoded_header(name, value) for name, value in headers])


_NULL = varint(-1)
_ATTRIBUTES = b"\x00"  # a record's own: none is defined
_TRANSACTIONAL = 0x10  # a batch attribute
# The batch's header: base offset, length, partition leader epoch, magic, crc; then, under the crc, attributes,
# last offset delta, first and max timestamp, producer id and epoch, base sequence, record count.
_PREFIX = struct.Struct(">qiibI")
_UNDER_CRC = struct.Struct(">hiqqqhii")
BATCH_HEADER = _PREFIX.size + _UNDER_CRC.size  # 61
_NOT_SET = -1  # no partition leader epoch: the broker sets it


class EncodedBatch:
    """A record batch filled a record at a time, as aiokafka's `BatchBuilder` is (`append` returns None when it
    is full), and sent by aiokafka's producer as one of its own. A record's parts are joined once, and the
    batch's records once, when the sender builds it.

    It mirrors what `Outputs` reaches of aiokafka's batch (runtime/kafka/aiokafka_internals.py): the compiled
    append as `_builder.append`, the count it is sent with as `_relative_offset`."""

    def __init__(self, settings: BatchSettings):
        self._builder = self
        self._relative_offset = 0
        self._batch_size = settings.batch_size
        self._codec = settings.codec
        self._transactional = settings.transactional
        self._records: list[bytes] = []
        self._size = BATCH_HEADER
        self._last_offset = -1
        self._first_timestamp = 0
        self._max_timestamp = 0
        self._producer = (-1, -1, 0)  # no producer id, as aiokafka's batches before the sender sets one
        self._closed = False
        self._built: bytes | None = None

    def append(
        self,
        offset: int,
        timestamp: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: EncodedHeaders | list[tuple[str, bytes]],
    ) -> bool | None:
        """The record at `offset` in the batch (the records before it), unless the batch is full (None): a
        first record always goes in, as in aiokafka's."""
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
        if not offset:
            self._first_timestamp = self._max_timestamp = timestamp
        elif timestamp > self._max_timestamp:
            self._max_timestamp = timestamp
        delta = timestamp - self._first_timestamp
        timestamp_delta = _VARINTS[delta + _SMALL] if -_SMALL <= delta < _SMALL else _varint(delta)
        offset_delta = _VARINTS[offset + _SMALL] if offset < _SMALL else _varint(offset)
        key_length = _NULL if key is None else _VARINTS[len(key) + _SMALL] if len(key) < _SMALL else _varint(len(key))
        value_length = (
            _NULL if value is None else _VARINTS[len(value) + _SMALL] if len(value) < _SMALL else _varint(len(value))
        )
        section = headers.section if headers.__class__ is EncodedHeaders else encode_headers(headers)  # type: ignore[arg-type]
        # Joined here, and the batch's records once more when it is built: the bytes of a record a part each,
        # joined once, took twice as long (the join's cost is per part).
        body = b"".join(
            (_ATTRIBUTES, timestamp_delta, offset_delta, key_length, key or b"", value_length, value or b"", section)
        )
        length = len(body)
        record_length = _VARINTS[length + _SMALL] if length < _SMALL else _varint(length)
        size = self._size + len(record_length) + length
        if offset and size >= self._batch_size:
            return None
        self._records += (record_length, body)
        self._size, self._last_offset = size, offset
        return True

    def size(self) -> int:
        return self._size if self._built is None else len(self._built)

    def record_count(self) -> int:
        return self._relative_offset

    def close(self) -> None:
        self._closed = True

    def closed(self) -> bool:
        return self._closed

    def _set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        self._producer = (producer_id, producer_epoch, base_sequence)

    def _build(self) -> bytes:
        """The batch's bytes, built once: the sender asks again for each attempt."""
        if self._built is None:
            self._closed = True
            records = b"".join(self._records)
            self._records = []
            attributes = _TRANSACTIONAL if self._transactional else 0
            if self._codec:
                records = COMPRESSORS[self._codec](records)
                attributes |= self._codec
            producer_id, producer_epoch, base_sequence = self._producer
            under_crc = _UNDER_CRC.pack(
                attributes,
                self._last_offset,
                self._first_timestamp,
                self._max_timestamp,
                producer_id,
                producer_epoch,
                base_sequence,
                self._last_offset + 1,
            )
            crc = google_crc32c.extend(google_crc32c.value(under_crc), records)
            length = _UNDER_CRC.size + len(records) + 9  # from the partition leader epoch on: epoch, magic and crc
            self._built = b"".join((_PREFIX.pack(0, length, _NOT_SET, 2, crc), under_crc, records))
        return self._built
