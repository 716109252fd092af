"""Step 2 of the runtime's commit protocol (runtime/guarantees/commit.py) on in-memory topics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiokafka import TopicPartition

from runtime.guarantees.commit import Committed
from runtime.kafka.outputs import Outputs
from runtime.task.commits import CommitBeforeProcessing, TaskCommit
from runtime.task.task import Task, TaskId
from runtime.testkit.topics import MemoryProducer


class MemoryCommits:
    """Every output acknowledged (a task's transaction committed, under exactly-once), then the offsets
    recorded as the group's; under at-most-once, a batch's offsets before the batch is processed."""

    commits_in_turn = False
    commits_together = False

    def __init__(self, shared: Outputs, transactional: Callable[[], Outputs] | None, at_most_once: bool):
        self.offsets: dict[TopicPartition, int] = {}
        self.shared = shared
        self.per_task: list[Outputs] = []  # under exactly-once, each task's own
        self._transactional = transactional
        self.commit_before_processing: CommitBeforeProcessing | None = self._commit_batch if at_most_once else None

    def outputs(self) -> list[Outputs]:
        return [self.shared, *self.per_task]

    def outputs_for(self, task_id: TaskId) -> Outputs:
        if self._transactional is None:
            return self.shared
        self.per_task.append(self._transactional())
        return self.per_task[-1]

    async def claim(self, task: Task) -> None:
        return None

    async def release(self, task: Task) -> None:
        return None

    async def commit(self, task_commits: list[TaskCommit]) -> Committed:
        for outputs in self.outputs():
            await outputs.wait_acked()
            producer = outputs.producer
            assert isinstance(producer, MemoryProducer)
            await producer.commit_transaction()
        if self.commit_before_processing is None:
            self.offsets.update({tp: offset for c in task_commits for tp, offset in c.offsets.items()})
        return Committed(task_commits)

    async def _commit_batch(self, tp: TopicPartition, records: list[Any]) -> None:
        self.offsets[tp] = records[-1].offset + 1
