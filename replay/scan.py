"""One key's records in a time range: read from the one partition its producer chose, from the range's start.

The partition is Kafka's default for the key's bytes (murmur2 of the bytes, modulo the topic's partition
count), as a Java or aiokafka producer chose it: so only that partition is read, and only from the first
offset whose timestamp is at or after the range's start (`offsets_for_times`). Reading stops at the first
record whose timestamp is at or past the range's end, or at the end offset taken at start, whichever
comes first. Producers set timestamps, so they can go back and forth within a partition; a record
between those bounds whose timestamp lies outside the range is left out, and one inside the range that
a producer wrote after a record past its end is not reached (the seed's own trade-off: a replay reads a
window of the log, not the whole log).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from stores.partitioner import partition_for

FETCH_MS = 500


class RangeGone(LookupError):
    """The range ends before the oldest record the partition still holds: retention deleted it."""


@dataclass(frozen=True)
class Replay:
    """What to replay: `topic`, `key` (its encoded bytes; None: every key of `partition`), or a
    `partition`, and the range `[start_ms, end_ms)` (None: from the beginning, to the end)."""

    topic: str
    key: bytes | None = None
    partition: int | None = None
    start_ms: int | None = None
    end_ms: int | None = None

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
        return partition_for(self.key, partitions)


@dataclass
class Progress:
    """What a replay has done so far: records read, records that matched, the offsets it spans, and the
    seconds spent reading them (from the seek to the range's start)."""

    scanned: int = 0
    matched: int = 0
    first: int = 0
    end: int = 0
    reading_s: float = 0.0


async def replay(
    consumer: AIOKafkaConsumer, what: Replay, partitions: int, progress: Callable[[Progress], None] | None = None
) -> AsyncIterator[Any]:
    """The records of `what`, in offset order, as the consumer (started, in no group) reads them."""
    tp = TopicPartition(what.topic, what.partition_of(partitions))
    beginning = (await consumer.beginning_offsets([tp]))[tp]
    end = (await consumer.end_offsets([tp]))[tp]
    start = beginning
    if what.start_ms is not None:
        found = (await consumer.offsets_for_times({tp: what.start_ms}))[tp]
        start = end if found is None else found.offset
    done = Progress(first=start, end=end)
    if start >= end:
        await _check_not_gone(consumer, tp, what, beginning, end)
        return
    # Assigned only now, and sought at once: a fetch from where an assignment alone starts would be
    # waited for (up to fetch_max_wait_ms), then thrown away.
    consumer.assign([tp])
    consumer.seek(tp, start)
    reading = time.monotonic()
    first = True
    while await consumer.position(tp) < end:
        for record in (await consumer.getmany(tp, timeout_ms=FETCH_MS)).get(tp, []):
            if record.offset >= end or (what.end_ms is not None and record.timestamp >= what.end_ms):
                if first and start == beginning:  # the oldest record the partition holds is already past the range
                    await _check_not_gone(consumer, tp, what, beginning, end, record.timestamp)
                _report(progress, done, reading)
                return
            first = False
            done.scanned += 1
            if what.matches(record):
                done.matched += 1
                yield record
        _report(progress, done, reading)
    _report(progress, done, reading)


def _report(progress: Callable[[Progress], None] | None, done: Progress, reading: float) -> None:
    done.reading_s = time.monotonic() - reading
    if progress is not None:
        progress(done)


async def _check_not_gone(
    consumer: AIOKafkaConsumer, tp: TopicPartition, what: Replay, beginning: int, end: int, oldest: int | None = None
) -> None:
    """Nothing in the range: say so plainly when that is because retention deleted it."""
    if beginning == 0 or what.end_ms is None:
        return
    if oldest is None:
        if beginning >= end:
            raise RangeGone(f"{tp.topic}[{tp.partition}] holds no records any more (retention deleted "
                            f"offsets 0 to {beginning - 1})")  # fmt: skip
        consumer.assign([tp])
        consumer.seek(tp, beginning)
        batch = (await consumer.getmany(tp, timeout_ms=FETCH_MS, max_records=1)).get(tp, [])
        oldest = batch[0].timestamp if batch else None
    if oldest is not None and what.end_ms <= oldest:
        raise RangeGone(f"the range ends before the oldest record {tp.topic}[{tp.partition}] still holds "
                        f"(offset {beginning}, timestamp {oldest}): retention deleted what it covered")  # fmt: skip
