"""Checkpoints of the stores, taken by the workers at commit boundaries: step 4 of the commit protocol
(runtime/guarantees/commit.py).

A checkpoint is named after a moment in UTC (`20261126T070000Z`) and holds, for each store in RocksDB
with a changelog, every partition's state as a commit left it and the input offsets that commit covered,
in the snapshot format (stores/checkpoint.py). Two kinds are due. One per period of `snapshots.every`,
named after the period's start: every task of every worker adds its partitions to the same checkpoint
without a word to the others. And one per request that `python -m runtime checkpoint` leaves in the
location, `<location>/_requests/<name>`, named after the moment it was made.

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
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from aiokafka import TopicPartition

from runtime.config import AppConfig, SnapshotsConfig
from stores.checkpoint import assemble, write_partition_checkpoint
from stores.rocksdb import RocksDBBackend
from stores.snapshot import MANIFEST_NAME, Manifest, read_manifest

if TYPE_CHECKING:
    from runtime.state.task_state import TaskStore
    from runtime.task.task import Task

log = logging.getLogger(__name__)

REQUESTS = "_requests"
LISTING_S = 1.0  # how often the requests are looked for


def checkpoint_name(moment_ms: int) -> str:
    return datetime.fromtimestamp(moment_ms // 1000, UTC).strftime("%Y%m%dT%H%M%SZ")


def requests_dir(location: Path) -> Path:
    return location / REQUESTS


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
        self._requested: list[Due] = []
        self._listed_at = float("-inf")
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
        if self._writing:
            await asyncio.gather(*self._writing, return_exceptions=True)

    def _due(self) -> list[Due]:
        now = self._now_ms()
        due = [
            Due(checkpoint_name(now - now % snapshots.every), snapshots)
            for snapshots in self._locations.values()
            if snapshots.every is not None
        ]
        if time.monotonic() - self._listed_at >= LISTING_S:
            self._listed_at = time.monotonic()
            self._requested = [
                Due(request.name, snapshots)
                for location, snapshots in self._locations.items()
                for request in sorted(requests_dir(location).glob("*"))
            ]
        due += self._requested
        names = {each.name for each in due}
        self._taken = {taken for taken in self._taken if taken[2] in names}  # those no longer due are done
        return due

    def _take(self, entry: TaskStore, due: Due, partition: int, inputs: dict[str, int]) -> None:
        assert isinstance(entry.backend, RocksDBBackend)
        directory = due.snapshots.location / entry.name / due.name
        if (directory / MANIFEST_NAME).is_file():
            return  # complete already (a task that moved here from a worker that had taken its part)
        directory.mkdir(parents=True, exist_ok=True)
        copy = directory / f".rocksdb-{partition}-{uuid.uuid4().hex[:8]}"
        started = time.monotonic()
        entry.backend.checkpoint(copy)
        writing = asyncio.create_task(self._write(entry, due, directory, copy, partition, inputs, started))
        self._writing.add(writing)
        writing.add_done_callback(self._writing.discard)

    async def _write(
        self,
        entry: TaskStore,
        due: Due,
        directory: Path,
        copy: Path,
        partition: int,
        inputs: dict[str, int],
        started: float,
    ) -> None:
        try:
            part = await asyncio.to_thread(write_partition_checkpoint, copy, directory, partition, inputs)
            log.info(
                "checkpoint %s of store %s partition %d: %d rows in %.2fs",
                due.name,
                entry.name,
                partition,
                part.rows,
                time.monotonic() - started,
            )
            manifest = await asyncio.to_thread(self._assemble, entry, directory)
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
            await asyncio.to_thread(prune, directory.parent, due.snapshots.keep)

    def _assemble(self, entry: TaskStore, directory: Path) -> Manifest | None:
        assert entry.changelog is not None
        spec = entry.spec
        return assemble(
            directory,
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


def prune(store_dir: Path, keep: int) -> list[Path]:
    """Delete the store's checkpoints (snapshots with input offsets) beyond the `keep` newest, and those
    older than the newest that never completed (a worker died writing its part) and are not requested;
    Spark's snapshots are left alone. Returns what was deleted."""
    complete, incomplete = [], []
    for directory in store_dir.iterdir():
        if (directory / MANIFEST_NAME).is_file():
            manifest = read_manifest(directory)
            if manifest.input_offsets:
                complete.append((manifest.created_at, directory))
        elif directory.is_dir() and not (requests_dir(store_dir.parent) / directory.name).exists():
            incomplete.append(directory)
    complete.sort()
    gone = [directory for _, directory in complete[: max(0, len(complete) - keep)]]
    if complete:
        newest = complete[-1][1].name
        gone += [directory for directory in incomplete if directory.name < newest]
    for directory in gone:
        shutil.rmtree(directory, ignore_errors=True)
    return gone
