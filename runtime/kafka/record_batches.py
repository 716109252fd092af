"""Read one record batch as fetched, record by record, keeping what a record the client refuses still holds.

aiokafka's parsers stop at the first record they cannot read (a header key that is not UTF-8, a
broken structure, a failed checksum) and lose the batch. This reader, used only for such a batch,
returns every record it can delimit: those that parse as the client would parse them, and the others
with the reason and their bytes (header keys as bytes), so that nothing of the batch goes unaccounted.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from runtime.kafka.aiokafka_internals import (
    crc32c,
    decompress_gzip,
    decompress_lz4,
    decompress_snappy,
    decompress_zstd,
)

# The v2 batch header (KIP-98): base offset, length, leader epoch, magic, crc, attributes, last offset
# delta, first and max timestamps, producer id and epoch, base sequence, record count.
_HEADER = struct.Struct(">qiibIhiqqqhii")
_LENGTH = struct.Struct(">qi")  # every message format starts with its offset and length
_MAGIC_AT = 16
_CRC_FROM = 21  # the checksum covers the bytes from the attributes on
_CODEC_MASK = 0x07
_LOG_APPEND_TIME = 0x08
_DECOMPRESS: dict[int, Callable[[bytes], bytes]] = {
    1: decompress_gzip,
    2: decompress_snappy,
    3: decompress_lz4,
    4: decompress_zstd,
}

RawHeaders = list[tuple[bytes, bytes | None]]


@dataclass(frozen=True, slots=True)
class RawRecord:
    """A record of a batch; `problem` says why the client cannot parse it (None when it can)."""

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: RawHeaders
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class RawBatch:
    base_offset: int
    next_offset: int
    data: bytes


def split_batches(data: bytes) -> Iterator[RawBatch]:
    """The whole batches of a fetch response's record set (a partial one at its end is left out)."""
    pos = 0
    while pos + _LENGTH.size <= len(data):
        offset, length = _LENGTH.unpack_from(data, pos)
        end = pos + _LENGTH.size + length
        if length <= 0 or end > len(data):
            return
        raw = data[pos:end]
        if raw[_MAGIC_AT] >= 2 and len(raw) >= _HEADER.size:
            last_offset_delta = _HEADER.unpack_from(raw)[6]
            yield RawBatch(offset, offset + last_offset_delta + 1, raw)
        else:  # message format v0 or v1: the offset is that of the entry's last message
            yield RawBatch(offset, offset + 1, raw)
        pos = end


def read_batch(batch: RawBatch) -> list[RawRecord]:
    """Every record of the batch that can be delimited; what cannot becomes one record holding the rest."""
    raw = batch.data
    if raw[_MAGIC_AT] < 2:
        return [_unreadable(batch.base_offset, 0, raw, f"message format v{raw[_MAGIC_AT]} is not read here")]
    (base_offset, _, _, _, crc, attributes, _, first_ts, max_ts, _, _, _, count) = _HEADER.unpack_from(raw)
    computed = crc32c(raw[_CRC_FROM:])
    damaged = None if computed == crc else f"its batch fails its checksum (stored {crc}, computed {computed})"
    timestamp_type = 1 if attributes & _LOG_APPEND_TIME else 0
    payload = raw[_HEADER.size :]
    codec = attributes & _CODEC_MASK
    if codec:
        try:
            payload = _decompress(codec, payload)
        except NotImplementedError:  # the codec's library is missing: the setup's fault, not the batch's
            raise
        except Exception as error:  # any codec's own error: the batch's records cannot be reached
            return [_unreadable(base_offset, first_ts, payload, f"its batch cannot be decompressed: {error!r}")]
    records: list[RawRecord] = []
    pos = 0
    for index in range(count):
        try:
            record, pos = _read_record(payload, pos, base_offset, first_ts, max_ts, timestamp_type)
        except (IndexError, ValueError) as error:
            offset = records[-1].offset + 1 if records else base_offset
            problem = f"record {index + 1} of {count} in its batch has an invalid structure ({error})"
            return [*records, _unreadable(offset, first_ts, payload[pos:], problem)]
        records.append(record if damaged is None or record.problem else _with_problem(record, damaged))
    if pos != len(payload):
        offset = records[-1].offset + 1 if records else base_offset
        problem = f"its batch holds {len(payload) - pos} bytes after its {count} records"
        records.append(_unreadable(offset, first_ts, payload[pos:], problem))
    return records


def _read_record(
    data: bytes, pos: int, base_offset: int, first_ts: int, max_ts: int, timestamp_type: int
) -> tuple[RawRecord, int]:
    length, pos = _varint(data, pos)
    end = pos + length
    if length < 0 or end > len(data):
        raise ValueError(f"a record length of {length} bytes at byte {pos}")
    pos += 1  # attributes: unused
    timestamp_delta, pos = _varint(data, pos)
    offset_delta, pos = _varint(data, pos)
    key, pos = _read_bytes(data, pos, end)
    value, pos = _read_bytes(data, pos, end)
    header_count, pos = _varint(data, pos)
    if header_count < 0:
        raise ValueError(f"{header_count} headers")
    headers: RawHeaders = []
    problem = None
    for index in range(header_count):
        header_key, pos = _read_bytes(data, pos, end)
        if header_key is None:
            raise ValueError(f"header {index} has no key")
        header_value, pos = _read_bytes(data, pos, end)
        headers.append((header_key, header_value))
        if problem is None:
            try:
                header_key.decode()
            except UnicodeDecodeError as error:
                problem = f"header key {index} is not UTF-8: {header_key!r} ({error.reason} at byte {error.start})"
    if pos != end:
        raise ValueError(f"{end - pos} bytes left over in a record")
    timestamp = max_ts if timestamp_type else first_ts + timestamp_delta
    return RawRecord(base_offset + offset_delta, timestamp, timestamp_type, key, value, headers, problem), pos


def _read_bytes(data: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    length, pos = _varint(data, pos)
    if length < 0:
        return None, pos
    if pos + length > end:
        raise ValueError(f"a field of {length} bytes runs past its record")
    return data[pos : pos + length], pos + length


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint, as the record format writes lengths and deltas; one cut short raises IndexError."""
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError(f"a varint longer than 64 bits before byte {pos}")


def _decompress(codec: int, payload: bytes) -> bytes:
    decompress = _DECOMPRESS.get(codec)
    if decompress is None:
        raise ValueError(f"unknown compression codec {codec}")
    return decompress(payload)


def _unreadable(offset: int, timestamp: int, data: bytes, problem: str) -> RawRecord:
    return RawRecord(offset, timestamp, 0, None, data, [], problem)


def _with_problem(record: RawRecord, problem: str) -> RawRecord:
    return RawRecord(
        record.offset, record.timestamp, record.timestamp_type, record.key, record.value, record.headers, problem
    )
