"""In-memory topics, and the producer the runtime's output path writes to them through.

Each partition is a list of records with offsets, as a broker keeps it. A transactional producer's
records are in the log from the moment they are sent, but a reader sees none of them, nor anything
after them, until the transaction commits (Kafka's last stable offset, read_committed); an aborted
transaction's records are skipped. The runtime's `Outputs` builds batches with `create_batch` and
hands them over with `send_batch`, as it does to aiokafka's producer.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple

from aiokafka.structs import ConsumerRecord

from runtime.kafka.aiokafka_internals import record_count
from runtime.kafka.record_limits import HeaderList, record_size
from runtime.task.clock import Clock

BATCH_HEADER = 61  # bytes of a v2 record batch's header, counted in every record_size()
DEFAULT_BATCH_SIZE = 16384  # aiokafka's max_batch_size


class TransactionState(Enum):
    OPEN = "open"
    COMMITTED = "committed"
    ABORTED = "aborted"


@dataclass(eq=False)
class Transaction:
    state: TransactionState = TransactionState.OPEN


Entry = tuple[int, int, int, bytes | None, bytes | None, tuple[tuple[str, bytes], ...], "Transaction | None"]
"""A record in a partition's log: the order it was written in among every topic's records, its offset,
timestamp, key, value, headers and transaction. A plain tuple of plain values (but for a transaction),
which the garbage collector stops walking: the topics keep every record, as a broker does."""


class Topics:
    """Every topic's partitions; a topic not known yet has the partitions `counts` gives, else one."""

    def __init__(self, counts: Mapping[str, int], clock: Clock):
        self.counts = dict(counts)
        self.clock = clock
        self._logs: dict[tuple[str, int], list[Entry]] = {}
        self._sequence = itertools.count()

    def partitions(self, topic: str) -> int:
        return self.counts.setdefault(topic, 1)

    def log(self, topic: str, partition: int) -> list[Entry]:
        log = self._logs.get((topic, partition))
        if log is None:
            if not 0 <= partition < self.partitions(topic):
                raise ValueError(
                    f"topic '{topic}' has {self.partitions(topic)} partitions, not a partition {partition}"
                )
            log = self._logs[topic, partition] = []
        return log

    def append(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: HeaderList,
        timestamp: int | None,
        transaction: Transaction | None = None,
    ) -> int:
        """Append one record; returns its offset. A record without a timestamp gets the clock's (CreateTime)."""
        log = self.log(topic, partition)
        offset = len(log)
        if timestamp is None:
            timestamp = self.clock.epoch_ms()
        log.append((next(self._sequence), offset, timestamp, key, value, tuple(headers), transaction))
        return offset

    def visible(self, topic: str, partition: int, start: int) -> tuple[list[Any], int]:
        """The records a read_committed consumer at `start` gets now, and its position after them: it stops
        at the first record of an open transaction and skips those of aborted ones."""
        entries, position = self._readable(topic, partition, start)
        return [_record(topic, partition, entry) for entry in entries], position

    def records(self, topic: str) -> list[Any]:
        """Every record of `topic` a read_committed consumer sees now, in the order they were written."""
        entries = [(entry, p) for p in range(self.partitions(topic)) for entry in self._readable(topic, p, 0)[0]]
        entries.sort(key=lambda found: found[0][0])
        return [_record(topic, partition, entry) for entry, partition in entries]

    def _readable(self, topic: str, partition: int, start: int) -> tuple[list[Entry], int]:
        log = self._logs.get((topic, partition))
        if not log or start >= len(log):
            return [], start
        readable = []
        position = start
        for index in range(start, len(log)):
            entry = log[index]
            transaction = entry[6]
            if transaction is None or transaction.state is TransactionState.COMMITTED:
                readable.append(entry)
            elif transaction.state is TransactionState.OPEN:
                break
            position += 1
        return readable, position


def _record(topic: str, partition: int, entry: Entry) -> Any:
    """The record as aiokafka's consumer hands it over."""
    _, offset, timestamp, key, value, headers, _ = entry
    return ConsumerRecord(
        topic,
        partition,
        offset,
        timestamp,
        0,
        key,
        value,
        None,
        -1 if key is None else len(key),
        -1 if value is None else len(value),
        list(headers),
    )


class _Acked(NamedTuple):
    offset: int  # of a batch's first record, as aiokafka's RecordMetadata gives it


class MemoryBatch:
    """What `Outputs` fills in place of aiokafka's batch, and as it fills one: it takes what Kafka's
    record format takes (bytes, headers of str and bytes), and is full at `batch_size` bytes (a record
    alone always fits). As with aiokafka's, `Outputs` appends through `_builder`, sets the count it
    sends with in `_relative_offset` (runtime/kafka/aiokafka_internals.py reaches both), and closes it
    before sending it: a closed batch takes no more."""

    def __init__(self, batch_size: int):
        self.records: list[tuple[bytes | None, bytes | None, HeaderList, int | None]] = []
        self._batch_size = batch_size
        self._size = BATCH_HEADER
        self._builder = self
        self._relative_offset = 0
        self._closed = False

    def append(
        self, offset: int, timestamp: int | None, key: bytes | None, value: bytes | None, headers: Any
    ) -> bool | None:
        if self._closed:
            raise ValueError("a record appended to a batch closed for sending")
        if offset != len(self.records):
            raise ValueError(f"record {len(self.records)} of the batch appended at offset {offset}")
        grows = record_size(key, value, headers) - BATCH_HEADER  # aiokafka's own estimate checks the types
        if self.records and self._size + grows > self._batch_size:
            return None
        self._size += grows
        self.records.append((key, value, list(headers), timestamp))
        return True

    def size(self) -> int:
        return self._size

    def close(self) -> None:
        self._closed = True


class MemoryProducer:
    """The producer `Outputs` sends through: each batch is written to `topics` as it is sent, in a
    transaction when the producer is transactional (begun by the first batch after a commit)."""

    def __init__(self, topics: Topics, transactional: bool, batch_size: int = DEFAULT_BATCH_SIZE):
        self.transactional = transactional
        self._batch_size = batch_size
        self._topics = topics
        self._transaction: Transaction | None = None

    def create_batch(self) -> MemoryBatch:
        return MemoryBatch(self._batch_size)

    async def send_batch(self, batch: MemoryBatch, topic: str, *, partition: int) -> asyncio.Future[_Acked]:
        count = record_count(batch)
        if count != len(batch.records):  # aiokafka's idempotence counts by it
            raise ValueError(f"a batch of {len(batch.records)} records sent with a count of {count}")
        if self.transactional and self._transaction is None:
            self._transaction = Transaction()
        append, transaction = self._topics.append, self._transaction
        offsets = [
            append(topic, partition, key, value, headers, timestamp, transaction)
            for key, value, headers, timestamp in batch.records
        ]
        acked: asyncio.Future[_Acked] = asyncio.get_running_loop().create_future()
        acked.set_result(_Acked(offsets[0]))
        return acked

    async def commit_transaction(self) -> None:
        if self._transaction is not None:
            self._transaction.state = TransactionState.COMMITTED
            self._transaction = None

    async def abort_transaction(self) -> None:
        if self._transaction is not None:
            self._transaction.state = TransactionState.ABORTED
            self._transaction = None

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        await self.abort_transaction()
