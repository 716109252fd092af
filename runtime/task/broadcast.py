"""A task's broadcast inputs: topics every task of the processor reads whole, each task at its own position.

The consumer group hands each partition to one task, so a broadcast input cannot come through it:
every task reads it with a consumer of its own, outside the group. Its positions are the task's alone,
so they cannot be the group's committed offsets either; they are kept in a changelogged store of the
task (`<processor>-broadcast-positions`), written at every commit before the store's changes are
logged, and come back with the store after a crash or a move.

Under exactly-once they commit in the task's transaction, with its outputs and group offsets: exact.
Under at-least-once the changelog is acknowledged before the consumer commits the group offsets, and a
crash in between would leave the positions ahead of the input records to be processed again (a merge
join would find their transactions gone). So each commit writes the positions of the commit before:
a restart reads the broadcast records of one commit interval again, as at-least-once reads input
records again, and never skips one.

The reader fetches while the task's queue of that input is below `pause_at`, stops at it and starts
again at `resume_at`, as the poll loop pauses and resumes a partition. An aborted transaction takes the
task back to its last commit: `rewind` seeks the reader to the positions that commit wrote, and a
fetch that was under way then is dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition

from runtime.config import QueueConfig
from runtime.counters import Counters
from stores import BufferedKeyValueStore

log = logging.getLogger(__name__)

FETCH_TIMEOUT_MS = 100


class BroadcastTask(Protocol):
    """What the reader needs of its task."""

    def enqueue(self, tp: TopicPartition, records: list[Any]) -> None: ...
    def queued_of(self, tp: TopicPartition) -> int: ...


def position_key(tp: TopicPartition) -> list[Any]:
    return [tp.topic, tp.partition]


@dataclass(frozen=True)
class BroadcastSource:
    """What every task's reader shares: the topics' partition counts, and how to make a consumer."""

    partitions: Mapping[str, int]
    new_consumer: Callable[[str], AIOKafkaConsumer]  # given a client id; outside the group
    bounds: QueueConfig
    from_latest: bool  # `auto_offset_reset: latest`: a partition with no position starts at its end
    exact: bool  # exactly-once: a commit writes its own positions, not those of the commit before
    counters: Counters  # its pauses and resumes count with the group consumer's

    def reader(
        self, topics: Sequence[str], positions: Callable[[], BufferedKeyValueStore], client_id: str
    ) -> BroadcastReader:
        """A task's reader of `topics`; `positions` gives the task's positions store once it is open."""
        partitions = [TopicPartition(topic, p) for topic in topics for p in range(self.partitions[topic])]
        return BroadcastReader(
            partitions,
            positions,
            lambda: self.new_consumer(client_id),
            self.bounds,
            self.from_latest,
            self.exact,
            self.counters,
        )


class BroadcastReader:
    def __init__(
        self,
        partitions: Sequence[TopicPartition],
        positions: Callable[[], BufferedKeyValueStore],
        new_consumer: Callable[[], AIOKafkaConsumer],
        bounds: QueueConfig,
        from_latest: bool,
        exact: bool,
        counters: Counters,
    ):
        self.partitions = list(partitions)
        self._counters = counters
        self._positions_store = positions
        self._new_consumer = new_consumer
        self._bounds = bounds
        self._from_latest = from_latest
        self._exact = exact
        self._prepared: dict[TopicPartition, int] = {}  # the positions of the commit before, when not exact
        self._consumer: AIOKafkaConsumer | None = None
        self._first: dict[TopicPartition, int] = {}  # where a partition no commit wrote a position of starts
        self._paused: set[TopicPartition] = set()
        self._generation = 0  # moves on at each rewind: a fetch begun before it is dropped

    def committed_positions(self) -> dict[TopicPartition, int]:
        """The positions the last commit wrote (the store reads through its pending writes, which an
        abort drops), or where the reader started a partition no commit wrote one of."""
        positions, store = {}, self._positions_store()
        for tp in self.partitions:
            offset = store.get(position_key(tp))
            if offset is None:
                offset = self._first.get(tp)
            if offset is not None:
                positions[tp] = int(offset)
        return positions

    def write_positions(self, next_offsets: Mapping[TopicPartition, int]) -> None:
        """At a commit, before the stores' changes are logged: these positions, or under at-least-once
        those of the commit before."""
        current = {tp: next_offsets[tp] for tp in self.partitions if tp in next_offsets}
        written, self._prepared = (current, current) if self._exact else (self._prepared, current)
        store = self._positions_store()
        for tp, offset in written.items():
            if offset != store.get(position_key(tp)):
                store.put(position_key(tp), offset)

    async def follow(self, task: BroadcastTask) -> None:
        """Fetch into the task's queues until cancelled."""
        consumer = self._new_consumer()
        await consumer.start()
        try:
            consumer.assign(self.partitions)
            unknown = [tp for tp in self.partitions if tp not in self.committed_positions()]
            if unknown:
                edge = consumer.end_offsets if self._from_latest else consumer.beginning_offsets
                self._first = dict(await edge(unknown))
            positions = self.committed_positions()
            for tp, offset in positions.items():
                consumer.seek(tp, offset)
            log.info(
                "reading broadcast inputs from %s", {f"{tp.topic}[{tp.partition}]": at for tp, at in positions.items()}
            )
            self._consumer = consumer
            while True:
                generation = self._generation
                batches = await consumer.getmany(timeout_ms=FETCH_TIMEOUT_MS)
                if generation != self._generation:
                    continue  # a rewind came while it fetched: these are from before it
                for tp, records in batches.items():
                    task.enqueue(tp, records)
                    self.after_enqueue(tp, task.queued_of(tp))
        finally:
            self._consumer = None
            await consumer.stop()

    def after_enqueue(self, tp: TopicPartition, queued: int) -> None:
        if queued >= self._bounds.pause_at and tp not in self._paused and self._consumer is not None:
            self._consumer.pause(tp)
            self._paused.add(tp)
            self._counters.pauses += 1
            log.debug("paused broadcast input %s (%d records queued)", tp, queued)

    def after_dequeue(self, tp: TopicPartition, queued: int) -> None:
        if queued <= self._bounds.resume_at and tp in self._paused and self._consumer is not None:
            self._consumer.resume(tp)
            self._paused.discard(tp)
            self._counters.resumes += 1
            log.debug("resumed broadcast input %s", tp)

    def rewind(self) -> None:
        """Back to the positions of the last commit; what was fetched beyond them is fetched again."""
        self._generation += 1
        consumer = self._consumer
        if consumer is None:  # not following yet: it starts from them anyway
            return
        consumer.resume(*self._paused)
        self._counters.resumes += len(self._paused)
        self._paused.clear()
        for tp, offset in self.committed_positions().items():
            consumer.seek(tp, offset)
