"""Bring a task's stores up to date from their changelogs before the task processes anything.

With a snapshot location, a store missing or behind the newest snapshot is first loaded from it
(runtime/state/snapshot_ingest.py) and only the changelog after the snapshot's offset is replayed.

A restore reads from the offset kept inside the store (or from the beginning) and is complete when
the consumer's position reaches the end offset taken when it began — never "when the last record's
offset is reached": under transactions the last offset is a commit marker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from aiokafka import AIOKafkaConsumer, TopicPartition

from runtime.counters import Counters
from runtime.state.restore_progress import RestoreProgress
from runtime.state.snapshot_ingest import SnapshotIngest
from runtime.state.task_state import TaskState, TaskStore
from runtime.telemetry import RecordTracer
from runtime.telemetry.tracing import MESSAGING_DESTINATION_NAME, MESSAGING_DESTINATION_PARTITION_ID

log = logging.getLogger(__name__)

RESTORE_BATCH = 10_000
PROGRESS_EVERY_S = 2.0

ConsumerFactory = Callable[[], AIOKafkaConsumer]
STORE = "kafka_actor.store"
RESTORED = "kafka_actor.restore.records"


class ChangelogRestorer:
    """Restores stores one changelog partition at a time, in bounded batches.

    `partitions` keeps (records restored, records remaining) per changelog partition restored by this
    worker, for the restore-progress metrics.
    """

    def __init__(
        self,
        new_consumer: ConsumerFactory,
        counters: Counters,
        tracer: RecordTracer,
        progress: RestoreProgress | None = None,
        committed: Callable[[TopicPartition], Awaitable[int | None]] | None = None,
    ):
        self._new_consumer = new_consumer
        self._committed = committed  # the group's committed offset of an input: where a table's restore ends
        self._counters = counters
        self._tracer = tracer
        self._progress = progress or RestoreProgress()
        self._snapshots = SnapshotIngest(counters, self._progress)
        self.partitions: dict[tuple[str, int], tuple[int, int]] = {}

    async def restore(self, state: TaskState) -> None:
        await state.open()
        for entry in state.stores.values():
            if entry.mirrors_input and not entry.table_layout_fits():
                log.warning(
                    "table %s partition %d was written with another history setting: reading it again from its topic",
                    entry.name,
                    state.partition,
                )
                state.rebuild(entry.name)
            if entry.changelog is not None:
                attributes = {
                    STORE: entry.name,
                    MESSAGING_DESTINATION_NAME: entry.changelog.topic,
                    MESSAGING_DESTINATION_PARTITION_ID: str(entry.changelog.partition),
                }
                with self._tracer.span("restore", attributes) as span:
                    restored = await self._restore_store(state, entry, entry.changelog)
                    if span is not None:
                        span.set_attribute(RESTORED, restored)
            if entry.view is not None:
                entry.view.check_layout()
            elif not entry.mirrors_input:
                entry.store.check_layout()

    async def _restore_store(self, state: TaskState, entry: TaskStore, tp: TopicPartition) -> int:
        """Returns how many records it applied."""
        consumer = self._new_consumer()
        await consumer.start()
        try:
            consumer.assign([tp])
            start = (await consumer.beginning_offsets([tp]))[tp]
            end = (await consumer.end_offsets([tp]))[tp]
            if entry.mirrors_input:  # what lies past the committed offset the task reads as input
                committed = await self._committed(tp) if self._committed is not None else None
                end = start if committed is None else max(start, min(end, committed))
            stored = entry.store.changelog_offset()
            if stored is not None and not start <= stored <= end:
                # Ahead of the changelog (it was recreated), or behind its start (deletes may be gone).
                log.warning(
                    "store %s partition %d claims changelog offset %d outside %d..%d: rebuilding it",
                    entry.name,
                    tp.partition,
                    stored,
                    start,
                    end,
                )
                state.rebuild(entry.name)
                stored = None
            partitions = len(consumer.partitions_for_topic(tp.topic) or ())
            stored = await self._snapshots.ingest_if_behind(state, entry, tp, partitions, stored, range(start, end))
            position = start if stored is None else stored
            if position >= end:
                log.info("store %s partition %d is up to date (changelog offset %d)", entry.name, tp.partition, end)
                return 0
            consumer.seek(tp, position)
            return await self._replay(consumer, entry, tp, position, end)
        finally:
            await consumer.stop()

    async def _replay(
        self, consumer: AIOKafkaConsumer, entry: TaskStore, tp: TopicPartition, position: int, end: int
    ) -> int:
        total, done = end - position, 0
        self._counters.restore_remaining += total
        self.partitions[(tp.topic, tp.partition)] = (0, total)
        started = last_report = time.monotonic()
        log.info(
            "restoring store %s partition %d from its changelog: offsets %d..%d",
            entry.name,
            tp.partition,
            position,
            end,
        )
        bar = self._progress.start(f"restoring {entry.name}[{tp.partition}]", total)
        try:
            while position < end:
                batches = await consumer.getmany(tp, timeout_ms=200, max_records=RESTORE_BATCH)
                records = [record for record in batches.get(tp, []) if record.offset < end]
                position = min(await consumer.position(tp), end)
                entry.restore(records, position)
                done += len(records)
                self._progress.advance(bar, len(records))
                self._counters.restored += len(records)
                self._counters.restore_remaining -= len(records)
                self.partitions[(tp.topic, tp.partition)] = (done, total - done)
                now = time.monotonic()
                if now - last_report >= PROGRESS_EVERY_S:
                    last_report = now
                    log.info(
                        "restoring store %s partition %d: %d/%d records (%.0f/s)",
                        entry.name,
                        tp.partition,
                        done,
                        total,
                        done / (now - started),
                    )
        finally:
            self._progress.finish(bar)
            self._counters.restore_remaining -= total - done
            self.partitions[(tp.topic, tp.partition)] = (done, 0)
        elapsed = time.monotonic() - started
        log.info(
            "restored store %s partition %d: %d records in %.2fs (%.0f/s)",
            entry.name,
            tp.partition,
            done,
            elapsed,
            done / elapsed if elapsed else 0.0,
        )
        return done
