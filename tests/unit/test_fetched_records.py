"""A fetched partition's records taken a batch at a time: as many as asked, the position after them."""

from __future__ import annotations

import gc
import weakref

from aiokafka import TopicPartition
from aiokafka.consumer.fetcher import READ_UNCOMMITTED
from aiokafka.record.memory_records import MemoryRecords

from runtime.kafka.fetched import FetchedPartitionRecords, FetchedRecord
from tests.support.raw_records import record_batch

TP = TopicPartition("in", 2)


def batches(*offsets: int) -> bytes:
    """A batch of three records at each base offset; record n has key b"k<n>"."""
    return b"".join(
        record_batch([(f"k{n}".encode(), b"v", [(b"h", b"1")]) for n in range(base, base + 3)], base_offset=base)
        for base in offsets
    )


def fetched(data: bytes, position: int = 0) -> FetchedPartitionRecords:
    return FetchedPartitionRecords(TP, MemoryRecords(data), [], position, None, None, True, READ_UNCOMMITTED)


def test_records_are_taken_as_many_as_asked_across_batches() -> None:
    records = fetched(batches(0, 3, 6))
    taken, done = records.take(2)
    assert [r.offset for r in taken] == [0, 1] and not done
    assert records.next_fetch_offset == 2
    taken, done = records.take(4)
    assert [r.offset for r in taken] == [2, 3, 4, 5] and not done
    assert records.next_fetch_offset == 6
    taken, done = records.take(None)
    assert [r.offset for r in taken] == [6, 7, 8] and done
    assert records.next_fetch_offset == 9


def test_a_record_has_the_fields_of_a_consumer_record_that_the_runtime_reads() -> None:
    [first, *_], _ = fetched(batches(0)).take(None)
    assert first == FetchedRecord("in", 2, 0, first.timestamp, 0, b"k0", b"v", (("h", b"1"),))
    assert first.timestamp > 0


def test_records_below_the_fetch_position_are_left_out() -> None:
    records = fetched(batches(0, 3), position=1)  # a fetch from the middle of a batch gets all of it
    taken, done = records.take(None)
    assert [r.offset for r in taken] == [1, 2, 3, 4, 5] and done
    assert records.next_fetch_offset == 6


def test_a_batch_wholly_below_the_position_moves_the_position_past_it() -> None:
    records = fetched(batches(0, 3), position=3)
    taken, _ = records.take(1)
    assert [r.offset for r in taken] == [3]
    assert records.next_fetch_offset == 4


def test_taken_records_free_their_fetched_bytes_without_the_cyclic_collector() -> None:
    records = fetched(batches(0, 3))
    records.take(None)
    gone = weakref.ref(records)
    gc.disable()
    try:
        del records
        assert gone() is None, "freed as soon as it is dropped, with the fetched bytes it holds"
    finally:
        gc.enable()
