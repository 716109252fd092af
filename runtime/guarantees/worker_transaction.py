"""Exactly-once: step 2 of the commit protocol as one Kafka transaction per worker (KIP-447).

One transactional producer holds every task's outputs, changelog writes and input offsets, and one
transaction commits them all. A zombie is fenced by the consumer group rather than by a task's own
transactional id: the offsets go with the member's generation (runtime/kafka/transactional_offsets.py),
which the group coordinator refuses once the group moved on, and every transaction that wrote anything
carries all its tasks' offsets, so none commits without that check. A task's next owner starts from the
offsets committed once no transaction holds them pending (runtime/kafka/stable_offsets.py).

The transactional id is one a restart of the worker takes again (runtime/worker/transactional_ids.py: a
static member's `{app}-{group instance id}`, else a slot of its state directory), so a restart's start aborts
what the crashed worker left open; a worker under a new id leaves that to the coordinator, after
`transaction_timeout_ms`, until which readers of its outputs and its tasks' next owners wait.

A task that leaves with work in the open transaction (it failed, or was lost without a commit) spoils it
for every task: it is aborted at once, and at the next commit, in every task's turn, aborted again and
every task redone from its committed offsets.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import InvalidProducerEpoch, KafkaError, ProducerFenced

from runtime.counters import Counters
from runtime.errors import StopWithoutCommit
from runtime.guarantees.commit import Committed
from runtime.kafka.aiokafka_internals import consumer_client, group_generation
from runtime.kafka.authorization import AUTHORIZATION_ERRORS
from runtime.kafka.cooperative_coordinator import join_ended
from runtime.kafka.outputs import Outputs, OutputsRefused
from runtime.kafka.record_limits import broker_refusal
from runtime.kafka.stable_offsets import stable_committed
from runtime.kafka.transactional_offsets import GroupMembershipLost, commit_offsets_in_transaction
from runtime.task.commits import CommitBeforeProcessing, TaskCommit
from runtime.task.task import Task, TaskId
from runtime.telemetry import Telemetry
from runtime.telemetry.metrics import TASKS

log = logging.getLogger(__name__)

FENCED = (ProducerFenced, InvalidProducerEpoch)


class WorkerTransaction:
    """Every task's work in one transaction, committed while every task waits."""

    commits_in_turn = True
    commits_together = True
    commit_before_processing: CommitBeforeProcessing | None = None

    def __init__(
        self,
        consumer: AIOKafkaConsumer,
        group_id: str,
        from_latest: bool,
        counters: Counters,
        telemetry: Telemetry,
        outputs: Outputs,
        transaction_timeout_s: float,
    ):
        self._consumer = consumer
        self._transaction_timeout_s = transaction_timeout_s
        self._group_id = group_id
        self._from_latest = from_latest
        self._counters = counters
        self._telemetry = telemetry
        self._outputs = outputs
        self._committed: dict[Task, dict[TopicPartition, int]] = {}
        self._sent_at_begin: int | None = None  # None: no transaction open
        self._opening = asyncio.Lock()
        self._spoilt = False

    def outputs_for(self, task_id: TaskId) -> Outputs:
        return self._outputs

    async def claim(self, task: Task) -> None:
        """The task starts from the offsets its previous owner committed, once no transaction holds them."""
        async with self._opening:
            if self._sent_at_begin is None:
                await self._begin()
        positions = await stable_committed(consumer_client(self._consumer), self._group_id, task.inputs)
        missing = [tp for tp, offset in positions.items() if offset is None]
        if missing:
            edge = await (self._consumer.end_offsets if self._from_latest else self._consumer.beginning_offsets)(
                missing
            )
            positions.update(edge)
        committed = {tp: int(offset) for tp, offset in positions.items() if offset is not None}
        self._committed[task] = committed
        self._rewind(task, committed)

    async def commit(self, task_commits: list[TaskCommit]) -> Committed:
        """Under `_opening`: a task claimed meanwhile (assigned during the commit) starts once the next
        transaction is open, not between this one's commit and that begin."""
        async with self._opening:
            return await self._commit(task_commits)

    async def _commit(self, task_commits: list[TaskCommit]) -> Committed:
        tasks = [task_commit.task for task_commit in task_commits if task_commit.task in self._committed]
        if self._spoilt:
            await self._abort(tasks, "a task left with work in it")
            return Committed()
        if not any(self._dirty(task_commit.task, task_commit.offsets) for task_commit in task_commits):
            return Committed(unchanged=task_commits)
        offsets = {tp: offset for task_commit in task_commits for tp, offset in task_commit.offsets.items()}
        started = time.monotonic()
        try:
            with self._telemetry.tracer.span("commit transaction", {TASKS: [str(task.id) for task in tasks]}):
                # Every batch acknowledged first: aiokafka commits a transaction without those refused.
                await self._outputs.wait_acked()
                await self._commit_offsets(offsets)
                await self._outputs.producer.commit_transaction()
        except (*FENCED, GroupMembershipLost) as error:
            return await self._taken_over(tasks, error)
        except OutputsRefused as refused:
            await self._redo_without(tasks, refused)
            return Committed()
        except AUTHORIZATION_ERRORS:
            raise  # redone, it would be refused again
        except KafkaError as error:
            await self._abort(tasks, f"the transaction failed to commit ({error!r})")
            return Committed()
        elapsed = time.monotonic() - started
        self._counters.commits += 1
        self._counters.commit_seconds += elapsed
        if self._telemetry.metrics.enabled:
            self._telemetry.metrics.record_commit(elapsed * 1000, transactional=True)
        for task_commit in task_commits:
            if task_commit.task in self._committed:
                self._committed[task_commit.task].update(task_commit.offsets)
        await self._begin()
        return Committed(task_commits)

    async def _commit_offsets(self, offsets: Mapping[TopicPartition, int]) -> None:
        """With the member's generation as the offsets leave. A cooperative rebalance goes on while the tasks
        commit: when the group moved to the next generation as they went, the coordinator refuses them by the
        old one, and once the member joined it they go again with the new one (the member still owns them: no
        partition moves before its owner revoked it). The join is awaited no longer than the transaction may
        stay open. A member dropped from the group, or that joined as another, loses its tasks."""
        sent = group_generation(self._consumer)
        try:
            await commit_offsets_in_transaction(self._outputs.producer, offsets, sent)
        except GroupMembershipLost:
            await join_ended(self._consumer, self._transaction_timeout_s)
            now = group_generation(self._consumer)
            if now.member_id != sent.member_id or now.generation_id <= sent.generation_id:
                raise
            log.info("the group moved to generation %d as the offsets went: sending them with it", now.generation_id)
            await commit_offsets_in_transaction(self._outputs.producer, offsets, now)

    async def release(self, task: Task) -> None:
        """A task leaving after its final commit leaves nothing behind; one leaving with work in the open
        transaction spoils it: aborted now (others go on writing into the next one), redone at the next commit."""
        committed = self._committed.pop(task, None)
        if committed is None or self._sent_at_begin is None:
            return
        moved_on = task.next_offsets != committed
        if not moved_on and (task.state is None or not task.state.has_unflushed_writes):
            return
        log.warning("task %s leaves with work in the worker's transaction: aborting it, redoing every task", task.id)
        self._counters.aborted_transactions += 1
        try:
            await self._drop_transaction()
        finally:
            if task.state is not None:
                task.state.discard()
        await self._begin()
        self._spoilt = True

    def _rewind(self, task: Task, offsets: Mapping[TopicPartition, int]) -> None:
        for tp, offset in offsets.items():
            self._consumer.seek(tp, offset)
        task.rewind(offsets)

    def _dirty(self, task: Task, offsets: Mapping[TopicPartition, int]) -> bool:
        produced = self._outputs.sent + self._outputs.pending
        moved_on = offsets != self._committed.get(task, {})
        stored = task.state is not None and task.state.has_unflushed_writes
        return produced > (self._sent_at_begin or 0) or moved_on or stored

    async def _begin(self) -> None:
        await self._outputs.producer.begin_transaction()
        self._sent_at_begin = self._outputs.sent + self._outputs.pending
        self._spoilt = False

    async def _taken_over(self, tasks: list[Task], error: Exception) -> Committed:
        """The group moved on without this worker (its generation is over), or the transaction outlived its
        timeout: its tasks belong to other workers now, and the transaction commits nothing."""
        self._counters.fenced_tasks += len(tasks)
        for task in tasks:
            log.warning("task %s was taken over by another worker: %r; its open transaction is dropped", task.id, error)
        self._counters.aborted_transactions += 1
        try:
            if isinstance(error, GroupMembershipLost):
                await self._drop_transaction()
            else:  # the coordinator aborted it, as it outlived its timeout, and fenced this producer
                self._outputs.discard()
                await self._outputs.renew_producer()
        finally:
            for task in tasks:
                self._committed.pop(task, None)
                if task.state is not None:
                    task.state.discard()
        await self._begin()
        return Committed(lost=tasks)

    async def _redo_without(self, tasks: list[Task], refused: OutputsRefused) -> None:
        """The broker refused outputs: abort, find which (each alone, in transactions aborted too), and redo
        every task's work, with the input records of those going to their task's processing policy."""
        log.warning("the worker's transaction: %s; aborting it, finding the refused records, redoing the work", refused)
        await self._abort(tasks, None)
        found = await self._outputs.probe(refused.records)
        by_input = {tp: task for task in tasks for tp in task.inputs}
        for refusal in found:
            raw = refusal.output.source
            if raw is None:
                raise StopWithoutCommit(
                    f"the broker refused a record no input record sent (a changelog record, a dead letter or the "
                    f"output of a punctuation or a flush): {found[0].error!r}"
                )
            task = by_input.get(TopicPartition(raw.topic, raw.partition))
            if task is not None:
                output = refusal.output
                task.refuse(
                    {
                        (raw.topic, raw.partition, raw.offset): broker_refusal(
                            output.topic, output.key, output.value, output.headers, refusal.error
                        )
                    }
                )
        await self._begin()

    async def _abort(self, tasks: list[Task], why: str | None) -> None:
        """Abort the open transaction and send every task back to its committed offsets (in their turns)."""
        if why is not None:
            log.warning("the worker's transaction: %s; aborting it and redoing every task's work", why)
        self._counters.aborted_transactions += 1
        try:
            with self._telemetry.tracer.span("abort transaction", {TASKS: [str(task.id) for task in tasks]}):
                await self._drop_transaction()
        finally:
            for task in tasks:
                if task.state is not None:
                    task.state.discard()
        for task in tasks:
            self._rewind(task, self._committed[task])
        if why is not None:
            await self._begin()

    async def _drop_transaction(self) -> None:
        """Abort the open transaction; a producer fenced meanwhile (the coordinator aborted the transaction as it
        outlived its timeout) is replaced by one with the same id."""
        try:
            await self._outputs.producer.abort_transaction()
        except FENCED:
            self._outputs.discard()
            await self._outputs.renew_producer()
        except KafkaError as error:
            raise StopWithoutCommit(f"the worker's transaction could not be aborted: {error!r}") from error
        finally:
            self._outputs.discard()
