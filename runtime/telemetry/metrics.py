"""Runtime metrics, read at collection time wherever the engine already keeps the number.

Counts come from the worker's `Counters` through observable counters, and levels (lag, queue
depth, paused partitions, restore progress) from callbacks the engine registers: the hot path
increments plain integer fields as it always did and pays nothing more for metrics. Only the
latency histograms are recorded as things happen.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from opentelemetry.metrics import CallbackOptions, Meter, NoOpMeter, Observation
from opentelemetry.util.types import AttributeValue

from runtime.counters import Counters
from runtime.telemetry.tracing import (
    INSTRUMENTATION_NAME,
    MESSAGING_CONSUMER_GROUP_NAME,
    MESSAGING_DESTINATION_NAME,
    MESSAGING_DESTINATION_PARTITION_ID,
    MESSAGING_SYSTEM,
)

log = logging.getLogger(__name__)

Attributes = Mapping[str, AttributeValue]
PartitionValues = Mapping[tuple[str, int], int]
Unregister = Callable[[], None]
Readiness = tuple[bool, bool]  # ready, Kafka unreachable

PROCESSOR: Final = "kafka_actor.processor"
COUNTER: Final = "kafka_actor.counter"
TASK: Final = "kafka_actor.task"
TASKS: Final = "kafka_actor.tasks"  # the tasks a worker's transaction holds
# On every series: which app and which of its worker processes (0 to N-1 under --workers N) it comes from.
APP_ID: Final = "kafka_actor.app_id"
WORKER: Final = "kafka_actor.worker"
PREFIX: Final = "kafka_actor."

# Counters field -> (metric name, unit, description). Names follow OpenTelemetry's dotted style;
# the Prometheus exporter turns them into e.g. kafka_actor_records_consumed_total.
COUNTER_FIELDS: Final = {
    "consumed": ("records.consumed", "{record}", "Records fetched from input partitions."),
    "processed": ("records.processed", "{record}", "Records whose process() returned without an error."),
    "produced": ("records.produced", "{record}", "Records handed to the producer (outputs and dead letters)."),
    "skipped": ("records.skipped", "{record}", "Records that failed and were skipped by the error policy."),
    "dead_lettered": ("records.dead_lettered", "{record}", "Records sent to the dead-letter topic."),
    "restored": ("restore.records", "{record}", "Changelog records applied while restoring stores."),
    "commits": ("commits", "{commit}", "Offset commits and committed transactions."),
    "commit_seconds": ("commit.time", "s", "Total time spent committing."),
    "failed_commits": ("commits.failed", "{commit}", "Offset commits that failed."),
    "aborted_transactions": ("transactions.aborted", "{transaction}", "Transactions aborted."),
    "fenced_tasks": ("tasks.fenced", "{task}", "Tasks stopped because another worker took them over."),
    "pauses": ("partitions.pauses", "{pause}", "Times a task's partitions were paused for backpressure."),
    "resumes": ("partitions.resumes", "{resume}", "Times paused partitions were resumed."),
    "assignments": ("rebalance.assignments", "{rebalance}", "Partition assignments received."),
    "revocations": ("rebalance.revocations", "{rebalance}", "Partition revocations received."),
    "global_records": ("global_store.records", "{record}", "Records read into global stores."),
    "global_store_errors": ("global_store.errors", "{record}", "Global-store records that could not be applied."),
    "global_bootstrap_seconds": ("global_store.bootstrap.time", "s", "Time the global stores took to bootstrap."),
    "snapshot_ingests": ("restore.snapshot.ingests", "{partition}", "Store partitions loaded from snapshots."),
    "snapshot_rows": ("restore.snapshot.rows", "{row}", "Rows loaded from store snapshots."),
    "snapshot_seconds": ("restore.snapshot.time", "s", "Time spent loading store snapshots."),
    "snapshot_records_spared": (
        "restore.snapshot.records_spared",
        "{record}",
        "Changelog records not replayed because a snapshot was loaded.",
    ),
    "broker_outages": ("kafka.outages", "{outage}", "Times Kafka became unreachable."),
    "broker_outage_seconds": ("kafka.outage.time", "s", "How long the outages that ended lasted."),
}

# Per-record processing is usually well under a millisecond; the SDK's default buckets start at 5 ms.
PROCESSING_BUCKETS_MS: Final = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 10000)
COMMIT_BUCKETS_MS: Final = (1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)

T = TypeVar("T")


@dataclass(frozen=True)
class _Source(Generic[T]):
    callback: Callable[[], T]
    attributes: Attributes


class _Sources(Generic[T]):
    """Registered callbacks of one kind, each with the attributes every series has and its own; a
    failing callback is logged and its values left out."""

    def __init__(self, what: str, common: Attributes):
        self._what = what
        self._common = common
        self._sources: list[_Source[T]] = []

    def add(self, callback: Callable[[], T], attributes: Attributes | None) -> Unregister:
        source = _Source(callback, {**self._common, **(attributes or {})})
        self._sources.append(source)
        return lambda: self._sources.remove(source) if source in self._sources else None

    def read(self) -> Iterable[tuple[T, Attributes]]:
        for source in list(self._sources):
            try:
                value = source.callback()
            except Exception:  # an engine callback must not break the whole collection
                log.warning("reading %s for metrics failed", self._what, exc_info=True)
                continue
            yield value, source.attributes


class RuntimeMetrics:
    """The runtime's instruments. Built on a no-op meter when metrics are off (`enabled` is then False).
    `common` are the attributes of every series (the app id and the worker index)."""

    def __init__(self, meter: Meter | None, group: str | None = None, common: Attributes | None = None):
        self.enabled = meter is not None
        self._meter = meter if meter is not None else NoOpMeter(INSTRUMENTATION_NAME)
        self._group = group
        self._common: Attributes = dict(common or {})
        self._counters: _Sources[Counters] = _Sources("counters", self._common)
        self._lag: _Sources[PartitionValues] = _Sources("consumer lag", self._common)
        self._standby_lag: _Sources[PartitionValues] = _Sources("standby lag", self._common)
        self._queues: _Sources[Mapping[str, int]] = _Sources("queue depth", self._common)
        self._in_flight: _Sources[Mapping[str, tuple[int, float]]] = _Sources("records in flight", self._common)
        self._paused: _Sources[int] = _Sources("paused partitions", self._common)
        self._restore: _Sources[Mapping[tuple[str, int], tuple[int, int]]] = _Sources("restore progress", self._common)
        self._global: _Sources[Mapping[tuple[str, int], tuple[int, int]]] = _Sources(
            "global-store offsets", self._common
        )
        self._readiness: _Sources[Readiness] = _Sources("readiness", self._common)
        self._rocksdb_memory: _Sources[tuple[int, int]] = _Sources("RocksDB memory", self._common)
        self._processor_attributes: dict[str, Attributes] = {}
        self._commit_attributes = {
            transactional: {**self._common, "kafka_actor.transactional": transactional}
            for transactional in (True, False)
        }

        meter = self._meter
        for field, (name, unit, description) in COUNTER_FIELDS.items():
            meter.create_observable_counter(PREFIX + name, [self._counter_callback(field)], unit, description)
        meter.create_observable_counter(
            PREFIX + "processor.count",
            [self._observe_processor_counts],
            "1",
            "What processors counted themselves (ctx.count), by processor and counter.",
        )
        self._processing = meter.create_histogram(
            PREFIX + "process.duration",
            "ms",
            "Time process() took for one record.",
            explicit_bucket_boundaries_advisory=PROCESSING_BUCKETS_MS,
        )
        self._key_wait = meter.create_histogram(
            PREFIX + "key.wait",
            "ms",
            "Time a record waited behind an earlier record of its key (processors with concurrency, key order).",
            explicit_bucket_boundaries_advisory=PROCESSING_BUCKETS_MS,
        )
        self._commit = meter.create_histogram(
            PREFIX + "commit.duration",
            "ms",
            "Time one commit (offsets or transaction) took.",
            explicit_bucket_boundaries_advisory=COMMIT_BUCKETS_MS,
        )
        meter.create_observable_gauge(
            PREFIX + "consumer.lag", [self._observe_lag], "{record}", "Records between the position and the end."
        )
        meter.create_observable_gauge(
            PREFIX + "standby.lag",
            [self._observe_standby_lag],
            "{record}",
            "Changelog records a standby store has yet to apply: what a failover onto this worker replays.",
        )
        meter.create_observable_gauge(
            PREFIX + "task.queue.depth", [self._observe_queues], "{record}", "Records queued for a task."
        )
        meter.create_observable_gauge(
            PREFIX + "task.in_flight",
            [self._observe_in_flight(0)],
            "{record}",
            "Records of a task with concurrency handed over and not finished (waiting behind their key or not).",
        )
        meter.create_observable_gauge(
            PREFIX + "task.in_flight.oldest.age",
            [self._observe_in_flight(1)],
            "s",
            "How long the lowest unfinished record of a task with concurrency has been in flight.",
        )
        meter.create_observable_gauge(
            PREFIX + "partitions.paused", [self._observe_paused], "{partition}", "Input partitions paused now."
        )
        meter.create_observable_gauge(
            PREFIX + "restore.records.done", [self._observe_restore(0)], "{record}", "Changelog records restored."
        )
        meter.create_observable_gauge(
            PREFIX + "restore.records.remaining",
            [self._observe_restore(1)],
            "{record}",
            "Changelog records still to restore.",
        )
        for which, (name, description) in enumerate(
            (
                ("global_store.position", "Next offset a global store applies, per partition of its topic."),
                ("global_store.end_offset", "End offset of a global store's topic, as last seen."),
                ("global_store.lag", "Global-store records not yet applied."),
            )
        ):
            meter.create_observable_gauge(PREFIX + name, [self._observe_global(which)], "{record}", description)

        meter.create_observable_gauge(
            PREFIX + "rocksdb.memory.used",
            [self._observe_one_of(self._rocksdb_memory, 0)],
            "By",
            "What the worker's RocksDB stores hold in memory: blocks and memtables.",
        )
        meter.create_observable_gauge(
            PREFIX + "rocksdb.memory.budget",
            [self._observe_one_of(self._rocksdb_memory, 1)],
            "By",
            "rocksdb.memory_mb of the app, in bytes.",
        )
        meter.create_observable_gauge(
            PREFIX + "worker.ready",
            [self._observe_one_of(self._readiness, 0)],
            "1",
            "1 when the worker is ready (/ready), else 0.",
        )
        meter.create_observable_gauge(
            PREFIX + "kafka.unreachable",
            [self._observe_one_of(self._readiness, 1)],
            "1",
            "1 while Kafka is unreachable, else 0.",
        )

    # Registration: each returns a function that removes what it registered (e.g. when a worker stops).

    def register_counters(self, counters: Counters, attributes: Attributes | None = None) -> Unregister:
        """Report `counters` fields as observable counters; several registrations with equal attributes add up."""
        return self._counters.add(lambda: counters, attributes)

    def register_consumer_lag(
        self, callback: Callable[[], PartitionValues], attributes: Attributes | None = None
    ) -> Unregister:
        """`callback` returns {(topic, partition): lag in records} for the partitions consumed now."""
        return self._lag.add(callback, attributes)

    def register_standby_lag(
        self, callback: Callable[[], PartitionValues], attributes: Attributes | None = None
    ) -> Unregister:
        """`callback` returns {(changelog topic, partition): lag in records} for the standbys followed now."""
        return self._standby_lag.add(callback, attributes)

    def register_queue_depth(
        self, callback: Callable[[], Mapping[str, int]], attributes: Attributes | None = None
    ) -> Unregister:
        """`callback` returns {task id: records queued}."""
        return self._queues.add(callback, attributes)

    def register_in_flight(
        self, callback: Callable[[], Mapping[str, tuple[int, float]]], attributes: Attributes | None = None
    ) -> Unregister:
        """`callback` returns {task id: (records in flight, seconds the oldest of them has been)} for the
        tasks with concurrency."""
        return self._in_flight.add(callback, attributes)

    def register_paused_partitions(
        self, callback: Callable[[], int], attributes: Attributes | None = None
    ) -> Unregister:
        """`callback` returns how many input partitions are paused now."""
        return self._paused.add(callback, attributes)

    def register_restore(
        self, callback: Callable[[], Mapping[tuple[str, int], tuple[int, int]]], attributes: Attributes | None = None
    ) -> Unregister:
        """`callback` returns {(changelog topic, partition): (records restored, records remaining)}."""
        return self._restore.add(callback, attributes)

    def register_global_store_offsets(
        self, callback: Callable[[], Mapping[tuple[str, int], tuple[int, int]]], attributes: Attributes | None = None
    ) -> Unregister:
        """`callback` returns {(global-store topic, partition): (next offset applied, end offset)}."""
        return self._global.add(callback, attributes)

    def register_rocksdb_memory(
        self, callback: Callable[[], tuple[int, int]], attributes: Attributes | None = None
    ) -> Unregister:
        """`callback` returns (bytes held, the budget in bytes)."""
        return self._rocksdb_memory.add(callback, attributes)

    def register_readiness(self, callback: Callable[[], Readiness], attributes: Attributes | None = None) -> Unregister:
        """`callback` returns (ready, Kafka unreachable)."""
        return self._readiness.add(callback, attributes)

    # Recorded as they happen: call only when `enabled`.

    def record_processing(self, milliseconds: float, processor: str) -> None:
        self._processing.record(milliseconds, self._of_processor(processor))

    def record_key_wait(self, milliseconds: float, processor: str) -> None:
        self._key_wait.record(milliseconds, self._of_processor(processor))

    def _of_processor(self, processor: str) -> Attributes:
        attributes = self._processor_attributes.get(processor)
        if attributes is None:
            attributes = self._processor_attributes[processor] = {**self._common, PROCESSOR: processor}
        return attributes

    def record_commit(self, milliseconds: float, transactional: bool = False) -> None:
        self._commit.record(milliseconds, self._commit_attributes[transactional])

    # Collection.

    def _counter_callback(self, field: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            totals: dict[tuple[tuple[str, AttributeValue], ...], float] = {}
            for counters, attributes in self._counters.read():
                key = tuple(sorted(attributes.items()))
                totals[key] = totals.get(key, 0) + getattr(counters, field)
            return [Observation(value, dict(key)) for key, value in totals.items()]

        return observe

    def _observe_processor_counts(self, options: CallbackOptions) -> Iterable[Observation]:
        totals: dict[tuple[tuple[str, AttributeValue], ...], int] = {}
        for counters, attributes in self._counters.read():
            # Copied at once (each list() is one step under the GIL): the event loop may add a counter meanwhile.
            for processor, counts in list(counters.by_processor.items()):
                for name, value in list(counts.items()):
                    key = tuple(sorted({**attributes, PROCESSOR: processor, COUNTER: name}.items()))
                    totals[key] = totals.get(key, 0) + value
        return [Observation(value, dict(key)) for key, value in totals.items()]

    def _partition_attributes(self, topic: str, partition: int, extra: Attributes) -> dict[str, AttributeValue]:
        attributes: dict[str, AttributeValue] = {
            MESSAGING_SYSTEM: "kafka",
            MESSAGING_DESTINATION_NAME: topic,
            MESSAGING_DESTINATION_PARTITION_ID: str(partition),
        }
        if self._group is not None:
            attributes[MESSAGING_CONSUMER_GROUP_NAME] = self._group
        attributes.update(extra)
        return attributes

    def _observe_lag(self, options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(lag, self._partition_attributes(topic, partition, extra))
            for values, extra in self._lag.read()
            for (topic, partition), lag in values.items()
        ]

    def _observe_standby_lag(self, options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(lag, self._partition_attributes(topic, partition, extra))
            for values, extra in self._standby_lag.read()
            for (topic, partition), lag in values.items()
        ]

    def _observe_global(self, which: int) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            return [
                Observation(
                    (position, end, max(0, end - position))[which],
                    self._partition_attributes(topic, partition, extra),
                )
                for values, extra in self._global.read()
                for (topic, partition), (position, end) in values.items()
            ]

        return observe

    def _observe_queues(self, options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(depth, {TASK: task, **extra})
            for values, extra in self._queues.read()
            for task, depth in values.items()
        ]

    def _observe_in_flight(self, which: int) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            return [
                Observation(levels[which], {TASK: task, **extra})
                for values, extra in self._in_flight.read()
                for task, levels in values.items()
            ]

        return observe

    def _observe_paused(self, options: CallbackOptions) -> Iterable[Observation]:
        totals: dict[tuple[tuple[str, AttributeValue], ...], int] = {}
        for count, attributes in self._paused.read():
            key = tuple(sorted(attributes.items()))
            totals[key] = totals.get(key, 0) + count
        return [Observation(value, dict(key)) for key, value in totals.items()]

    @staticmethod
    def _observe_one_of(
        sources: _Sources[tuple[int, int]] | _Sources[Readiness], which: int
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        """Each source's value at `which` of the tuple its callback returns (a bool counts as 1 or 0)."""

        def observe(options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(int(values[which]), dict(attributes)) for values, attributes in sources.read()]

        return observe

    def _observe_restore(self, which: int) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            return [
                Observation(progress[which], self._partition_attributes(topic, partition, extra))
                for values, extra in self._restore.read()
                for (topic, partition), progress in values.items()
            ]

        return observe
