"""One worker: one consumer, one poll loop feeding the task actors, and the commit cycle."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition

from processors.serdes import resolve_serde
from runtime.config import AppConfig, Guarantee
from runtime.counters import Counters
from runtime.global_stores.stores import GlobalStores
from runtime.guarantees.commit import AtLeastOnce, AtMostOnce, CommitStrategy
from runtime.guarantees.transactions import ExactlyOnce
from runtime.kafka.connection import Clients, start_with_retries
from runtime.kafka.outputs import Outputs
from runtime.kafka.topics import ensure_topics
from runtime.kafka.unparseable import getmany
from runtime.state.restore import ChangelogRestorer
from runtime.state.task_state import TaskState
from runtime.task.failures import FailureHandler, RecordFailed, Stage
from runtime.task.task import Task, TaskFenced, TaskId, TaskServices, build_task
from runtime.telemetry import Telemetry
from runtime.worker.backpressure import END_OF_RUN, Backpressure
from runtime.worker.collector import bulk_allocations, freeze_what_lives
from stores import StoreError

log = logging.getLogger(__name__)

POLL_TIMEOUT_MS = 100
STARTING = "starting"
FENCED = "fenced"
CAUGHT_UP_CHECK_S = 0.2


class WorkerFailed(RuntimeError):
    """A task failed under the `fail` policy, or the output path failed."""


class Worker:
    """Runs every task assigned to this process until stopped, caught up, or failed.

    `telemetry` defaults to what the app's `telemetry:` section asks for, installed as the process's
    global providers so that processors' own spans are exported too; the worker shuts that one down
    when it stops (a telemetry passed in is the caller's to shut down). It is `worker.telemetry` for
    the parts of the engine that report to it.
    """

    def __init__(
        self,
        config: AppConfig,
        bootstrap_servers: str,
        until_caught_up: bool = False,
        telemetry: Telemetry | None = None,
    ):
        self.config = config
        self._owns_telemetry = telemetry is None
        self.telemetry = telemetry or Telemetry(config.telemetry, config.app_id, config.group_id, install_global=True)
        self.counters = Counters()
        self.tasks: dict[TaskId, Task] = {}
        self._clients = Clients(config, bootstrap_servers)
        self._until_caught_up = until_caught_up
        self._stop_requested = asyncio.Event()
        self._commit_lock = asyncio.Lock()
        self._subscribers: dict[TopicPartition, list[Task]] = defaultdict(list)
        self._end_offsets: dict[TopicPartition, int] | None = None
        self._finished_elsewhere: set[TopicPartition] = set()
        self._failure: BaseException | None = None
        self._started = time.monotonic()
        self._background: set[asyncio.Task[None]] = set()
        self.ready = asyncio.Event()

    def stop(self) -> None:
        """Stop taking records, finish those in flight, commit, close (safe from a signal handler)."""
        self._stop_requested.set()

    @property
    def paused_partitions(self) -> set[TopicPartition]:
        backpressure: Backpressure | None = getattr(self, "_backpressure", None)
        return backpressure.paused() if backpressure is not None else set()

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            if self._owns_telemetry:
                self.telemetry.shutdown()  # exports what is still buffered
        if self._failure is not None:
            raise WorkerFailed(str(self._failure)) from self._failure

    async def _run(self) -> None:
        config = self.config
        admin = self._clients.admin()
        await start_with_retries("admin client", self._clients.bootstrap_servers, admin.start)
        try:
            partition_counts = await ensure_topics(admin, config)
        finally:
            await admin.close()
        self._serdes = {
            name: (resolve_serde(topic.key_serde), resolve_serde(topic.value_serde))
            for name, topic in config.topics.items()
        }
        self.global_stores = GlobalStores(config, self._clients, self.counters)
        try:
            try:
                attributes = {"kafka_actor.global_stores": sorted(config.global_stores)}
                with self.telemetry.tracer.span("global-store bootstrap", attributes), bulk_allocations():
                    await self.global_stores.bootstrap(partition_counts)
            except StoreError as error:  # a refused snapshot, a store in use: the message says it all
                raise WorkerFailed(str(error)) from error
            freeze_what_lives()  # modules, clients and the global stores' tables: they live as long as the worker
            self._follower = asyncio.create_task(self.global_stores.follow(), name="global stores")
            try:
                await self._run_clients(partition_counts)
            finally:
                self._follower.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._follower
        finally:
            await self.global_stores.close()
        if self._failure is not None:
            raise WorkerFailed(str(self._failure)) from self._failure

    async def _run_clients(self, partition_counts: dict[str, int]) -> None:
        config = self.config
        exactly_once = config.guarantee is Guarantee.EXACTLY_ONCE
        # Under exactly-once every task has its own transactional producer instead of this shared one.
        producer = None if exactly_once else self._clients.producer()
        consumer = self._clients.consumer()
        if producer is not None:
            await start_with_retries("producer", self._clients.bootstrap_servers, producer.start)
        try:
            await start_with_retries("consumer", self._clients.bootstrap_servers, consumer.start)
            try:
                await self._run_with(consumer, producer, partition_counts)
            finally:
                await consumer.stop()
        finally:
            if producer is not None:
                await producer.stop()

    async def _run_with(
        self, consumer: AIOKafkaConsumer, producer: AIOKafkaProducer | None, partition_counts: dict[str, int]
    ) -> None:
        config = self.config
        self._consumer = consumer
        self._partition_counts = partition_counts
        self._shared_outputs = Outputs(producer, partition_counts, self.counters) if producer is not None else None
        failures = FailureHandler(
            config.app_id,
            {Stage.DESERIALIZATION: config.errors.deserialization, Stage.PROCESSING: config.errors.processing},
            config.dead_letter_topic,
            self.counters,
        )
        self._backpressure = Backpressure(consumer, config.queue, self.counters)
        self._commits = self._commit_strategy()
        restorer = ChangelogRestorer(self._restore_consumer, self.counters, self.telemetry.tracer)
        self._services = TaskServices(
            failures, self.counters, self._serdes, self._commits,
            self._backpressure.after_dequeue, restorer.restore, self._on_ready, self.global_stores.views,
            self.telemetry,
        )  # fmt: skip
        self._register_metrics(restorer)
        inputs = config.input_topics()
        if self._until_caught_up:
            tps = [TopicPartition(topic, p) for topic in inputs for p in range(partition_counts[topic])]
            self._end_offsets = await consumer.end_offsets(tps)
        consumer.subscribe(inputs, listener=_Rebalance(self))
        committer = asyncio.create_task(self._commit_periodically(), name="commit cycle")
        try:
            await self._poll_loop()
        finally:
            committer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await committer
            await self._shutdown()

    def _commit_strategy(self) -> CommitStrategy:
        config, consumer = self.config, self._consumer
        if config.guarantee is Guarantee.EXACTLY_ONCE:
            return ExactlyOnce(config.group_id, config.commit_interval_s, self.counters, self._committed_positions,
                               self._rewind, self.telemetry)  # fmt: skip
        assert self._shared_outputs is not None
        if config.guarantee is Guarantee.AT_MOST_ONCE:
            return AtMostOnce(consumer, self._shared_outputs, self.counters, self.telemetry)
        return AtLeastOnce(consumer, self._shared_outputs, self.counters, self.telemetry)

    def _register_metrics(self, restorer: ChangelogRestorer) -> None:
        """Levels the metrics read when they are collected (in the exporter's thread: reads only)."""
        metrics = self.telemetry.metrics
        if not metrics.enabled:
            return
        metrics.register_counters(self.counters)
        metrics.register_consumer_lag(self._consumer_lag)
        metrics.register_queue_depth(lambda: {str(task.id): task.queued for task in list(self.tasks.values())})
        metrics.register_paused_partitions(lambda: len(self._backpressure.paused()))
        metrics.register_restore(lambda: dict(restorer.partitions))
        metrics.register_global_store_offsets(self.global_stores.positions)

    def _consumer_lag(self) -> dict[tuple[str, int], int]:
        """Per assigned partition: records between the end (the last stable offset under read_committed)
        and the next record its tasks will process; partitions no task has processed from yet are left out."""
        lag: dict[tuple[str, int], int] = {}
        for tp in self._consumer.assignment():
            end = self._consumer.last_stable_offset(tp)
            if end is None or end < 0:
                end = self._consumer.highwater(tp)
            positions = [task.next_offsets[tp] for task in self._subscribers.get(tp, ()) if tp in task.next_offsets]
            if end is not None and positions:
                lag[(tp.topic, tp.partition)] = max(0, end - min(positions))
        return lag

    def _task_outputs(self, task_id: TaskId) -> Outputs:
        if self._shared_outputs is not None:
            return self._shared_outputs
        producer = self._clients.producer(
            transactional_id=f"{self.config.app_id}-{task_id.processor}-{task_id.partition}",
            transaction_timeout_ms=self.config.transaction_timeout_ms,
            client_id=f"{self.config.app_id}-{task_id.processor}-{task_id.partition}",
        )
        return Outputs(producer, self._partition_counts, self.counters)

    async def _committed_positions(self, task: Task) -> dict[TopicPartition, int]:
        """Where each input of the task resumes: its committed offset, else the reset policy's offset."""
        positions: dict[TopicPartition, int] = {}
        latest = self.config.kafka.consumer.get("auto_offset_reset") == "latest"
        for tp in task.inputs:
            committed = await self._consumer.committed(tp)
            if committed is None:
                edge = await (self._consumer.end_offsets if latest else self._consumer.beginning_offsets)([tp])
                committed = edge[tp]
            positions[tp] = committed
        return positions

    def _rewind(self, task: Task, offsets: Mapping[TopicPartition, int]) -> None:
        for tp, offset in offsets.items():
            self._consumer.seek(tp, offset)
        task.rewind(offsets)

    def _restore_consumer(self) -> AIOKafkaConsumer:
        return self._clients.consumer(group_id=None, client_id=f"{self.config.app_id}-restore")

    async def _on_ready(self, task: Task) -> None:
        await self._commits.ready(task)
        self._backpressure.release(task.inputs, (STARTING, task.id))

    async def _poll_loop(self) -> None:
        consumer, backpressure = self._consumer, self._backpressure
        last_check = 0.0
        while not self._stop_requested.is_set() and self._failure is None:
            batches = await getmany(consumer, POLL_TIMEOUT_MS)
            for tp, records in batches.items():
                self.counters.consumed += len(records)
                for task in self._subscribers.get(tp, ()):
                    task.enqueue(tp, records)
                    backpressure.after_enqueue(task)
                if self._end_offsets is not None and records[-1].offset + 1 >= self._end_offsets.get(tp, 0):
                    backpressure.hold([tp], END_OF_RUN)
            self._check_tasks()
            if self._until_caught_up and time.monotonic() - last_check > CAUGHT_UP_CHECK_S:
                last_check = time.monotonic()
                if await self._caught_up() and not await self._internal_inputs_grew():
                    log.info("caught up with the end offsets present at start")
                    return

    def _check_tasks(self) -> None:
        if self._follower.done() and not self._follower.cancelled() and self._follower.exception() is not None:
            self._failure = self._follower.exception()
            log.error("following the global stores failed: %r", self._failure)
            return
        for task in list(self.tasks.values()):
            runner = task.runner
            if not runner.done() or runner.cancelled() or runner.exception() is None:
                continue
            error = runner.exception()
            if isinstance(error, TaskFenced):
                self._drop_fenced(task)
                continue
            self._failure = error
            log.error("task %s failed: %s", task.id, error)
            return

    def _drop_fenced(self, task: Task) -> None:
        """A zombie's task: stop fetching its inputs and forget it; the rebalance will take them away."""
        self._backpressure.hold(task.inputs, (FENCED, task.id))
        del self.tasks[task.id]
        for tp in task.inputs:
            self._subscribers[tp] = [t for t in self._subscribers.get(tp, []) if t is not task]
        task.close_state()
        self._background.add(asyncio.create_task(task.outputs.producer.stop()))

    async def _caught_up(self) -> bool:
        """Every input partition, ours or not, is processed up to the end offsets taken at start."""
        assert self._end_offsets is not None
        assignment = self._consumer.assignment()
        if not assignment or not self.ready.is_set():
            return False
        for tp in assignment:
            end = self._end_offsets.get(tp, 0)
            tasks = self._subscribers.get(tp, [])
            if not tasks or not all(task.idle and not task.starting for task in tasks):
                return False
            if all(task.next_offsets.get(tp, -1) >= end for task in tasks):
                continue
            if await self._consumer.position(tp) >= end:
                for task in tasks:
                    task.mark_caught_up(tp, end)
                continue
            return False
        # Partitions another member holds (or a crashed one still holds until its session expires).
        for tp, end in self._end_offsets.items():
            if tp not in assignment and tp not in self._finished_elsewhere:
                committed = await self._consumer.committed(tp)
                if committed is None or committed < end:
                    return False
                self._finished_elsewhere.add(tp)
        return True

    async def _internal_inputs_grew(self) -> bool:
        """Inputs this app also writes (one stage feeding the next) may have grown since start:
        once the outputs so far are committed, their new ends become the ends of this run."""
        assert self._end_offsets is not None
        internal = {topic for spec in self.config.processors for topic in spec.outputs} & set(
            self.config.input_topics()
        )
        if not internal:
            return False
        if self.config.guarantee is Guarantee.EXACTLY_ONCE:
            await asyncio.sleep(2 * self.config.commit_interval_s)  # the tasks commit their transactions
        else:
            async with self._commit_lock:
                await self._commits.commit(list(self.tasks.values()))
        tps = [tp for tp in self._end_offsets if tp.topic in internal]
        ends = await self._consumer.end_offsets(tps)
        grown = {tp: end for tp, end in ends.items() if end > self._end_offsets[tp]}
        if not grown:
            return False
        for tp in grown:  # records fetched past the old end were dropped: fetch them again
            if tp in self._consumer.assignment():
                self._consumer.seek(tp, self._end_offsets[tp])
        self._end_offsets.update(grown)  # the tasks share this mapping
        self._finished_elsewhere -= set(grown)
        self._backpressure.release(grown, END_OF_RUN)
        log.info("inputs written by this app grew during the run: going on to %s", grown)
        return True

    async def _commit_periodically(self) -> None:
        interval = self.config.commit_interval_s
        while True:
            await asyncio.sleep(interval)
            try:
                async with self._commit_lock:
                    await self._commits.commit(list(self.tasks.values()))
            except Exception as error:
                self._failure = error
                log.error("producing outputs failed: %r", error)
                return

    async def _shutdown(self) -> None:
        tasks = list(self.tasks.values())
        await self._stop_tasks(tasks)
        # After a failed record, at-least-once commits what came before it; exactly-once aborts the open
        # transactions. A broken output path commits nothing: it would claim outputs that may be lost.
        commit = self._failure is None or (
            isinstance(self._failure, RecordFailed) and self.config.guarantee is not Guarantee.EXACTLY_ONCE
        )
        try:
            async with self._commit_lock:
                await self._commits.finish(tasks, commit)
        finally:
            for task in tasks:
                task.close_state()
            await asyncio.gather(*self._background, return_exceptions=True)
        log.info("stopped after %.1fs: %s", time.monotonic() - self._started, self.counters.snapshot())

    async def _stop_tasks(self, tasks: list[Task]) -> None:
        await asyncio.gather(*(task.stop(self.config.shutdown_timeout_s) for task in tasks))

    # Rebalance callbacks (called by aiokafka's group coordinator).

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        if not revoked:
            return
        self.counters.revocations += 1
        leaving = [task for task in self.tasks.values() if any(tp in revoked for tp in task.inputs)]
        await self._stop_tasks(leaving)
        async with self._commit_lock:
            try:
                await self._commits.finish(leaving, commit=True)
            except Exception as error:
                self._failure = error
        for task in leaving:
            task.close_state()
            del self.tasks[task.id]
        for tp in revoked:
            self._subscribers.pop(tp, None)
        self._backpressure.forget(revoked)
        log.info("revoked %d partitions, stopped tasks %s", len(revoked), [str(t.id) for t in leaving])

    def on_assigned(self, assigned: set[TopicPartition]) -> None:
        self.counters.assignments += 1
        by_partition: dict[int, set[TopicPartition]] = defaultdict(set)
        for tp in assigned:
            by_partition[tp.partition].add(tp)
        started = []
        for spec in self.config.processors:
            for partition, tps in by_partition.items():
                inputs = sorted((tp for tp in tps if tp.topic in spec.inputs), key=lambda tp: tp.topic)
                task_id = TaskId(spec.name, partition)
                if not inputs or task_id in self.tasks:
                    continue
                outputs = self._task_outputs(task_id)
                state = TaskState(self.config, spec, partition, outputs) if spec.stores else None
                task = build_task(
                    task_id, spec.processor_class(), self.config.app_id, spec.params,
                    frozenset(spec.outputs), inputs, outputs, self._services, self._end_offsets, state,
                )  # fmt: skip
                if state is not None or self.config.guarantee is Guarantee.EXACTLY_ONCE:
                    self._backpressure.hold(inputs, (STARTING, task_id))
                self.tasks[task_id] = task
                for tp in inputs:
                    self._subscribers[tp].append(task)
                task.start()
                started.append(str(task_id))
        self.ready.set()
        log.info("assigned %d partitions, started tasks %s", len(assigned), started)


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, worker: Worker):
        self._worker = worker

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self._worker.on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self._worker.on_assigned(set(assigned))
