"""When offsets are committed relative to processing: one strategy object per guarantee."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from runtime.config import Guarantee
from runtime.counters import Counters
from runtime.outputs import Outputs
from runtime.task import Task

log = logging.getLogger(__name__)


class CommitStrategy(Protocol):
    async def before_batch(self, tp: TopicPartition, records: list[Any]) -> None:
        """Runs before a task processes a batch."""

    async def commit(self, tasks: Iterable[Task]) -> None:
        """Runs every commit interval, on revoke and at shutdown."""


class _OffsetCommitter:
    def __init__(self, consumer: AIOKafkaConsumer, counters: Counters):
        self._consumer = consumer
        self._counters = counters
        self._committed: dict[TopicPartition, int] = {}

    async def commit_offsets(self, offsets: dict[TopicPartition, int]) -> None:
        changed = {tp: offset for tp, offset in offsets.items() if self._committed.get(tp) != offset}
        if not changed:
            return
        try:
            await self._consumer.commit(changed)
        except (CommitFailedError, IllegalStateError) as error:
            # The group rebalanced: the next owner resumes from the last successful commit.
            self._counters.failed_commits += 1
            log.warning("offset commit rejected (%s); the records will be processed again", error)
            return
        except KafkaError as error:
            self._counters.failed_commits += 1
            log.warning("offset commit failed (%r); retrying at the next commit", error)
            return
        self._committed.update(changed)
        self._counters.commits += 1


class AtMostOnce(_OffsetCommitter):
    """A batch's offsets are committed before it is processed: a crash loses it, never repeats it."""

    def __init__(self, consumer: AIOKafkaConsumer, outputs: Outputs, counters: Counters):
        super().__init__(consumer, counters)
        self._outputs = outputs

    async def before_batch(self, tp: TopicPartition, records: list[Any]) -> None:
        await self.commit_offsets({tp: records[-1].offset + 1})

    async def commit(self, tasks: Iterable[Task]) -> None:
        await self._outputs.wait_acked()
        flush_stores(tasks)


class AtLeastOnce(_OffsetCommitter):
    """An offset is committed only after every output produced before it was acknowledged."""

    def __init__(self, consumer: AIOKafkaConsumer, outputs: Outputs, counters: Counters):
        super().__init__(consumer, counters)
        self._outputs = outputs

    async def before_batch(self, tp: TopicPartition, records: list[Any]) -> None:
        return None

    async def commit(self, tasks: Iterable[Task]) -> None:
        tasks = list(tasks)
        offsets = {tp: offset for task in tasks for tp, offset in task.next_offsets.items()}
        await self._outputs.wait_acked()
        flush_stores(tasks)
        await self.commit_offsets(offsets)


def flush_stores(tasks: Iterable[Task]) -> None:
    """After the changelog writes are acknowledged: store data and changelog offset in one write."""
    for task in tasks:
        if task.state is not None and not task.restoring:
            task.state.flush()


def commit_strategy(
    guarantee: Guarantee, consumer: AIOKafkaConsumer, outputs: Outputs, counters: Counters
) -> CommitStrategy:
    strategies: dict[Guarantee, type[AtMostOnce | AtLeastOnce]] = {
        Guarantee.AT_MOST_ONCE: AtMostOnce,
        Guarantee.AT_LEAST_ONCE: AtLeastOnce,
    }
    return strategies[guarantee](consumer, outputs, counters)
