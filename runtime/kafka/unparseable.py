"""Records the Kafka client cannot parse take their place among their partition's records, for the
deserialization policy to handle; the records around them are delivered as usual.

aiokafka parses a partition's fetched records lazily, inside `getmany()`. At a record it cannot parse,
the error escapes `getmany()`: a header key that is not UTF-8 raises UnicodeDecodeError from the Cython
parser (CorruptRecordException from the pure-Python one), a failed checksum or a broken structure
raises CorruptRecordException. The records that call had already parsed, of that partition and of the
partitions drained before it, are lost with it, and every fetch of the partition fails the same way.

So `getmany` here gives each fetched partition's result records of the worker's own kind
(runtime/kafka/fetched.py), which end before a batch that raises a parse error, instead of raising it,
and note where. That happens once per fetched partition, when the fetcher stores its result in the
dict it keeps results in (replaced by one that does it); each record still goes through aiokafka's
parser, the Cython one or the pure-Python one. After `getmany()` returned, the batch each noted
partition stopped at is fetched again, raw, and read by `record_batches`, which delimits every record
it can: the valid ones are appended as FetchedRecords, each record the client cannot parse as an
`UnparseableRecord`, and the consumer is moved past the batch. The task meets an UnparseableRecord as
any record: reading its key raises UnparseableRecordError, and the deserialization policy fails, skips
or dead-letters it in order and under the task's guarantee (in its transaction under exactly-once).
Nothing of the batch is lost, and no record stops its partition for good.

This reaches into aiokafka's consumer (its fetcher's results, PartitionRecords, its client) through
runtime/kafka/aiokafka_internals.py.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import CorruptRecordException, KafkaError
from aiokafka.protocol.fetch import FetchRequest

from runtime.kafka.aiokafka_internals import (
    FetchResult,
    consumer_client,
    drop_record_generator,
    fetch_results,
    partition_records,
    partition_records_arguments,
    set_fetch_results,
    set_partition_records,
    topic_partition,
)
from runtime.kafka.fetched import FetchedPartitionRecords, FetchedRecord, take_by_batches
from runtime.kafka.record_batches import RawBatch, RawRecord, read_batch, split_batches

log = logging.getLogger(__name__)

PARSE_ERRORS = (CorruptRecordException, UnicodeDecodeError)
FETCH_BYTES = 1 << 20  # a broker sends the first batch whole even when it is larger (KIP-74)
READ_UNCOMMITTED = 0  # the batch is one the consumer fetched: only its bytes are wanted

Stop = tuple[TopicPartition, int, Exception]


class UnparseableRecordError(Exception):
    """The Kafka client cannot parse a record. `recovered` is what its bytes still hold, for a dead
    letter: its key, value and headers, a header key that is not UTF-8 with its bytes escaped (`\\xff`)."""

    def __init__(self, message: str, recovered: FetchedRecord):
        super().__init__(message)
        self.recovered = recovered


class UnparseableRecord:
    """Stands where the record is among its partition's records: reading its key (or value) raises
    UnparseableRecordError, so the task applies the deserialization policy to it."""

    __slots__ = ("_message", "_recovered", "offset", "partition", "timestamp", "timestamp_type", "topic")
    headers = ()  # read before the key, for trace context: there is none to trust

    def __init__(self, message: str, recovered: FetchedRecord):
        self.topic = recovered.topic
        self.partition = recovered.partition
        self.offset = recovered.offset
        self.timestamp = recovered.timestamp
        self.timestamp_type = recovered.timestamp_type
        self._message = message
        self._recovered = recovered

    @property
    def key(self) -> bytes:
        raise UnparseableRecordError(self._message, self._recovered)

    @property
    def value(self) -> bytes:
        raise UnparseableRecordError(self._message, self._recovered)

    def __repr__(self) -> str:
        return f"UnparseableRecord({self.topic}[{self.partition}]@{self.offset}: {self._message})"


async def getmany(consumer: AIOKafkaConsumer, timeout_ms: int) -> dict[TopicPartition, list[Any]]:
    """`consumer.getmany(timeout_ms=timeout_ms)`, a record the client cannot parse in its place as an
    UnparseableRecord, and every record around it delivered."""
    results = fetch_results(consumer)
    if results.__class__ is not _StoppingResults:
        results = _StoppingResults(results)
        set_fetch_results(consumer, results)
    batches: dict[TopicPartition, list[Any]] = await consumer.getmany(timeout_ms=timeout_ms)
    while results.stops:
        tp, offset, error = results.stops.pop(0)
        await _read_past(consumer, tp, offset, error, batches)
    return batches


class _StoppingRecords(FetchedPartitionRecords):
    """A fetched partition's records (runtime/kafka/fetched.py), ended by a batch the client cannot parse."""

    stop_at = PARSE_ERRORS
    stops: list[Stop]

    def stopped(self, error: Exception) -> None:
        self.stops.append((topic_partition(self), self.next_fetch_offset, error))


class _StoppingResults(OrderedDict[TopicPartition, Any]):
    """The fetcher's results by partition, each partition's records made to stop at a parse error."""

    def __init__(self, results: OrderedDict[TopicPartition, Any]):
        super().__init__()
        self.stops: list[Stop] = []
        for tp, result in results.items():
            self[tp] = result

    def __setitem__(self, tp: TopicPartition, result: Any) -> None:
        given = partition_records(result) if result.__class__ is FetchResult else None  # errors pass as they are
        if given is not None:
            # Built anew rather than given a new `__class__`, which would turn the instance's attributes into
            # a real dict and slow every attribute read. The fetcher stores a partition's result before it
            # takes its records, so nothing of the first one is lost.
            records = _StoppingRecords(*partition_records_arguments(given))
            records.stops = self.stops
            # aiokafka's own, dropped here, holds the fetched bytes in a cycle with its unstarted record
            # generator: left so, each fetch's bytes would wait for the cyclic collector.
            drop_record_generator(given)
            set_partition_records(result, records)
            take_by_batches(result)
        super().__setitem__(tp, result)


async def _read_past(
    consumer: AIOKafkaConsumer, tp: TopicPartition, offset: int, error: Exception, batches: dict[TopicPartition, Any]
) -> None:
    """Appends the records of the batch at `offset` from there on, read record by record, and moves past it."""
    log.warning(
        "the Kafka client cannot parse a record of %s[%d] at or after offset %d (%r): "
        "reading that batch record by record",
        tp.topic,
        tp.partition,
        offset,
        error,
    )
    try:
        batch = await _fetch_batch(consumer, tp, offset)
    except KafkaError as fetch_error:
        log.warning("fetching %s[%d] at %d again failed (%r): retrying", tp.topic, tp.partition, offset, fetch_error)
        batch = None
    if tp not in consumer.assignment() or await consumer.position(tp) != offset:
        return  # revoked or sought elsewhere meanwhile: whoever reads it next meets the record again
    if batch is None:
        consumer.seek(tp, offset)  # fetched again, and met again, at the next poll
        return
    records = [_record(tp, raw) for raw in read_batch(batch) if raw.offset >= offset]
    if records:
        batches.setdefault(tp, []).extend(records)
    consumer.seek(tp, batch.next_offset)


async def _fetch_batch(consumer: AIOKafkaConsumer, tp: TopicPartition, offset: int) -> RawBatch | None:
    client = consumer_client(consumer)
    leader = client.cluster.leader_for_partition(tp)
    if leader is None or leader < 0:
        return None
    request = FetchRequest(
        max_wait_time=0,
        min_bytes=1,
        max_bytes=FETCH_BYTES,
        isolation_level=READ_UNCOMMITTED,
        topics=[(tp.topic, [(tp.partition, offset, FETCH_BYTES)])],
    )
    response = await client.send(leader, request)
    for _topic, partitions in response.topics:
        for _partition, error_code, _highwater, *data in partitions:
            if error_code != 0:
                log.warning("fetching %s[%d] at %d again: error code %d", tp.topic, tp.partition, offset, error_code)
                return None
            for batch in split_batches(data[-1] or b""):
                if batch.next_offset > offset:
                    return batch
    return None


def _record(tp: TopicPartition, raw: RawRecord) -> Any:
    errors = "strict" if raw.problem is None else "backslashreplace"
    headers = tuple((key.decode(errors=errors), value) for key, value in raw.headers)
    record = FetchedRecord(
        tp.topic, tp.partition, raw.offset, raw.timestamp, raw.timestamp_type, raw.key, raw.value, headers
    )
    if raw.problem is None:
        return record
    return UnparseableRecord(f"the Kafka client cannot parse this record: {raw.problem}", record)
