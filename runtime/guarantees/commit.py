"""When offsets are committed relative to processing: one strategy object per guarantee."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from runtime.counters import Counters
from runtime.kafka.outputs import Outputs
from runtime.task.task import GuaranteeHooks, Task
from runtime.telemetry import Telemetry

log = logging.getLogger(__name__)

PARTITIONS = "kafka_actor.partitions"


class CommitStrategy(GuaranteeHooks, Protocol):
    async def commit(self, tasks: Iterable[Task]) -> None:
        """Runs every commit interval (for the guarantees where the worker commits)."""

    async def finish(self, tasks: Iterable[Task], commit: bool) -> None:
        """Tasks whose actors stopped (revoked, or shutdown): commit what they did, or drop it."""


def log_store_changes(tasks: Iterable[Task]) -> None:
    """At the start of a commit: the stores' changes since the last one become changelog records."""
    for task in tasks:
        if task.state is not None and not task.starting:
            task.state.log_changes()


def flush_stores(tasks: Iterable[Task]) -> None:
    """After the changelog writes are acknowledged: store data and changelog offset in one write."""
    for task in tasks:
        if task.state is not None and not task.starting:
            task.state.flush()


class _WorkerCommits:
    """The worker commits for every task through its consumer, each commit interval."""

    def __init__(self, consumer: AIOKafkaConsumer, outputs: Outputs, counters: Counters, telemetry: Telemetry):
        self._consumer = consumer
        self._outputs = outputs
        self._counters = counters
        self._telemetry = telemetry
        self._committed: dict[TopicPartition, int] = {}

    async def start(self, task: Task) -> None:
        return None

    async def ready(self, task: Task) -> None:
        return None

    async def after_batch(self, task: Task) -> None:
        return None

    def commit_due_in(self, task: Task) -> float | None:
        return None

    async def commit_offsets(self, offsets: dict[TopicPartition, int]) -> None:
        changed = {tp: offset for tp, offset in offsets.items() if self._committed.get(tp) != offset}
        if not changed:
            return
        started = time.monotonic()
        try:
            with self._telemetry.tracer.span("commit offsets", {PARTITIONS: len(changed)}):
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
        elapsed = time.monotonic() - started
        self._counters.commits += 1
        self._counters.commit_seconds += elapsed
        if self._telemetry.metrics.enabled:
            self._telemetry.metrics.record_commit(elapsed * 1000, transactional=False)

    async def commit(self, tasks: Iterable[Task]) -> None:
        raise NotImplementedError

    async def finish(self, tasks: Iterable[Task], commit: bool) -> None:
        if commit:
            await self.commit(tasks)


class AtMostOnce(_WorkerCommits):
    """A batch's offsets are committed before it is processed: a crash loses it, never repeats it."""

    async def before_batch(self, task: Task, tp: TopicPartition, records: list[Any]) -> None:
        await self.commit_offsets({tp: records[-1].offset + 1})

    async def commit(self, tasks: Iterable[Task]) -> None:
        tasks = list(tasks)
        log_store_changes(tasks)
        await self._outputs.wait_acked()
        flush_stores(tasks)


class AtLeastOnce(_WorkerCommits):
    """An offset is committed only after every output produced before it was acknowledged."""

    async def before_batch(self, task: Task, tp: TopicPartition, records: list[Any]) -> None:
        return None

    async def commit(self, tasks: Iterable[Task]) -> None:
        tasks = list(tasks)
        offsets = {tp: offset for task in tasks for tp, offset in task.next_offsets.items()}
        log_store_changes(tasks)
        await self._outputs.wait_acked()
        flush_stores(tasks)
        await self.commit_offsets(offsets)
