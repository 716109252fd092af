"""A fetched partition's records taken a batch at a time: as many as asked, the position after them."""

from __future__ import annotations

import gc
import weakref
from collections import OrderedDict

from aiokafka import TopicPartition
from aiokafka.consumer.fetcher import READ_UNCOMMITTED, FetchResult, PartitionRecords
from aiokafka.record.memory_records import MemoryRecords

from runtime.kafka.fetched import FetchedPartitionRecords, FetchedRecord, take_by_batches
from runtime.kafka.unparseable import _StoppingResults
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


def test_a_result_taken_by_batches_is_freed_without_the_cyclic_collector() -> None:
    result = FetchResult(TP, assignment=None, partition_records=fetched(batches(0)), backoff=0)
    take_by_batches(result)
    gone = weakref.ref(result)
    gc.disable()
    try:
        del result  # as the fetcher drops a result it holds no more records of, or of a revoked partition
        assert gone() is None, "its `getall` must not hold it in a reference cycle"
    finally:
        gc.enable()


def test_the_records_aiokafka_built_are_freed_when_a_result_gets_stopping_records() -> None:
    given = PartitionRecords(TP, MemoryRecords(batches(0)), [], 0, None, None, True, READ_UNCOMMITTED)
    results = _StoppingResults(OrderedDict())
    gone = weakref.ref(given)
    gc.disable()
    try:
        results[TP] = FetchResult(TP, assignment=None, partition_records=given, backoff=0)
        del given
        assert gone() is None, "aiokafka's records, replaced, must not keep the fetched bytes until a collection"
    finally:
        gc.enable()
