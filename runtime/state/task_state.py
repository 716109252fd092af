"""A task's stores: opened on assignment, restored from their changelogs, flushed at commit, closed on revoke."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from aiokafka import TopicPartition

from processors.serdes import Serde
from runtime.config import AppConfig, ProcessorConfig, SnapshotsConfig, StoreConfig
from runtime.config.stores import TableConfig
from runtime.kafka.outputs import Outputs
from runtime.state.store_buffers import StoreBuffers
from stores import (
    TIME_VIEWS,
    Backend,
    BufferedKeyValueStore,
    SessionView,
    StoreCorrupted,
    StoreError,
    StoreLocked,
    StreamClock,
    TtlView,
    VersionedStore,
    WindowView,
    open_backend,
    wipe,
)
from stores.serdes import RawSerde, resolve_serde

log = logging.getLogger(__name__)

LOCK_RETRIES = 150  # 30 s: the previous owner on this machine closes it after its last commit


@dataclass
class TaskStore:
    name: str
    spec: StoreConfig
    path: Path
    store: BufferedKeyValueStore  # of a window or session store, or one with a TTL, the bytes under `view`
    view: WindowView | SessionView | TtlView | None  # what a processor reads such a store through
    backend: Backend  # the store's own, for loading snapshots into
    changelog: TopicPartition | None
    snapshots: SnapshotsConfig | None
    # A table's store: its changelog is the topic it mirrors, which the task reads as an input; nothing
    # is logged to it, and it is restored up to the group's committed offset (the rest is read as input).
    mirrors_input: bool = False
    # A table with history: its versions, in `store`'s bytes, which its records are written through.
    versions: VersionedStore | None = None

    def restore(self, records: list[Any], next_offset: int) -> None:
        """Changelog records read by a restore, and the offset after them, in one write; a table with
        history keeps each record as a version at its timestamp."""
        if self.versions is not None:
            self.versions.restore(records, next_offset)
        else:
            self.store.restore(((record.key, record.value) for record in records), next_offset)

    def table_layout_fits(self) -> bool:
        """Whether a table's store was written with the history setting it has now (a table that gained or
        lost `history_ms` is read again from its topic)."""
        if self.versions is not None:
            return self.versions.layout_fits()
        return not self.store.holds_stream_time()


def store_path(config: AppConfig, store: str, partition: int) -> Path:
    return config.state_dir / config.app_id / store / str(partition)


class TaskState:
    """Owns the store instances of one task (processor x partition)."""

    def __init__(
        self,
        config: AppConfig,
        spec: ProcessorConfig,
        partition: int,
        outputs: Outputs,
        topic_serdes: Mapping[str, tuple[Serde, Serde]] | None = None,
        buffers: StoreBuffers | None = None,
    ):
        self.partition = partition
        self._config = config
        self._spec = spec
        self._outputs = outputs
        self._topic_serdes = topic_serdes or {}
        self._buffers = buffers
        self.stores: dict[str, TaskStore] = {}
        # What tells the stores with a TTL the task's stream time: its context, once it is built.
        self.stream_clock: StreamClock | None = None
        # The input offsets the stores' contents reflect, for a query to tell with what it read: the last
        # commit's, or, until the task's first, those its stores were restored to (`started_at`).
        self.committed_offsets: dict[TopicPartition, int] = {}

    def started_at(self, offsets: Mapping[TopicPartition, int]) -> None:
        """The restored stores hold what was committed up to these input offsets."""
        self.committed_offsets = dict(offsets)

    @property
    def app_id(self) -> str:
        return self._config.app_id

    async def open(self) -> None:
        """Open every store; a store another task on this machine still closes is waited for."""
        for name, spec in self._spec.stores.items():
            changelog = TopicPartition(self._config.changelog_topic(name), self.partition) if spec.changelog else None
            path = store_path(self._config, name, self.partition)
            backend = await self._backend(name, spec.backend, path)
            store, view = self._built(name, spec, backend, changelog)
            snapshots = self._config.snapshots_for(spec)
            self.stores[name] = TaskStore(name, spec, path, store, view, backend, changelog, snapshots)
        for name, table in self._spec.tables.items():
            self.stores[name] = await self._open_table(name, table)

    async def _open_table(self, name: str, table: TableConfig) -> TaskStore:
        """A table's store keeps the topic's bytes as they are, and reads them with the topic's serdes; one
        with history keeps them as versions, read through its view."""
        path = store_path(self._config, name, self.partition)
        spec = StoreConfig(backend=table.backend, changelog=False)
        backend = await self._backend(name, table.backend, path)
        keys, values = self._topic_serdes[table.topic]
        changelog = TopicPartition(table.topic, self.partition)
        if table.history_ms is None:
            store = BufferedKeyValueStore(backend, keys, values, name=name, changelog=False)
            return TaskStore(name, spec, path, store, None, backend, changelog, None, mirrors_input=True)
        store = BufferedKeyValueStore(backend, RawSerde(), RawSerde(), name=name, changelog=False)
        versions = VersionedStore(store, table.history_ms, keys, values)
        return TaskStore(name, spec, path, store, None, backend, changelog, None, mirrors_input=True, versions=versions)

    def _built(
        self, name: str, spec: StoreConfig, backend: Backend, changelog: TopicPartition | None
    ) -> tuple[BufferedKeyValueStore, WindowView | SessionView | TtlView | None]:
        keys, values = resolve_serde(spec.key_serde), resolve_serde(spec.value_serde)
        logged = changelog is not None
        if spec.kind == "key_value" and spec.ttl_ms is None:
            return BufferedKeyValueStore(backend, keys, values, name=name, changelog=logged), None
        # A view over a store of bytes, which its changelog, restore and snapshots handle as any other.
        store = BufferedKeyValueStore(backend, RawSerde(), RawSerde(), name=name, changelog=logged)
        if spec.ttl_ms is not None:
            return store, TtlView(store, spec.ttl_ms, keys, values, self.stream_clock)
        assert spec.retention_ms is not None  # the config requires it of these kinds
        return store, TIME_VIEWS[spec.kind](store, spec.retention_ms, keys, values)

    def table_inputs(self) -> dict[TopicPartition, str]:
        """The table store that mirrors each of the task's table partitions."""
        return {TopicPartition(table.topic, self.partition): name for name, table in self._spec.tables.items()}

    def write_table(self, tp: TopicPartition, records: list[Any]) -> None:
        """A table partition's records into the store that mirrors it, as the topic holds them (a record
        without a value deletes); a table with history keeps each as a version at its timestamp."""
        entry = self.stores[self.table_inputs()[tp]]
        if entry.versions is not None:
            entry.versions.write_records(records)
            return
        write = entry.store.write_encoded
        for raw in records:
            write(raw.key, raw.value)

    async def _backend(self, name: str, kind: Literal["memory", "rocksdb"], path: Path) -> Backend:
        """The store's backend; one another task on this machine still closes is waited for, a damaged
        one wiped (its changelog rebuilds it)."""
        for attempt in range(LOCK_RETRIES):
            try:
                try:
                    return open_backend(kind, path)
                except StoreCorrupted as error:
                    log.warning(
                        "store %s partition %d is damaged (%s): wiping it to rebuild from its changelog",
                        name,
                        self.partition,
                        error,
                    )
                    wipe(path)
                    return open_backend(kind, path)
            except StoreLocked:
                if attempt == LOCK_RETRIES - 1:
                    raise
                await asyncio.sleep(0.2)
        raise AssertionError("unreachable: the last attempt raises")

    def rebuild(self, name: str) -> None:
        """Drop the local copy of a store (ahead of its changelog) and start empty."""
        entry = self.stores[name]
        entry.store.wipe()

    def _write_stream_times(self) -> None:
        """Window and session stores, and stores with a TTL, keep their stream time in memory between commits."""
        for entry in self.stores.values():
            if entry.view is not None:
                entry.view.write_stream_time()
            elif entry.versions is not None:
                entry.versions.write_stream_time()

    def _expire(self) -> None:
        """The stores with a TTL delete what the stream time expired, so that the tombstones go with the
        commit whose records moved it there; tables with history drop the versions it put out of reach."""
        for entry in self.stores.values():
            if isinstance(entry.view, TtlView):
                entry.view.expire()
            elif entry.versions is not None:
                entry.versions.expire()

    @property
    def has_unflushed_writes(self) -> bool:
        return any(entry.store.pending_count for entry in self.stores.values())

    def note_buffered(self) -> None:
        """After a batch: what the stores hold until the next commit, for the worker's bound on it."""
        if self._buffers is not None:
            self._buffers.hold(self, sum(entry.store.buffered_bytes for entry in self.stores.values()))

    def log_changes(self) -> None:
        """Hand the stores' changes since the last commit to the output path, as changelog records."""
        self._expire()
        self._write_stream_times()
        for entry in self.stores.values():
            if entry.changelog is not None and not entry.mirrors_input:
                changelog = entry.changelog
                self._outputs.append_changes(changelog.topic, changelog.partition, entry.store.take_changes().items())

    def flush(self, committed: Mapping[TopicPartition, int]) -> None:
        """Write pending changes with the changelog offset they are covered by (after the acks); a table's
        with the input offset just `committed` of the topic it mirrors."""
        self._write_stream_times()
        for entry in self.stores.values():
            offset = None
            if entry.mirrors_input:
                offset = committed.get(entry.changelog) if entry.changelog is not None else None
            elif entry.changelog is not None:
                offset = self._outputs.acked_ends.get((entry.changelog.topic, entry.changelog.partition))
            entry.store.flush(offset)
        self.committed_offsets = dict(committed)
        self._buffers_emptied()

    def discard(self) -> None:
        """Drop the writes of an aborted transaction."""
        for entry in self.stores.values():
            entry.store.discard()
        self._buffers_emptied()

    def close(self) -> None:
        """Close every store, also when one fails: a store left open keeps its lock until the process ends.

        Nothing is lost when a close fails: the last commit's writes are in the changelog, and the
        next owner replays whatever the store lacks.
        """
        for entry in self.stores.values():
            try:
                entry.store.close()
            except StoreError as error:
                log.error("store %s partition %d: %s", entry.name, self.partition, error)
        self._buffers_emptied()

    def _buffers_emptied(self) -> None:
        if self._buffers is not None:
            self._buffers.hold(self, 0)
