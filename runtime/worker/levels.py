"""The levels a worker's metrics read when they are collected: lag, queue depth, paused partitions,
restore progress, standby lag, global-store offsets. They are read in the exporter's thread, so they only read."""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer

from runtime.counters import Counters
from runtime.global_stores.stores import GlobalStores
from runtime.state.restore import ChangelogRestorer
from runtime.state.standbys import StandbyStores
from runtime.telemetry.metrics import RuntimeMetrics
from runtime.worker.assignment import Assignment
from runtime.worker.backpressure import Backpressure
from stores.rocksdb import SHARED_MEMORY


def register_levels(
    metrics: RuntimeMetrics,
    counters: Counters,
    consumer: AIOKafkaConsumer,
    assignment: Assignment,
    backpressure: Backpressure,
    restorer: ChangelogRestorer,
    global_stores: GlobalStores,
    standbys: StandbyStores | None = None,
) -> None:
    if not metrics.enabled:
        return

    def consumer_lag() -> dict[tuple[str, int], int]:
        """Per assigned partition: records between the end (the last stable offset under read_committed)
        and the next record its tasks will process; partitions no task has processed from yet are left out."""
        lag: dict[tuple[str, int], int] = {}
        for tp in consumer.assignment():
            end = consumer.last_stable_offset(tp)
            if end is None or end < 0:
                end = consumer.highwater(tp)
            readers = assignment.subscribers.get(tp, ())
            positions = [task.next_offsets[tp] for task in readers if tp in task.next_offsets]
            if end is not None and positions:
                lag[(tp.topic, tp.partition)] = max(0, end - min(positions))
        return lag

    metrics.register_counters(counters)
    metrics.register_consumer_lag(consumer_lag)
    metrics.register_queue_depth(lambda: {str(task.id): task.queued for task in list(assignment.tasks.values())})
    metrics.register_in_flight(
        lambda: {
            str(task.id): (task.in_flight.count, task.in_flight.oldest_age_s())
            for task in list(assignment.tasks.values())
            if task.in_flight is not None
        }
    )
    metrics.register_paused_partitions(lambda: len(backpressure.paused()))
    metrics.register_restore(lambda: dict(restorer.partitions))
    if standbys is not None:
        metrics.register_standby_lag(standbys.lags)
    metrics.register_global_store_offsets(global_stores.positions)
    metrics.register_rocksdb_memory(lambda: (SHARED_MEMORY.usage_bytes(), SHARED_MEMORY.budget_bytes))
