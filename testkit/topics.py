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

from runtime.kafka.record_limits import HeaderList, record_size
from runtime.task.clock import Clock


class TransactionState(Enum):
    OPEN = "open"
    COMMITTED = "committed"
    ABORTED = "aborted"


@dataclass(eq=False)
class Transaction:
    state: TransactionState = TransactionState.OPEN


class Entry(NamedTuple):
    """A record in a partition's log: `sequence` orders it among every topic's records."""

    record: ConsumerRecord[bytes, bytes]
    sequence: int
    transaction: Transaction | None


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
        if not 0 <= partition < self.partitions(topic):
            raise ValueError(f"topic '{topic}' has {self.partitions(topic)} partitions, not a partition {partition}")
        return self._logs.setdefault((topic, partition), [])

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
        record = ConsumerRecord(
            topic, partition, offset, self.clock.epoch_ms() if timestamp is None else timestamp, 0, key, value, None,
            -1 if key is None else len(key), -1 if value is None else len(value), list(headers),
        )  # fmt: skip
        log.append(Entry(record, next(self._sequence), transaction))
        return offset

    def visible(self, topic: str, partition: int, start: int) -> tuple[list[ConsumerRecord[bytes, bytes]], int]:
        """The records a read_committed consumer at `start` gets now, and its position after them: it stops
        at the first record of an open transaction and skips those of aborted ones."""
        entries, position = self._readable(topic, partition, start)
        return [entry.record for entry in entries], position

    def entries(self, topic: str) -> list[Entry]:
        """Every record of `topic` a read_committed consumer sees now, in the order they were written."""
        entries = [entry for p in range(self.partitions(topic)) for entry in self._readable(topic, p, 0)[0]]
        return sorted(entries, key=lambda entry: entry.sequence)

    def _readable(self, topic: str, partition: int, start: int) -> tuple[list[Entry], int]:
        log = self._logs.get((topic, partition))
        if not log or start >= len(log):
            return [], start
        readable = []
        position = start
        for entry in itertools.islice(log, start, None):
            transaction = entry.transaction
            if transaction is None or transaction.state is TransactionState.COMMITTED:
                readable.append(entry)
            elif transaction.state is TransactionState.OPEN:
                break
            position += 1
        return readable, position


class _Acked(NamedTuple):
    offset: int  # of a batch's first record, as aiokafka's RecordMetadata gives it


class MemoryBatch:
    """What `Outputs` fills in place of aiokafka's batch builder: it takes what Kafka's record format
    takes (bytes, and headers of str and bytes), and grows without bound."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes | None, bytes | None, HeaderList, int | None]] = []
        self._size = 0

    def append(self, *, timestamp: int | None, key: bytes | None, value: bytes | None, headers: Any) -> bool:
        self._size += record_size(key, value, headers)  # aiokafka's own size estimate checks the types
        self.records.append((key, value, list(headers), timestamp))
        return True

    def size(self) -> int:
        return self._size


class MemoryProducer:
    """The producer `Outputs` sends through: each batch is written to `topics` as it is sent, in a
    transaction when the producer is transactional (begun by the first batch after a commit)."""

    def __init__(self, topics: Topics, transactional: bool):
        self.transactional = transactional
        self._topics = topics
        self._transaction: Transaction | None = None

    def create_batch(self) -> MemoryBatch:
        return MemoryBatch()

    async def send_batch(self, batch: MemoryBatch, topic: str, *, partition: int) -> asyncio.Future[_Acked]:
        if self.transactional and self._transaction is None:
            self._transaction = Transaction()
        append, transaction = self._topics.append, self._transaction
        offsets = [append(topic, partition, key, value, headers, timestamp, transaction)
                   for key, value, headers, timestamp in batch.records]  # fmt: skip
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
