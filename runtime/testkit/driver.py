"""Run an app's processors in the test's own process, on in-memory topics, in milliseconds.

The driver builds what a worker builds for an app: a task per processor and partition, with its
context, record loop, stores (in a temporary state directory), error policies and output path, and
the global stores, all of them the runtime's own code. Only Kafka is replaced: records are appended
to in-memory topics (runtime/testkit/topics.py), and the driver hands them to the tasks that read those
topics, as the poll loop would. Every task is assigned from the start, as on a worker that got
every partition.

Each call that puts records in, or moves time, runs the app until it has nothing left to do: every
record delivered (those sent to a topic another processor reads included), every punctuation due
run, then, with `auto_commit` (the default), a commit of every task by the runtime's commit
protocol, after which records an exactly-once app sent become visible and are delivered in turn.
Reads see what a read_committed consumer sees.

A record that fails under the `fail` policy, or a processor failing in `init`, `flush` or a
punctuation, raises what would stop a worker (`RecordFailed`, `StopAfterCommit`), the processor's
exception as its cause, after the commit the worker would make before stopping; the driver then
takes nothing more.
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from aiokafka import TopicPartition

from processors.serdes import Serde
from runtime.config import AppConfig, Guarantee, ProcessorConfig
from runtime.config.loading import load_app, parse_app
from runtime.config.telemetry import TelemetryConfig
from runtime.counters import Counters
from runtime.errors import StopAfterCommit
from runtime.garbage_collection import bulk_allocations
from runtime.global_stores.changes import Failed
from runtime.global_stores.store import GlobalStore, OnFailures, dead_letter_handler, set_aside
from runtime.guarantees.commit import CommitCycle
from runtime.kafka.outputs import Outputs
from runtime.kafka.record_limits import TopicLimits
from runtime.kafka.topic_serdes import topic_serdes
from runtime.kafka.topics import changelog_partitions, declared_configs, producer_options, topic_limits
from runtime.task.assembly import assemble_task
from runtime.task.failures import FailureHandler
from runtime.task.task import Task, TaskId, TaskServices
from runtime.telemetry import Telemetry
from runtime.testkit.clock import ManualClock
from runtime.testkit.commits import MemoryCommits
from runtime.testkit.records import DeadLetter, TopicRecord
from runtime.testkit.topics import DEFAULT_BATCH_SIZE, MemoryProducer, Topics
from stores import BufferedKeyValueStore, ReadOnlyView, SessionView, TableView, TtlView, VersionedTableView, WindowView
from stores.partitioner import partition_for

MAX_ROUNDS = 10_000
"""Commits in a row that each made new records visible: an app that feeds itself without end."""


class AppDriver:
    """An app's processors on in-memory topics; a context manager (or call `close`).

    `app`: the app's config, or a mapping of it as its YAML would hold it (`from_yaml` reads a file);
    `state_dir`: where the stores live (a temporary directory, removed at close, by default);
    `wall_clock_ms`: the epoch ms the wall clock starts at (now, by default); `partitions`: the
    partition counts of topics the app reads but does not declare (a global store's, from
    another system), one by default.
    """

    def __init__(
        self,
        app: AppConfig | Mapping[str, Any],
        *,
        auto_commit: bool = True,
        state_dir: Path | None = None,
        wall_clock_ms: int | None = None,
        partitions: Mapping[str, int] | None = None,
    ):
        config = app if isinstance(app, AppConfig) else parse_app(dict(app))
        self._temporary = None if state_dir is not None else Path(tempfile.mkdtemp(prefix="testkit-"))
        self.config = config.model_copy(update={"state_dir": state_dir or self._temporary})
        self.auto_commit = auto_commit
        self.clock = ManualClock(time.time_ns() // 1_000_000 if wall_clock_ms is None else wall_clock_ms)
        self.counters = Counters()
        self._failure: BaseException | None = None
        self._runner = asyncio.Runner()
        self._serdes: dict[str, tuple[Serde, Serde]] = topic_serdes(self.config)
        counts = {name: topic.partitions for name, topic in self.config.topics.items()}
        changelogs = {topic: count for topic, (count, _) in changelog_partitions(self.config, counts).items()}
        undeclared = {spec.topic: 1 for spec in self.config.global_stores.values() if spec.topic not in counts}
        self.topics = Topics({**undeclared, **(partitions or {}), **counts, **changelogs}, self.clock)
        self._tasks: dict[TaskId, Task] = {}
        self._readers: dict[TopicPartition, list[Task]] = defaultdict(list)
        self._global_stores: dict[str, GlobalStore] = {}
        self._positions: dict[TopicPartition, int] = {}  # the app's, in the topics it reads
        self._read: dict[TopicPartition, int] = {}  # the test's, in the topics it reads with `read`
        self._round_robin = itertools.count()
        try:
            self._runner.run(self._start(changelogs))
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_yaml(cls, path: str | Path, **options: Any) -> AppDriver:
        """The app of a YAML file, as `python -m runtime` reads it (environment variables substituted)."""
        return cls(load_app(Path(path)), **options)

    async def _start(self, changelogs: Mapping[str, int]) -> None:
        config, counters = self.config, self.counters
        limits = {name: topic_limits(config, declared_configs(topic)) for name, topic in config.topics.items()}
        compacted = topic_limits(config, {"cleanup.policy": "compact"})
        limits.update({topic: compacted for topic in changelogs})
        failures = FailureHandler.configured(config, counters, limits)
        exactly_once = config.guarantee is Guarantee.EXACTLY_ONCE
        shared = self._outputs(limits, failures if not exactly_once else None)
        self._dead_letters = self._outputs(limits, None)  # the global stores'
        transactional = (lambda: self._outputs(limits, None, transactional=True)) if exactly_once else None
        committer = self._committer = MemoryCommits(shared, transactional, config.guarantee is Guarantee.AT_MOST_ONCE)
        self.committed = committer.offsets
        self._commit_cycle = CommitCycle(committer, config.commit_interval_s)
        for name in config.global_stores:
            self._global_stores[name] = GlobalStore.open(config, name, self._set_aside(name))
        services = TaskServices.of_app(
            config,
            failures,
            counters,
            self._serdes,
            {name: store.view for name, store in self._global_stores.items()},
            Telemetry(TelemetryConfig(), config.app_id),
            lambda task: None,
            committer.commit_before_processing,
        )
        services.clock = self.clock
        for spec in config.processors:
            for partition in range(self.topics.partitions(spec.inputs[0])):
                await self._start_task(spec, partition, committer.outputs_for(TaskId(spec.name, partition)), services)

    def _set_aside(self, name: str) -> OnFailures:
        """What global store `name` does with the records it cannot apply, as on a worker."""
        handler = dead_letter_handler(self.config, name, self.counters)

        async def set_aside_failed(store: GlobalStore, failed: list[Failed]) -> None:
            await set_aside(store, failed, handler, self._dead_letters, self.counters)

        return set_aside_failed

    def _outputs(
        self, limits: Mapping[str, TopicLimits], failures: FailureHandler | None, transactional: bool = False
    ) -> Outputs:
        on_refused = failures.refused if failures is not None else None
        batch_size = int(producer_options(self.config).get("max_batch_size", DEFAULT_BATCH_SIZE))
        producer = MemoryProducer(self.topics, transactional, batch_size)
        return Outputs(producer, self.topics.counts, self.counters, limits, on_refused=on_refused)

    async def _start_task(
        self, spec: ProcessorConfig, partition: int, outputs: Outputs, services: TaskServices
    ) -> None:
        """As a worker starts a task it was assigned: its stores opened (empty), then its processor's `init`.
        A broadcast input is read whole by every task, here as by its broadcast reader."""
        task_id = TaskId(spec.name, partition)
        inputs = [TopicPartition(topic, partition) for topic in dict.fromkeys([*spec.inputs, *spec.table_topics()])]
        inputs += [TopicPartition(t, p) for t in spec.broadcast for p in range(self.topics.partitions(t))]
        task = assemble_task(self.config, spec, task_id, inputs, outputs, services)
        if task.state is not None:
            await task.state.open()
        self._tasks[task_id] = task
        for tp in inputs:
            self._readers[tp].append(task)
            self._positions.setdefault(tp, 0)
        await task.initialise()

    # What a test does.

    def pipe(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        *,
        headers: Sequence[tuple[str, bytes]] = (),
        timestamp: int | None = None,
        partition: int | None = None,
    ) -> None:
        """Produce one record to `topic`, encoded with its serdes, then run the app until it is idle. The
        partition is Kafka's default for the encoded key; the timestamp, the wall clock's by default."""
        self.pipe_all(topic, [(key, value, timestamp)], headers=headers, partition=partition)

    def pipe_all(
        self,
        topic: str,
        records: Iterable[tuple[Any, Any] | tuple[Any, Any, int | None]],
        *,
        headers: Sequence[tuple[str, bytes]] = (),
        partition: int | None = None,
    ) -> None:
        """Produce (key, value) or (key, value, timestamp) pairs to `topic`, then run the app until it is idle."""
        key_serde, value_serde = self._serdes_of(topic)
        encode_key, encode_value = key_serde.serialize, value_serde.serialize
        self.pipe_bytes_all(
            topic,
            (
                (
                    None if record[0] is None else encode_key(record[0]),
                    None if record[1] is None else encode_value(record[1]),
                    record[2] if len(record) > 2 else None,
                )
                for record in records
            ),
            headers=headers,
            partition=partition,
        )

    def pipe_bytes(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        *,
        headers: Sequence[tuple[str, bytes]] = (),
        timestamp: int | None = None,
        partition: int | None = None,
    ) -> None:
        """Produce a record as bytes, past the topic's serdes (one they cannot read, say)."""
        self.pipe_bytes_all(topic, [(key, value, timestamp)], headers=headers, partition=partition)

    def pipe_bytes_all(
        self,
        topic: str,
        records: Iterable[tuple[bytes | None, bytes | None, int | None]],
        *,
        headers: Sequence[tuple[str, bytes]] = (),
        partition: int | None = None,
    ) -> None:
        self._check_running()
        count = self.topics.partitions(topic)
        append, header_list = self.topics.append, list(headers)
        for key, value, timestamp in records:
            if partition is not None:
                target = partition
            elif key is not None:
                target = partition_for(key, count)
            else:
                target = next(self._round_robin) % count
            append(topic, target, key, value, header_list, timestamp)
        self._run(self._until_idle())

    def advance_wall_clock(self, ms: int) -> None:
        """Move the wall clock on by `ms`: the wall-clock punctuations then due run (each once)."""
        self._check_running()
        self.clock.advance(ms)
        self._run(self._until_idle())

    def advance_stream_time(self, timestamp: int, processor: str | None = None) -> None:
        """Move the stream time of every task (of `processor`) to `timestamp`, as a record of that time
        would, and run the stream-time punctuations it brings due: a window closes without a record."""
        self._check_running()
        for task in self._tasks_of(processor):
            task.advance_stream_time(timestamp)
        self._run(self._until_idle())

    def commit(self) -> None:
        """Commit every task now (for a driver without `auto_commit`)."""
        self._check_running()
        self._run(self._commit_and_deliver())

    def read(self, topic: str) -> list[TopicRecord]:
        """The records of `topic` written since the last `read` of it, decoded, in the order they were written."""
        unread = []
        for record in self.topics.records(topic):
            tp = TopicPartition(topic, record.partition)
            if record.offset >= self._read.get(tp, 0):
                unread.append(record)
                self._read[tp] = record.offset + 1
        return [self._decoded(record) for record in unread]

    def records(self, topic: str) -> list[TopicRecord]:
        """Every record of `topic`, decoded, in the order they were written."""
        return [self._decoded(record) for record in self.topics.records(topic)]

    def dead_letters(self) -> list[DeadLetter]:
        """Every record on the app's dead-letter topic, with what went wrong."""
        return [DeadLetter.of(record) for record in self.topics.records(self.config.dead_letter_topic)]

    def partition_of(self, topic: str, key: Any) -> int:
        """The partition of `topic` a record with `key` goes to (and so the task that reads it)."""
        return partition_for(self._serdes_of(topic)[0].serialize(key), self.topics.partitions(topic))

    def store(self, name: str, partition: int = 0) -> BufferedKeyValueStore | TtlView:
        """A key-value store of the task of `partition`, as its processor reads it; writes to it are the
        task's (logged to the changelog at the next commit). A store with `ttl_ms` reads with the task's
        stream time, as its processor does."""
        return self._task_of_store(name, partition).context.store(name)

    def window_store(self, name: str, partition: int = 0) -> WindowView:
        return self._task_of_store(name, partition).context.window_store(name)

    def session_store(self, name: str, partition: int = 0) -> SessionView:
        return self._task_of_store(name, partition).context.session_store(name)

    def table(self, name: str, partition: int = 0) -> TableView | VersionedTableView:
        return self._task_of_store(name, partition).context.table(name)

    def global_store(self, name: str) -> ReadOnlyView:
        """A global store, as every task reads it: pipe its topic's records to fill it."""
        if name not in self._global_stores:
            raise KeyError(f"there is no global store '{name}' (the app has {sorted(self._global_stores)})")
        return self._global_stores[name].view

    def count(self, processor: str, name: str) -> int:
        """A processor's own counter (`ctx.count`), over all its tasks."""
        return self.counters.by_processor.get(processor, {}).get(name, 0)

    def close(self) -> None:
        """Commit (unless the app failed), close every processor and store, and remove the temporary state."""
        try:
            if self._tasks or self._global_stores:
                self._runner.run(self._stop())
        finally:
            self._runner.close()
            if self._temporary is not None:
                shutil.rmtree(self._temporary, ignore_errors=True)

    def __enter__(self) -> AppDriver:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    # How the app runs.

    def _run(self, work: Any) -> None:
        """The app's turn. The topics keep every record, as a broker does, and a collection of the young
        generation every 700 allocations walks them more and more often: the collector is set as for a
        bulk read meanwhile."""
        try:
            with bulk_allocations():
                self._runner.run(work)
        except BaseException as error:
            self._failure = error
            raise

    async def _until_idle(self) -> None:
        """Deliver and process until nothing is left to do; with auto-commit, commit then, and go on while
        the commit made records visible that a task reads (an exactly-once app's outputs)."""
        try:
            await self._process()
            if self.auto_commit:
                await self._commit_and_deliver()
        except StopAfterCommit:
            await self._commit_cycle.commit(list(self._tasks.values()))
            raise

    async def _commit_and_deliver(self) -> None:
        for _ in range(MAX_ROUNDS):
            await self._commit_cycle.commit(list(self._tasks.values()))
            if not await self._process():
                return
            if not self.auto_commit:
                return
        raise RuntimeError(f"{MAX_ROUNDS} commits in a row each made new records visible: the app feeds itself")

    async def _process(self) -> bool:
        """The poll loop's part: new records handed to the tasks that read them, each task stepped while it
        has work; returns whether anything was done."""
        worked = False
        while True:
            busy = await self._follow_global_topics()
            for tp, readers in self._readers.items():
                records, position = self.topics.visible(tp.topic, tp.partition, self._positions[tp])
                self._positions[tp] = position
                if records:
                    busy = True
                    self.counters.consumed += len(records)
                    for task in readers:
                        task.enqueue(tp, records)
            for task in self._tasks.values():
                while task.has_work:
                    busy = True
                    await task.step()
                if task.in_flight is not None and task.in_flight.count:  # a processor with concurrency
                    busy = True
                    await task.in_flight.drain()
            for outputs in self._committer.outputs():
                await outputs.flush()  # what punctuations released
            if not busy:
                return worked
            worked = True

    async def _follow_global_topics(self) -> bool:
        applied = False
        for store in self._global_stores.values():
            topic = store.spec.topic
            for partition in range(self.topics.partitions(topic)):
                tp = TopicPartition(topic, partition)
                records, position = self.topics.visible(topic, partition, self._positions.get(tp, 0))
                if records:
                    await store.apply(partition, records, position)
                    self.counters.global_records += len(records)
                    applied = True
                self._positions[tp] = position
        return applied

    async def _stop(self) -> None:
        try:
            if self._failure is None and self._tasks:
                await self._commit_cycle.commit(list(self._tasks.values()))
        finally:
            for task in self._tasks.values():
                await task.close()
            for store in self._global_stores.values():
                store.close()

    def _check_running(self) -> None:
        if self._failure is not None:
            raise RuntimeError(f"the app stopped: {self._failure}") from self._failure

    def _tasks_of(self, processor: str | None) -> list[Task]:
        names = {spec.name for spec in self.config.processors}
        if processor is not None and processor not in names:
            raise KeyError(f"there is no processor '{processor}' (the app has {sorted(names)})")
        return [task for task in self._tasks.values() if processor in (None, task.id.processor)]

    def _task_of_store(self, name: str, partition: int) -> Task:
        owners = {store: spec.name for spec in self.config.processors for store in (*spec.stores, *spec.tables)}
        if name not in owners:
            raise KeyError(f"no processor declares a store '{name}' (the app has {sorted(owners)})")
        task = self._tasks.get(TaskId(owners[name], partition))
        if task is None:
            raise KeyError(f"store '{name}' has no partition {partition}")
        return task

    def _serdes_of(self, topic: str) -> tuple[Serde, Serde]:
        if topic not in self._serdes:
            raise KeyError(f"topic '{topic}' is not declared under topics (the app has {sorted(self._serdes)})")
        return self._serdes[topic]

    def _decoded(self, record: Any) -> TopicRecord:
        serdes = self._serdes.get(record.topic)
        key, value = record.key, record.value
        if serdes is not None:
            key = None if key is None else serdes[0].deserialize(key)
            value = None if value is None else serdes[1].deserialize(value)
        return TopicRecord(
            record.topic, record.partition, record.offset, record.timestamp, key, value, list(record.headers)
        )
