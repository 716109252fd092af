"""At-least-once and at-most-once: step 2 of the commit protocol through the consumer's group.

Every task of the worker shares one producer, so one wait for the broker's acks and one offset
commit serve them all.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from runtime.counters import Counters
from runtime.errors import StopWithoutCommit
from runtime.guarantees.commit import Committed
from runtime.kafka.outputs import Outputs
from runtime.task.commits import CommitBeforeProcessing, TaskCommit
from runtime.task.task import Task, TaskId
from runtime.telemetry import Telemetry

log = logging.getLogger(__name__)

PARTITIONS = "kafka_actor.partitions"


class AtLeastOnce:
    """An offset is committed only after every output produced before it was acknowledged."""

    commits_in_turn = False
    commits_together = False
    commit_before_processing: CommitBeforeProcessing | None = None

    def __init__(self, consumer: AIOKafkaConsumer, outputs: Outputs, counters: Counters, telemetry: Telemetry):
        self._consumer = consumer
        self._outputs = outputs
        self._counters = counters
        self._telemetry = telemetry
        self._committed: dict[TopicPartition, int] = {}

    def outputs_for(self, task_id: TaskId) -> Outputs:
        return self._outputs

    async def claim(self, task: Task) -> None:
        return None  # the consumer starts a partition at its committed offset by itself

    async def release(self, task: Task) -> None:
        return None

    async def commit(self, task_commits: list[TaskCommit]) -> Committed:
        await self._wait_acked()
        await self.commit_offsets({tp: offset for c in task_commits for tp, offset in c.offsets.items()})
        return Committed(task_commits)

    async def _wait_acked(self) -> None:
        try:
            await self._outputs.wait_acked()
        except KafkaError as error:
            raise StopWithoutCommit(f"producing outputs failed: {error!r}") from error

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


class AtMostOnce(AtLeastOnce):
    """A batch's offsets are committed before it is processed: a crash loses it, never repeats it."""

    def __init__(self, consumer: AIOKafkaConsumer, outputs: Outputs, counters: Counters, telemetry: Telemetry):
        super().__init__(consumer, outputs, counters, telemetry)
        self.commit_before_processing = self._commit_batch

    async def _commit_batch(self, tp: TopicPartition, records: list[Any]) -> None:
        await self.commit_offsets({tp: records[-1].offset + 1})

    async def commit(self, task_commits: list[TaskCommit]) -> Committed:
        await self._wait_acked()
        return Committed(task_commits)
