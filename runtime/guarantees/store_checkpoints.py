"""Checkpoints of the stores, taken by the workers at commit boundaries: step 4 of the commit protocol
(runtime/guarantees/commit.py).

A checkpoint is named after a moment in UTC (`20261126T070000Z`) and holds, for each store in RocksDB
with a changelog, every partition's state as a commit left it and the input offsets that commit covered,
in the snapshot format (stores/checkpoint.py). Two kinds are due. One per period of `snapshots.every`,
named after the period's start: every task of every worker adds its partitions to the same checkpoint
without a word to the others. And one per request that `python -m runtime checkpoint` leaves in the
location, `<location>/_requests/<name>`, named after the moment it was made. The location is a directory
or a bucket (stores/snapshot_storage.py): what is written and read there goes through its storage, off the
event loop.

A task adds its partitions to each due checkpoint once, after the first of its commits that covers every
input it reads, in two steps: RocksDB's own checkpoint of each store at once (hard links, so the task
waits a few milliseconds), then, in a thread, the SST file written from it. Whichever task completes a
checkpoint writes its manifest and deletes the store's oldest checkpoints beyond `keep`.

Under exactly-once the state and the input offsets agree by construction: a task waits while its commit
runs. Under at-least-once a task goes on processing during the commit, so a store's state may hold the
effect of records after the offsets: rewound to it, those records are processed once more, as
at-least-once allows.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from aiokafka import TopicPartition

from runtime.config import AppConfig, SnapshotsConfig
from stores.checkpoint import assemble, collect_garbage, write_partition_checkpoint
from stores.checkpoint_files import SHARED, Dated, expired
from stores.rocksdb import RocksDBBackend
from stores.snapshot import Manifest
from stores.snapshot_location import complete_snapshots, manifest_key, snapshot_key
from stores.snapshot_storage import SnapshotStorage

if TYPE_CHECKING:
    from runtime.state.task_state import TaskStore
    from runtime.task.task import Task

log = logging.getLogger(__name__)

REQUESTS = "_requests"
LISTING_S = 1.0  # how often the requests are looked for


def checkpoint_name(moment_ms: int) -> str:
    return datetime.fromtimestamp(moment_ms // 1000, UTC).strftime("%Y%m%dT%H%M%SZ")


def requested(storage: SnapshotStorage) -> list[str]:
    """The names of the checkpoints `python -m runtime checkpoint` asks for."""
    return storage.children(REQUESTS)


def request_key(name: str) -> str:
    return f"{REQUESTS}/{name}"


def checkpointed(entry: TaskStore) -> bool:
    """A store in RocksDB with a changelog of its own and a snapshot location: one a checkpoint holds."""
    return (
        entry.snapshots is not None
        and isinstance(entry.backend, RocksDBBackend)
        and entry.changelog is not None
        and not entry.mirrors_input
    )


@dataclass(frozen=True)
class Due:
    name: str
    snapshots: SnapshotsConfig


class StoreCheckpoints:
    """A worker's part in the app's checkpoints."""

    def __init__(
        self,
        config: AppConfig,
        partition_counts: Mapping[str, int],
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ):
        self._config = config
        self._counts = partition_counts
        self._now_ms = now_ms
        self._taken: set[tuple[str, int, str]] = set()  # (processor, partition, checkpoint)
        self._writing: set[asyncio.Task[None]] = set()
        self._partition_locks: dict[tuple[str, int], asyncio.Lock] = {}
        self._requested: list[Due] = []
        self._listed_at = float("-inf")
        self._listing: asyncio.Task[None] | None = None
        self._locations = {
            snapshots.location: snapshots
            for processor in config.processors
            for spec in processor.stores.values()
            if (snapshots := config.snapshots_for(spec)) is not None
        }

    @classmethod
    def configured(cls, config: AppConfig, partition_counts: Mapping[str, int]) -> StoreCheckpoints | None:
        """None when no store of the app has a snapshot location to take checkpoints into."""
        checkpoints = cls(config, partition_counts)
        return checkpoints if checkpoints._locations else None

    def after_commit(self, task: Task, offsets: Mapping[TopicPartition, int]) -> None:
        """Step 4: the task's part in each due checkpoint it has no part in yet."""
        if time.monotonic() - self._listed_at >= LISTING_S and self._listing is None:
            self._listing = asyncio.create_task(self._list_requests())
        state = task.state
        if state is None or not task.group_inputs <= offsets.keys():
            return
        stores = [entry for entry in state.stores.values() if checkpointed(entry)]
        if not stores:
            return
        inputs = {tp.topic: offset for tp, offset in offsets.items()}
        for due in self._due():
            key = (task.id.processor, task.id.partition, due.name)
            if key in self._taken:
                continue
            self._taken.add(key)
            for entry in stores:
                if entry.snapshots is not None and entry.snapshots.location == due.snapshots.location:
                    self._take(entry, due, state.partition, inputs)

    async def finish(self) -> None:
        """Wait for the checkpoints being written (when the worker stops)."""
        pending = [*self._writing, *([self._listing] if self._listing is not None else [])]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    def _due(self) -> list[Due]:
        now = self._now_ms()
        due = [
            Due(checkpoint_name(now - now % snapshots.every), snapshots)
            for snapshots in self._locations.values()
            if snapshots.every is not None
        ]
        due += self._requested
        names = {each.name for each in due}
        self._taken = {taken for taken in self._taken if taken[2] in names}  # those no longer due are done
        return due

    async def _list_requests(self) -> None:
        """Requests that cannot be listed now are looked for again a second later: a warning, not the worker."""
        try:
            self._requested = await asyncio.to_thread(
                lambda: [
                    Due(name, snapshots)
                    for snapshots in self._locations.values()
                    for name in requested(snapshots.storage())
                ]
            )
        except Exception as error:
            log.warning("checkpoint requests could not be listed: %s", error)
        finally:
            self._listing, self._listed_at = None, time.monotonic()

    def _take(self, entry: TaskStore, due: Due, partition: int, inputs: dict[str, int]) -> None:
        backend = entry.backend
        assert isinstance(backend, RocksDBBackend)
        copy = backend.path.with_name(f".{backend.path.name}-checkpoint-{uuid.uuid4().hex[:8]}")
        started = time.monotonic()
        backend.checkpoint(copy)  # beside the store: hard links, whatever the snapshot location
        key = snapshot_key(entry.name, due.name)
        writing = asyncio.create_task(self._write(entry, due, key, copy, partition, inputs, started))
        self._writing.add(writing)
        writing.add_done_callback(self._writing.discard)

    async def _write(
        self,
        entry: TaskStore,
        due: Due,
        key: str,
        copy: Path,
        partition: int,
        inputs: dict[str, int],
        started: float,
    ) -> None:
        """One checkpoint of a store partition at a time: its task alone deletes the partition's shared files,
        so none it is about to name goes while another of its checkpoints is written."""
        lock = self._partition_locks.setdefault((entry.name, partition), asyncio.Lock())
        async with lock:
            await self._write_part(entry, due, key, copy, partition, inputs, started)

    async def _write_part(
        self,
        entry: TaskStore,
        due: Due,
        key: str,
        copy: Path,
        partition: int,
        inputs: dict[str, int],
        started: float,
    ) -> None:
        try:
            storage = await asyncio.to_thread(due.snapshots.storage)  # a bucket's client is made once, from files
            if await asyncio.to_thread(storage.exists, manifest_key(key)):
                shutil.rmtree(copy, ignore_errors=True)
                return  # complete already (a task that moved here from a worker that had taken its part)
            written = await asyncio.to_thread(write_partition_checkpoint, copy, storage, key, partition, inputs)
            log.info(
                "checkpoint %s of store %s partition %d: %d rows in %.2fs, uploaded %d of %d bytes (%d of %d files)",
                due.name,
                entry.name,
                partition,
                written.part.rows,
                time.monotonic() - started,
                written.uploaded_bytes,
                written.total_bytes,
                len(written.uploaded),
                len(written.part.files),
            )
            manifest = await asyncio.to_thread(self._assemble, entry, storage, key)
        except Exception as error:  # a checkpoint is worth a warning, not the worker
            log.warning("checkpoint %s of store %s partition %d failed: %r", due.name, entry.name, partition, error)
            shutil.rmtree(copy, ignore_errors=True)
            return
        if manifest is not None:
            log.info(
                "checkpoint %s of store %s complete: %d rows in %d partitions",
                due.name,
                entry.name,
                sum(manifest.row_counts.values()),
                manifest.partitions,
            )
            try:
                await asyncio.to_thread(prune, storage, entry.name, due.snapshots, datetime.now(UTC))
            except Exception as error:  # the next complete checkpoint prunes again
                log.warning("old checkpoints of store %s could not be deleted: %s", entry.name, error)
        try:
            await asyncio.to_thread(collect_garbage, storage, entry.name, partition)
        except Exception as error:  # the partition's next checkpoint collects them
            log.warning("unused files of store %s partition %d could not be deleted: %s", entry.name, partition, error)

    def _assemble(self, entry: TaskStore, storage: SnapshotStorage, key: str) -> Manifest | None:
        assert entry.changelog is not None
        spec = entry.spec
        return assemble(
            storage,
            key,
            app=self._config.app_id,
            store=entry.name,
            partitions=self._partitions(entry.name),
            key_serde=spec.key_serde,
            value_serde=spec.value_serde,
            changelog_topic=entry.changelog.topic,
            kind=spec.kind,
        )

    def _partitions(self, store: str) -> int:
        """The store's partition count: its processor's inputs'."""
        for processor in self._config.processors:
            if store in processor.stores:
                return self._counts[processor.inputs[0]]
        raise KeyError(store)


def prune(storage: SnapshotStorage, store: str, snapshots: SnapshotsConfig, now: datetime) -> list[str]:
    """Delete the store's checkpoints (snapshots with input offsets) that retention removes (beyond `keep`,
    older than `max_age`; never the newest), and those older than the newest that never completed (a worker
    died writing its part) and are not requested; Spark's snapshots are left alone. A checkpoint's manifest
    goes first, so a reader never finds a manifest whose parts are gone; the shared files it named are
    deleted by each partition's task (`collect_garbage`). Two workers pruning at once delete the same ones,
    or one of them fewer. Returns the names of those deleted."""
    found = complete_snapshots(storage, store)
    checkpoints = [
        Dated(snapshot.key.rpartition("/")[2], snapshot.manifest.created_at)
        for snapshot in found
        if snapshot.manifest.input_offsets
    ]
    max_age = timedelta(milliseconds=snapshots.max_age) if snapshots.max_age is not None else None
    gone = expired(checkpoints, snapshots.keep, max_age, now)
    if checkpoints:
        newest = max(checkpoints, key=lambda each: (each.created_at, each.name)).name
        kept = {snapshot.key.rpartition("/")[2] for snapshot in found} | set(requested(storage)) | {SHARED}
        gone += [name for name in storage.children(store) if name < newest and name not in kept]
    for name in gone:
        storage.delete(manifest_key(snapshot_key(store, name)))
        storage.delete_tree(snapshot_key(store, name))
    return gone
