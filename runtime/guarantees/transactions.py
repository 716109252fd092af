"""Exactly-once: each task's outputs, changelog writes and input offsets commit in one Kafka transaction.

aiokafka has no KIP-447, so every task has its own transactional producer with the stable id
`{app}-{processor}-{partition}`: whoever owns the task next calls `init_transactions` with the same id
and fences the previous owner. A transaction's store writes reach the store only after it commits,
and are dropped when it aborts, so a crash never leaves a local store ahead of its changelog.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import InvalidProducerEpoch, KafkaError, ProducerFenced

from runtime.counters import Counters
from runtime.task.task import Task, TaskFenced
from runtime.telemetry import Telemetry
from runtime.telemetry.metrics import TASK

log = logging.getLogger(__name__)

FENCED = (ProducerFenced, InvalidProducerEpoch)

Rewind = Callable[[Task, Mapping[TopicPartition, int]], None]
Positions = Callable[[Task], Awaitable[dict[TopicPartition, int]]]


class TransactionFailed(RuntimeError):
    """A transaction could neither commit nor abort: the task's producer is unusable."""


class ExactlyOnce:
    """Every task commits its own transaction, at most `interval_s` after its first uncommitted record."""

    def __init__(
        self,
        group_id: str,
        interval_s: float,
        counters: Counters,
        positions: Callable[[Task], Awaitable[dict[TopicPartition, int]]],
        rewind: Rewind,
        telemetry: Telemetry,
    ):
        self._telemetry = telemetry
        self._group_id = group_id
        self._interval_s = interval_s
        self._counters = counters
        self._positions = positions
        self._rewind = rewind
        self._committed: dict[Task, dict[TopicPartition, int]] = {}
        self._opened: dict[Task, float] = {}
        self._sent_at_begin: dict[Task, int] = {}

    async def start(self, task: Task) -> None:
        """Start the task's producer: `init_transactions` fences the task's previous owner."""
        try:
            await task.outputs.producer.start()
        except FENCED as error:
            raise self._fenced(task, error) from error
        await self._begin(task)

    async def ready(self, task: Task) -> None:
        """Once the previous owner is fenced, its committed offsets are final: read and seek to them."""
        self._committed[task] = await self._positions(task)
        self._rewind(task, self._committed[task])

    async def before_batch(self, task: Task, tp: TopicPartition, records: list[Any]) -> None:
        return None

    def commit_due_in(self, task: Task) -> float | None:
        if not self._dirty(task):
            return None
        return max(0.0, self._opened[task] + self._interval_s - time.monotonic())

    async def after_batch(self, task: Task) -> None:
        if self._dirty(task) and time.monotonic() - self._opened[task] >= self._interval_s:
            await self._commit(task, reopen=True)

    async def commit(self, tasks: Iterable[Task]) -> None:
        return None  # each task commits its own transaction

    async def finish(self, tasks: Iterable[Task], commit: bool) -> None:
        for task in tasks:
            if task not in self._opened:
                await task.outputs.producer.stop()
                continue
            try:
                if commit and task in self._committed:
                    await self._commit(task, reopen=False)
                else:
                    await self._abort(task, rewind=False)
            except TaskFenced:
                pass  # logged where it was found
            finally:
                self._forget(task)
                await task.outputs.producer.stop()

    def _fenced(self, task: Task, error: Exception) -> TaskFenced:
        """The task's transactional id was initialized by its next owner: this worker is a zombie for it."""
        self._forget(task)
        self._counters.fenced_tasks += 1
        fenced = TaskFenced(f"task {task.id} was taken over by another worker: {error!r}")
        log.warning("%s; its open transaction is dropped", fenced)
        return fenced

    def _dirty(self, task: Task) -> bool:
        if task not in self._opened:
            return False
        produced = task.outputs.sent + task.outputs.pending
        moved_on = task.next_offsets != self._committed.get(task, {})
        stored = task.state is not None and task.state.has_unflushed_writes
        return produced > self._sent_at_begin[task] or moved_on or stored

    async def _begin(self, task: Task) -> None:
        await task.outputs.producer.begin_transaction()
        self._opened[task] = time.monotonic()
        self._sent_at_begin[task] = task.outputs.sent + task.outputs.pending

    def _forget(self, task: Task) -> None:
        self._opened.pop(task, None)
        self._committed.pop(task, None)
        self._sent_at_begin.pop(task, None)

    async def _commit(self, task: Task, reopen: bool) -> None:
        producer = task.outputs.producer
        offsets = dict(task.next_offsets)
        started = time.monotonic()
        try:
            if task.state is not None:
                task.state.log_changes()
            with self._telemetry.tracer.span("commit transaction", {TASK: str(task.id)}):
                await task.outputs.flush()
                changed = {tp: offset for tp, offset in offsets.items() if self._committed[task].get(tp) != offset}
                if changed:
                    await producer.send_offsets_to_transaction(changed, self._group_id)
                await producer.commit_transaction()
        except FENCED as error:
            raise self._fenced(task, error) from error
        except KafkaError as error:
            log.warning("transaction of task %s failed to commit (%r): aborting and redoing its work", task.id, error)
            await self._abort(task, rewind=reopen)
            if reopen:
                await self._begin(task)
            return
        elapsed = time.monotonic() - started
        self._counters.commits += 1
        self._counters.commit_seconds += elapsed
        if self._telemetry.metrics.enabled:
            self._telemetry.metrics.record_commit(elapsed * 1000, transactional=True)
        self._committed[task].update(offsets)
        if task.state is not None:
            task.state.flush()  # the store catches up with what its changelog now holds
        if reopen:
            await self._begin(task)

    async def _abort(self, task: Task, rewind: bool) -> None:
        self._counters.aborted_transactions += 1
        try:
            with self._telemetry.tracer.span("abort transaction", {TASK: str(task.id)}):
                await task.outputs.producer.abort_transaction()
        except FENCED as error:
            raise self._fenced(task, error) from error
        except KafkaError as error:
            raise TransactionFailed(f"task {task.id} could not abort its transaction: {error!r}") from error
        finally:
            task.outputs.discard()
            if task.state is not None:
                task.state.discard()
        if rewind and task in self._committed:
            self._rewind(task, self._committed[task])
