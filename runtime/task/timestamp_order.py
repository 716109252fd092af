"""The order in which a task with several input partitions processes their records: by timestamp.

Each input partition's records wait in an `InputQueue`, in offset order. `TimestampOrder.next_run`
chooses the partition whose first record has the lowest timestamp (a tie goes to the input listed
first) and hands over that partition's records up to the first one another partition's head comes
before: a run, which the task processes with its one-partition loop. A partition with nothing
queued locally while Kafka still holds records of it may hold a lower timestamp, so the task waits
for it, up to `max_idle_s`, before it goes on without it (Kafka Streams' `max.task.idle.ms`); a
partition with nothing more in Kafka is not waited for.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka import TopicPartition

EventTimeOf = Callable[[Any], int]  # of a record as fetched


class InputQueue:
    """One input partition's records, in the lists the poll loop handed over, oldest first."""

    def __init__(self, tp: TopicPartition, rank: int, time_of: EventTimeOf):
        self.tp = tp
        self.rank = rank  # its place among the processor's inputs: a tie goes to the lower
        self.count = 0
        self._time_of = time_of
        self._lists: deque[list[Any]] = deque()
        self._start = 0  # the first record of _lists[0] not taken yet
        self._head_time: int | None = None  # of that record, once read

    def add(self, records: list[Any]) -> None:
        self._lists.append(records)
        self.count += len(records)

    def head_time(self) -> int:
        if self._head_time is None:
            self._head_time = self._time_of(self._lists[0][self._start])
        return self._head_time

    def take_before(self, bound: int | None, inclusive: bool) -> list[Any]:
        """The first record and those after it (of the same list) whose timestamps come before `bound`
        (or equal it, when `inclusive`); with no bound, the rest of the list."""
        records, start = self._lists[0], self._start
        end = len(records)
        self._head_time = None
        if bound is not None:
            time_of = self._time_of
            for index in range(start + 1, end):
                timestamp = time_of(records[index])
                if timestamp > bound or (timestamp == bound and not inclusive):
                    end, self._head_time = index, timestamp
                    break
        if end == len(records):
            self._lists.popleft()
            self._start = 0
        else:
            self._start = end
        run = records[start:end]
        self.count -= len(run)
        return run

    def put_back(self, records: list[Any]) -> None:
        """The records of a run that were not processed go first again."""
        if self._start:
            self._lists[0] = self._lists[0][self._start :]
            self._start = 0
        self._lists.appendleft(records)
        self._head_time = None
        self.count += len(records)

    def clear(self) -> None:
        self._lists.clear()
        self._start = self.count = 0
        self._head_time = None


class TimestampOrder:
    """Chooses the next run of records across a task's input partitions."""

    def __init__(self, queues: Sequence[InputQueue], max_idle_s: float, unfetched: Callable[[TopicPartition], bool]):
        self.queues = {queue.tp: queue for queue in queues}
        self._max_idle_s = max_idle_s
        self._unfetched = unfetched
        self._idle_since: float | None = None
        self.wait_ends: float | None = None  # while it waits for a partition: when it goes on without it

    @property
    def count(self) -> int:
        return sum(queue.count for queue in self.queues.values())

    def next_run(self, now: float) -> tuple[TopicPartition, list[Any]] | None:
        """The partition to process next and its records in a row; None when nothing is queued, or
        while it waits for a partition that is empty here but not in Kafka."""
        if self._waits(now):
            return None
        queued = [queue for queue in self.queues.values() if queue.count]
        if not queued:
            return None
        queued.sort(key=lambda queue: (queue.head_time(), queue.rank))
        first = queued[0]
        if len(queued) == 1:
            return first.tp, first.take_before(None, True)
        follower = queued[1]
        return first.tp, first.take_before(follower.head_time(), first.rank < follower.rank)

    def add(self, tp: TopicPartition, records: list[Any]) -> None:
        self.queues[tp].add(records)

    def put_back(self, tp: TopicPartition, records: list[Any]) -> None:
        self.queues[tp].put_back(records)

    def clear(self) -> None:
        for queue in self.queues.values():
            queue.clear()
        self._idle_since = self.wait_ends = None

    def _waits(self, now: float) -> bool:
        """Whether a partition empty here still has records in Kafka, and the wait for it has not run
        out; the wait starts when one is first found so, and ends when none is."""
        self.wait_ends = None
        if not self._max_idle_s:
            return False
        if not any(not queue.count and self._unfetched(queue.tp) for queue in self.queues.values()):
            self._idle_since = None
            return False
        if self._idle_since is None:
            self._idle_since = now
        if now - self._idle_since >= self._max_idle_s:
            return False
        self.wait_ends = self._idle_since + self._max_idle_s
        return True
