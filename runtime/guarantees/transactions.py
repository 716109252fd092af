"""Exactly-once on a broker without KIP-447 (before Kafka 2.5): one Kafka transaction per task.

Such a broker cannot fence a zombie by its group generation (runtime/guarantees/worker_transaction.py does
where it can), so every task has its own transactional producer with the stable id
`{app}-{processor}-{partition}`: whoever owns the task next calls `init_transactions` with the same id
and fences the previous owner. The committer owns these producers: it makes each with the task's
outputs (`outputs_for`), starts it when it claims the task, and stops it when it releases the task.

A transaction holds the task's outputs, its changelog writes and its input offsets (sent to the
consumer's group); the store writes reach the store only after it commits (step 3), and are dropped
when it aborts, so a crash never leaves a local store ahead of its changelog.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from enum import Enum

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import InvalidProducerEpoch, KafkaError, ProducerFenced

from runtime.counters import Counters
from runtime.errors import StopWithoutCommit, TaskLost
from runtime.guarantees.commit import Committed
from runtime.kafka.authorization import AUTHORIZATION_ERRORS
from runtime.kafka.outputs import Outputs, OutputsRefused
from runtime.kafka.record_limits import broker_refusal
from runtime.task.commits import CommitBeforeProcessing, TaskCommit
from runtime.task.task import Task, TaskId
from runtime.telemetry import Telemetry
from runtime.telemetry.metrics import TASK

log = logging.getLogger(__name__)

FENCED = (ProducerFenced, InvalidProducerEpoch)


class _Outcome(Enum):
    COMMITTED = "committed"
    UNCHANGED = "unchanged"  # nothing happened since the last commit
    REDONE = "redone"  # aborted: the task goes back to its committed offsets
    LOST = "lost"


class ExactlyOnce:
    """Every task commits its own transaction, while it waits; they commit side by side."""

    commits_in_turn = True
    commits_together = False
    commit_before_processing: CommitBeforeProcessing | None = None

    def __init__(
        self,
        consumer: AIOKafkaConsumer,
        app_id: str,
        group_id: str,
        from_latest: bool,
        counters: Counters,
        telemetry: Telemetry,
        new_outputs: Callable[[str], Outputs],
    ):
        self._consumer = consumer
        self._app_id = app_id
        self._new_outputs = new_outputs  # a task's outputs through a producer with this transactional id
        self._outputs: dict[TaskId, Outputs] = {}
        self._group_id = group_id
        self._from_latest = from_latest
        self._counters = counters
        self._telemetry = telemetry
        self._committed: dict[Task, dict[TopicPartition, int]] = {}
        self._sent_at_begin: dict[Task, int] = {}

    def outputs_for(self, task_id: TaskId) -> Outputs:
        outputs = self._outputs[task_id] = self._new_outputs(f"{self._app_id}-{task_id.processor}-{task_id.partition}")
        return outputs

    async def claim(self, task: Task) -> None:
        """`init_transactions` fences the task's previous owner; the offsets it committed are then
        final, so the task starts from them, whatever the consumer fetched before."""
        try:
            await self._outputs[task.id].producer.start()
        except FENCED as error:
            raise self._fenced(task, error) from error
        await self._begin(task)
        self._committed[task] = await self._committed_positions(task)
        self._rewind(task, self._committed[task])

    async def commit(self, task_commits: list[TaskCommit]) -> Committed:
        outcomes = await asyncio.gather(*(self._commit(task_commit) for task_commit in task_commits))
        committed = Committed()
        for task_commit, outcome in zip(task_commits, outcomes, strict=True):
            if outcome is _Outcome.COMMITTED:
                committed.durable.append(task_commit)
            elif outcome is _Outcome.UNCHANGED:
                committed.unchanged.append(task_commit)
            elif outcome is _Outcome.LOST:
                committed.lost.append(task_commit.task)
        return committed

    async def release(self, task: Task) -> None:
        try:
            if task in self._sent_at_begin and self._dirty(task, task.next_offsets):
                await self._abort(task, rewind=False)
        except TaskLost:
            pass  # logged where it was found
        finally:
            self._forget(task)
            await self._outputs.pop(task.id).producer.stop()

    async def _committed_positions(self, task: Task) -> dict[TopicPartition, int]:
        """Where each input resumes: its committed offset, else the reset policy's end of the partition."""
        positions: dict[TopicPartition, int] = {}
        for tp in task.inputs:
            committed = await self._consumer.committed(tp)
            if committed is None:
                edge = await (self._consumer.end_offsets if self._from_latest else self._consumer.beginning_offsets)(
                    [tp]
                )
                committed = edge[tp]
            positions[tp] = committed
        return positions

    def _rewind(self, task: Task, offsets: Mapping[TopicPartition, int]) -> None:
        for tp, offset in offsets.items():
            self._consumer.seek(tp, offset)
        task.rewind(offsets)

    def _fenced(self, task: Task, error: Exception) -> TaskLost:
        """The task's transactional id was initialized by its next owner: this worker is a zombie for it."""
        self._forget(task)
        self._counters.fenced_tasks += 1
        lost = TaskLost(f"task {task.id} was taken over by another worker: {error!r}")
        log.warning("%s; its open transaction is dropped", lost)
        return lost

    def _dirty(self, task: Task, offsets: Mapping[TopicPartition, int]) -> bool:
        outputs = self._outputs[task.id]
        produced = outputs.sent + outputs.pending
        moved_on = offsets != self._committed.get(task, {})
        stored = task.state is not None and task.state.has_unflushed_writes
        return produced > self._sent_at_begin[task] or moved_on or stored

    async def _begin(self, task: Task) -> None:
        outputs = self._outputs[task.id]
        await outputs.producer.begin_transaction()
        self._sent_at_begin[task] = outputs.sent + outputs.pending

    def _forget(self, task: Task) -> None:
        self._committed.pop(task, None)
        self._sent_at_begin.pop(task, None)

    async def _commit(self, task_commit: TaskCommit) -> _Outcome:
        task, offsets = task_commit.task, task_commit.offsets
        if task not in self._sent_at_begin:
            return _Outcome.LOST
        if not self._dirty(task, offsets):
            return _Outcome.UNCHANGED
        outputs = self._outputs[task.id]
        started = time.monotonic()
        try:
            with self._telemetry.tracer.span("commit transaction", {TASK: str(task.id)}):
                # Every batch acknowledged first: aiokafka commits a transaction without those refused.
                await outputs.wait_acked()
                changed = {tp: offset for tp, offset in offsets.items() if self._committed[task].get(tp) != offset}
                if changed:
                    await outputs.producer.send_offsets_to_transaction(changed, self._group_id)
                await outputs.producer.commit_transaction()
        except FENCED as error:
            self._fenced(task, error)
            return _Outcome.LOST
        except OutputsRefused as refused:
            return await self._redo_without(task, refused)
        except AUTHORIZATION_ERRORS:
            raise  # redone, it would be refused again
        except KafkaError as error:
            log.warning("transaction of task %s failed to commit (%r): aborting and redoing its work", task.id, error)
            try:
                await self._abort(task, rewind=True)
            except TaskLost:
                return _Outcome.LOST
            await self._begin(task)
            return _Outcome.REDONE
        elapsed = time.monotonic() - started
        self._counters.commits += 1
        self._counters.commit_seconds += elapsed
        if self._telemetry.metrics.enabled:
            self._telemetry.metrics.record_commit(elapsed * 1000, transactional=True)
        self._committed[task].update(offsets)
        await self._begin(task)
        return _Outcome.COMMITTED

    async def _redo_without(self, task: Task, refused: OutputsRefused) -> _Outcome:
        """The broker refused outputs: abort, find which (each alone, in transactions aborted too), and
        redo the work, with the input records of those going to the processing policy."""
        log.warning(
            "transaction of task %s: %s; aborting it, finding the refused records, redoing its work", task.id, refused
        )
        try:
            await self._abort(task, rewind=False)
            found = await self._outputs[task.id].probe(refused.records)
        except TaskLost:
            return _Outcome.LOST
        except FENCED as error:
            self._fenced(task, error)
            return _Outcome.LOST
        task.refuse(
            {
                (raw.topic, raw.partition, raw.offset): broker_refusal(
                    refusal.output.topic,
                    refusal.output.key,
                    refusal.output.value,
                    refusal.output.headers,
                    refusal.error,
                )
                for refusal in found
                if (raw := refusal.output.source) is not None
            }
        )
        if any(refusal.output.source is None for refusal in found):
            raise StopWithoutCommit(
                f"task {task.id}: the broker refused a record no input record sent (a changelog record, a dead "
                f"letter or the output of a punctuation or a flush): {found[0].error!r}"
            )
        self._rewind(task, self._committed[task])
        await self._begin(task)
        return _Outcome.REDONE

    async def _abort(self, task: Task, rewind: bool) -> None:
        self._counters.aborted_transactions += 1
        try:
            with self._telemetry.tracer.span("abort transaction", {TASK: str(task.id)}):
                await self._outputs[task.id].producer.abort_transaction()
        except FENCED as error:
            raise self._fenced(task, error) from error
        except KafkaError as error:
            raise StopWithoutCommit(f"task {task.id} could not abort its transaction: {error!r}") from error
        finally:
            self._outputs[task.id].discard()
            if task.state is not None:
                task.state.discard()
        if rewind and task in self._committed:
            self._rewind(task, self._committed[task])
