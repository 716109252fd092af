"""The first step of a restore when the store has a snapshot location: load the newest snapshot.

A store that is missing or behind the snapshot (its changelog offset below the manifest's) is
wiped and loaded from the snapshot's SST file; the changelog restore then replays only the
records after the manifest's offset. A store at or past the snapshot keeps its data: a snapshot
never replaces newer state. A snapshot of another app, store, encoding or changelog fails the
task, as ingesting it would serve wrong bytes; so does a snapshot of key-value rows (a bootstrap from
bulk data) for a window or session store, whose keys follow a layout the rows do not.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
import uuid

from aiokafka import TopicPartition

from runtime.counters import Counters
from runtime.state.restore_progress import RestoreProgress
from runtime.state.task_state import TaskState, TaskStore
from stores import RocksDBBackend
from stores.checkpoint import fetch_database
from stores.snapshot import SnapshotError, SnapshotMismatch, ingest_partition, partition_checksums, validate
from stores.snapshot_location import Snapshot, newest_snapshot
from stores.snapshot_storage import SnapshotStorage

log = logging.getLogger(__name__)


class SnapshotIngest:
    """Shared by every task of a worker, as the changelog restorer that calls it is."""

    def __init__(self, counters: Counters, progress: RestoreProgress):
        self._counters = counters
        self._progress = progress

    async def ingest_if_behind(
        self,
        state: TaskState,
        entry: TaskStore,
        tp: TopicPartition,
        partitions: int,
        stored: int | None,
        changelog: range,
    ) -> int | None:
        """The store's changelog offset afterwards: the snapshot's when it was loaded, else `stored`.
        `changelog` is the changelog partition's offsets now, from its start to its end."""
        end = changelog.stop
        if entry.snapshots is None:
            return stored
        storage = await asyncio.to_thread(entry.snapshots.storage)  # a bucket's client is made once, from files
        snapshot = await asyncio.to_thread(newest_snapshot, storage, entry.name)
        if snapshot is None:
            log.info("store %s: no snapshot in %s yet", entry.name, entry.snapshots.location)
            return stored
        manifest = snapshot.manifest
        try:
            validate(
                manifest,
                state.app_id,
                entry.name,
                partitions,
                entry.spec.key_serde,
                entry.spec.value_serde,
                tp.topic,
                entry.spec.kind,
            )
        except SnapshotMismatch as error:
            raise SnapshotMismatch(f"store {entry.name}: refusing snapshot {snapshot.where}: {error}") from None
        offset = manifest.offset(tp.partition)
        if offset > end:
            raise SnapshotMismatch(
                f"store {entry.name}: refusing snapshot {snapshot.where}: it covers changelog {tp.topic} "
                f"partition {tp.partition} up to offset {offset}, but the changelog ends at {end} "
                "(was the changelog recreated?)"
            )
        if stored is not None and stored >= offset:
            log.info(
                "store %s partition %d is at changelog offset %d, not behind snapshot %s (offset %d): keeping it",
                entry.name,
                tp.partition,
                stored,
                snapshot.where,
                offset,
            )
            return stored
        await self._ingest(state, entry, tp.partition, storage, snapshot, changelog.start)
        return offset

    async def _ingest(
        self,
        state: TaskState,
        entry: TaskStore,
        partition: int,
        storage: SnapshotStorage,
        snapshot: Snapshot,
        changelog_start: int,
    ) -> None:
        rows = snapshot.manifest.row_counts.get(partition, 0)
        offset = snapshot.manifest.offset(partition)
        log.info(
            "ingesting snapshot %s into store %s partition %d: %d rows up to changelog offset %d",
            snapshot.where,
            entry.name,
            partition,
            rows,
            offset,
        )
        backend = entry.backend
        if not isinstance(backend, RocksDBBackend):
            raise SnapshotError(f"store {entry.name} is not a RocksDB store: snapshots cannot be ingested into it")
        state.rebuild(entry.name)  # ingesting needs an empty store: deleted keys must not survive
        bar = self._progress.start(f"ingesting snapshot {entry.name}[{partition}]", rows, unit="rows")
        started = time.monotonic()
        try:
            # Checksums and the ingest read whole files: off the event loop, so other tasks go on.
            loading = asyncio.ensure_future(asyncio.to_thread(_load_partition, backend, storage, snapshot, partition))
            try:
                await asyncio.shield(loading)
            except asyncio.CancelledError:
                await loading  # a task stopped meanwhile closes its store only after the thread let go of it
                raise
            self._progress.advance(bar, rows)
        finally:
            self._progress.finish(bar)
        elapsed = time.monotonic() - started
        spared = max(0, offset - changelog_start)  # what a restore from the changelog's start would replay
        self._counters.snapshot_ingests += 1
        self._counters.snapshot_rows += rows
        self._counters.snapshot_seconds += elapsed
        self._counters.snapshot_records_spared += spared
        log.info(
            "ingested snapshot into store %s partition %d: %d rows in %.2fs (%.0f/s), "
            "%d changelog records not replayed (offsets %d..%d)",
            entry.name,
            partition,
            rows,
            elapsed,
            rows / elapsed if elapsed else 0.0,
            spared,
            changelog_start,
            offset,
        )


def _load_partition(backend: RocksDBBackend, storage: SnapshotStorage, snapshot: Snapshot, partition: int) -> None:
    """The partition's files fetched where they are not local, each checked against its checksum, then loaded:
    a checkpoint's database becomes the store, fetched beside it; a snapshot's SST is ingested."""
    manifest = snapshot.manifest
    files = manifest.files.get(partition)
    if files is None:
        with storage.local_files(snapshot.key, partition_checksums(manifest, partition)) as directory:
            ingest_partition(backend, directory, manifest, partition)
        return
    fetched = backend.path.with_name(f".{backend.path.name}-loading-{uuid.uuid4().hex[:8]}")
    try:
        fetch_database(storage, snapshot.key, files, fetched)
        backend.replace(fetched, manifest.offset(partition))
    finally:
        shutil.rmtree(fetched, ignore_errors=True)
