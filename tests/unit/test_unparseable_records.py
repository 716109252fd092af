"""Records aiokafka cannot parse: its record iterator stops at them, and the batch is read record by record."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.consumer.fetcher import READ_COMMITTED
from aiokafka.record.default_records import _DefaultRecordBatchPy
from aiokafka.record.memory_records import MemoryRecords

from runtime.kafka.record_batches import RawBatch, read_batch, split_batches
from runtime.kafka.unparseable import _StoppingRecords
from tests.support.raw_records import RawHeaders, record_batch

TP = TopicPartition("in", 0)
BAD: RawHeaders = [(b"ok", b"1"), (b"\xff\xfe", b"2")]
GZIP = 1


def three(headers: RawHeaders = BAD) -> list[tuple[bytes | None, bytes | None, RawHeaders]]:
    return [(b"k0", b"v0", []), (b"k1", b"v1", headers), (b"k2", b"v2", [])]


def batch(data: bytes) -> RawBatch:
    [only] = split_batches(data)
    return only


def test_a_header_key_that_is_not_utf8_spoils_its_record_only() -> None:
    records = read_batch(batch(record_batch(three(), base_offset=10)))
    assert [(r.offset, r.key, r.value, r.headers) for r in records] == [
        (10, b"k0", b"v0", []), (11, b"k1", b"v1", BAD), (12, b"k2", b"v2", []),
    ]  # fmt: skip
    assert [r.problem for r in records][::2] == [None, None]
    assert records[1].problem is not None and records[1].problem.startswith("header key 1 is not UTF-8: b'\\xff\\xfe'")


def test_a_compressed_batch_is_read_too() -> None:
    records = read_batch(batch(record_batch(three(), compression=GZIP)))
    assert [(r.key, r.problem is None) for r in records] == [(b"k0", True), (b"k1", False), (b"k2", True)]


def test_a_failed_checksum_spoils_every_record_of_the_batch() -> None:
    data = bytearray(record_batch(three(headers=[])))
    data[data.index(b"v1")] ^= 0x20  # "V1": the structure holds, the checksum does not
    records = read_batch(batch(bytes(data)))
    assert [r.value for r in records] == [b"v0", b"V1", b"v2"]
    assert all(r.problem and "checksum" in r.problem for r in records)


def test_a_broken_structure_keeps_the_rest_of_the_batch_as_one_record() -> None:
    data = bytearray(record_batch(three(headers=[])))
    data[data.index(b"k1") - 1] = 0x7E  # the key length of the second record runs past it
    records = read_batch(batch(bytes(data)))
    assert [(r.offset, r.key) for r in records] == [(0, b"k0"), (1, None)]
    assert records[1].value is not None and b"k1" in records[1].value and b"v2" in records[1].value
    assert records[1].problem is not None and "record 2 of 3" in records[1].problem


def test_split_batches_gives_whole_batches_and_their_next_offsets() -> None:
    first, second = record_batch(three(headers=[]), base_offset=5), record_batch(three(headers=[]), base_offset=9)
    batches = list(split_batches(first + second + second[:30]))
    assert [(b.base_offset, b.next_offset, b.data) for b in batches] == [(5, 8, first), (9, 12, second)]


class PurePythonRecords:
    """aiokafka's record set as its pure-Python parser reads it (the Cython one is used when built)."""

    def __init__(self, data: bytes):
        self._batches = [_DefaultRecordBatchPy(b.data) for b in split_batches(data)]

    def has_next(self) -> bool:
        return bool(self._batches)

    def next_batch(self) -> Any:
        return self._batches.pop(0) if self._batches else None


@pytest.mark.parametrize("parser", [MemoryRecords, PurePythonRecords], ids=["cython", "pure-python"])
def test_the_records_stop_before_a_batch_the_client_cannot_parse(parser: Any) -> None:
    data = record_batch(three(headers=[])) + record_batch(three(), base_offset=3)
    records = _StoppingRecords(TP, parser(data), [], 0, None, None, True, READ_COMMITTED)
    records.stops = []
    taken, done = records.take(None)
    assert [r.offset for r in taken] == [0, 1, 2] and done
    assert records.next_fetch_offset == 3, "the batch is read again from its start, raw"
    [(tp, offset, error)] = records.stops
    assert (tp, offset) == (TP, 3) and "utf-8" in str(error)
