"""One key's records in a time range: read from the one partition its producer chose, from the range's start.

The partition is the one the key's producer chose: Kafka's default for the key's bytes (murmur2, modulo the
topic's partition count), as a Java or aiokafka producer chose it, or another of librdkafka's partitioners
named (`partitioners.py`): so only that partition is read, and only from the first
offset whose timestamp is at or after the range's start (`offsets_for_times`). Reading stops at the first
record whose timestamp is at or past the range's end, or at the end offset taken at start, whichever
comes first. Producers set timestamps, so they can go back and forth within a partition; a record
between those bounds whose timestamp lies outside the range is left out, and one inside the range that
a producer wrote after a record past its end is not reached (the seed's own trade-off: a replay reads a
window of the log, not the whole log).

`locate` fixes where a replay reads (its `Span`), `scan` reads it a fetch at a time from any offset in it
(a replay job goes on from the offset it recorded), and `replay` is the two together, a record at a time.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from runtime.replay.partitioners import DEFAULT, PARTITIONERS

FETCH_MS = 500
BATCH_RECORDS = 5_000
"""Records read per batch at most: a replay job ships each batch as one transaction with its progress, so a
worker killed in a job leaves at most this many records for its successor to read again."""


class RangeGone(LookupError):
    """The range ends before the oldest record the partition still holds: retention deleted it."""


@dataclass(frozen=True)
class Replay:
    """What to replay: `topic`, `key` (its encoded bytes; None: every key of `partition`), or a
    `partition`, the range `[start_ms, end_ms)` (None: from the beginning, to the end), and the name of
    the partitioner that placed the key (librdkafka's names: `partitioners.py`)."""

    topic: str
    key: bytes | None = None
    partition: int | None = None
    start_ms: int | None = None
    end_ms: int | None = None
    partitioner: str = DEFAULT

    def matches(self, record: Any) -> bool:
        """Of the key (when given) and at or after the start (when given); the end is where reading stops."""
        return (self.key is None or record.key == self.key) and (
            self.start_ms is None or record.timestamp >= self.start_ms
        )

    def partition_of(self, partitions: int) -> int:
        if self.partition is not None:
            if not 0 <= self.partition < partitions:
                raise ValueError(f"topic '{self.topic}' has no partition {self.partition} (it has {partitions})")
            return self.partition
        if self.key is None:
            raise ValueError("give a key or a partition")
        return PARTITIONERS[self.partitioner].partition(self.key, partitions)


@dataclass(frozen=True)
class Span:
    """Where a replay reads: `partition` from offset `start` up to `end` (the end offset when it was
    located), `beginning` being the partition's oldest offset then."""

    partition: int
    beginning: int
    start: int
    end: int


@dataclass
class Batch:
    """What one fetch gave: the records that matched, how many were read, and where reading goes on."""

    matched: list[Any] = field(default_factory=list)
    scanned: int = 0
    next_offset: int = 0
    done: bool = False


@dataclass
class Progress:
    """What a replay has done so far: records read, records that matched, the offsets it spans, and the
    seconds spent reading them (from the seek to the range's start)."""

    scanned: int = 0
    matched: int = 0
    first: int = 0
    end: int = 0
    reading_s: float = 0.0


async def locate(consumer: AIOKafkaConsumer, what: Replay, partitions: int) -> Span:
    """The partition of `what`, its first offset at or after the range's start, and its end offset now."""
    tp = TopicPartition(what.topic, what.partition_of(partitions))
    beginning = (await consumer.beginning_offsets([tp]))[tp]
    end = (await consumer.end_offsets([tp]))[tp]
    start = beginning
    if what.start_ms is not None:
        found = (await consumer.offsets_for_times({tp: what.start_ms}))[tp]
        start = end if found is None else found.offset
    return Span(tp.partition, beginning, start, end)


async def scan(consumer: AIOKafkaConsumer, what: Replay, span: Span, offset: int | None = None) -> AsyncIterator[Batch]:
    """`span` read from `offset` (default: its start) BATCH_RECORDS at most at a time, the last batch marked
    `done`; a fetch that brings nothing is an empty batch, so that its reader can do what it must between two."""
    tp = TopicPartition(what.topic, span.partition)
    position = span.start if offset is None else offset
    if position >= span.end:
        if offset is None:
            await _check_not_gone(consumer, tp, what, span)
        yield Batch(next_offset=position, done=True)
        return
    # Assigned only now, and sought at once: a fetch from where an assignment alone starts would be
    # waited for (up to fetch_max_wait_ms), then thrown away.
    consumer.assign([tp])
    consumer.seek(tp, position)
    fresh = offset is None or offset == span.start
    while True:
        batch = Batch(next_offset=position)
        for record in (await consumer.getmany(tp, timeout_ms=FETCH_MS, max_records=BATCH_RECORDS)).get(tp, []):
            if record.offset >= span.end or (what.end_ms is not None and record.timestamp >= what.end_ms):
                if fresh and position == span.beginning:  # the oldest record the partition holds is past the range
                    await _check_not_gone(consumer, tp, what, span, record.timestamp)
                batch.done = True
                yield batch
                return
            fresh = False
            batch.scanned += 1
            position = batch.next_offset = record.offset + 1
            if what.matches(record):
                batch.matched.append(record)
        batch.done = position >= span.end
        yield batch
        if batch.done:
            return


async def replay(
    consumer: AIOKafkaConsumer, what: Replay, partitions: int, progress: Callable[[Progress], None] | None = None
) -> AsyncIterator[Any]:
    """The records of `what`, in offset order, as the consumer (started, in no group) reads them."""
    span = await locate(consumer, what, partitions)
    done = Progress(first=span.start, end=span.end)
    reading = time.monotonic()
    async for batch in scan(consumer, what, span):
        for record in batch.matched:
            yield record
        done.scanned += batch.scanned
        done.matched += len(batch.matched)
        done.reading_s = time.monotonic() - reading
        if progress is not None:
            progress(done)


async def _check_not_gone(
    consumer: AIOKafkaConsumer, tp: TopicPartition, what: Replay, span: Span, oldest: int | None = None
) -> None:
    """Nothing in the range: say so plainly when that is because retention deleted it."""
    if span.beginning == 0 or what.end_ms is None:
        return
    if oldest is None:
        if span.beginning >= span.end:
            raise RangeGone(
                f"{tp.topic}[{tp.partition}] holds no records any more (retention deleted "
                f"offsets 0 to {span.beginning - 1})"
            )
        consumer.assign([tp])
        consumer.seek(tp, span.beginning)
        batch = (await consumer.getmany(tp, timeout_ms=FETCH_MS, max_records=1)).get(tp, [])
        oldest = batch[0].timestamp if batch else None
    if oldest is not None and what.end_ms <= oldest:
        raise RangeGone(
            f"the range ends before the oldest record {tp.topic}[{tp.partition}] still holds "
            f"(offset {span.beginning}, timestamp {oldest}): retention deleted what it covered"
        )
