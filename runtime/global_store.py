"""One global store: a topic's records applied to a local store, and the records that could not be."""

from __future__ import annotations

import logging
import traceback
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from processors.global_updater import GlobalStoreUpdater
from processors.record import Record
from processors.serdes import resolve_serde
from runtime.config import AppConfig, GlobalStoreConfig
from stores import Backend, Change, KeyValueStore, ReadOnlyStore, StoreCorrupted, StoreLocked, open_backend, wipe

log = logging.getLogger(__name__)

KEPT_FAILURES = 1000
MAX_COPIES = 32
"""Worker processes on one machine each keep a copy of a RocksDB global store: `0/`, `1/`, ..."""


OnFailures = Callable[["GlobalStore", list[tuple[Any, BaseException]]], Awaitable[None]]
"""Told of the records of a batch that failed (raw record, error) before the batch is written."""


@dataclass(frozen=True)
class ApplyFailure:
    """A record the store could not take, with everything needed to find and fix it."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    message: str
    stack_trace: str

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset} key={self.key!r}: {self.message}"


class GlobalStore:
    """Applies records partition by partition, each batch with the partition's next offset in one write."""

    def __init__(
        self,
        name: str,
        spec: GlobalStoreConfig,
        backend: Backend,
        path: Path | None,
        on_failures: OnFailures,
    ):
        self.name = name
        self.spec = spec
        self.path = path
        self.backend = backend
        self.failures: deque[ApplyFailure] = deque(maxlen=KEPT_FAILURES)
        self.failure_count = 0
        self.applied = 0
        self._keys = resolve_serde(spec.key_serde)
        self._values = resolve_serde(spec.value_serde)
        self._store = KeyValueStore(backend, self._keys, self._values, name=name)
        self._on_failures = on_failures
        self._failed: list[tuple[Any, BaseException]] = []  # of the batch being applied
        self._updater = spec.updater_instance()
        self._mirrors = type(self._updater).changes is GlobalStoreUpdater.changes
        self.view = ReadOnlyStore(self._store)

    @classmethod
    def open(cls, config: AppConfig, name: str, on_failures: OnFailures) -> GlobalStore:
        """Open (or create) the store; a damaged RocksDB copy is wiped and read again from the topic."""
        spec = config.global_stores[name]
        if spec.backend == "memory":
            return cls(name, spec, open_backend("memory"), None, on_failures)
        root = config.state_dir / config.app_id / "global" / name
        for copy in range(MAX_COPIES):
            path = root / str(copy)
            try:
                backend = open_backend("rocksdb", path)
            except StoreLocked:
                continue  # another worker process on this machine has this copy
            except StoreCorrupted as error:
                log.warning("global store %s at %s is damaged (%s): reading it again from the topic",
                            name, path, error)  # fmt: skip
                wipe(path)
                backend = open_backend("rocksdb", path)
            return cls(name, spec, backend, path, on_failures)
        raise StoreLocked(f"global store {name}: all {MAX_COPIES} copies under {root} are in use")

    def next_offset(self, partition: int) -> int | None:
        """Where reading `partition` resumes, as stored with the data; `None`: from the beginning."""
        return self._store.changelog_offset(partition)

    def wipe(self) -> None:
        self._store.wipe()

    async def apply(self, partition: int, records: list[Any], next_offset: int) -> None:
        """Write the changes of `records` (aiokafka consumer records) and `next_offset`, atomically.

        A record that fails to decode or update is left out, recorded and handed to `on_failures`
        (which dead-letters it) before the write moves the offset past it.
        """
        changes = self._mirrored(records) if self._mirrors else self._updated(records)
        failed = self._failed
        if failed:
            self._failed = []
            self.failure_count += len(failed)
            self.failures.extend(_failure(raw, error) for raw, error in failed)
            await self._on_failures(self, failed)
        self._store.restore(changes, next_offset, source=partition)
        self.applied += len(records) - len(failed)

    def _mirrored(self, records: list[Any]) -> list[Change]:
        """The default update without a round trip through objects: the value bytes are kept as sent,
        once they are known to decode; the key is encoded again, as `get` encodes it."""
        changes: list[Change] = []
        encode_key, decode_key, decode_value = self._keys.serialize, self._keys.deserialize, self._values.deserialize
        for raw in records:
            try:
                if raw.key is None:
                    raise ValueError("a record without a key cannot be stored")
                if raw.value is not None:
                    decode_value(raw.value)
                changes.append((encode_key(decode_key(raw.key)), raw.value))
            except Exception as error:  # bad data: recorded, the store goes on
                self._failed.append((raw, error))
        return changes

    def _updated(self, records: list[Any]) -> list[Change]:
        changes: list[Change] = []
        append, updater_changes = changes.append, self._updater.changes
        encode_key, encode_value = self._keys.serialize, self._values.serialize
        decode_key, decode_value = self._keys.deserialize, self._values.deserialize
        for raw in records:
            done = len(changes)
            try:
                record = Record(
                    raw.topic,
                    raw.partition,
                    raw.offset,
                    raw.timestamp,
                    None if raw.key is None else decode_key(raw.key),
                    None if raw.value is None else decode_value(raw.value),
                    raw.headers,
                )
                for key, value in updater_changes(record):
                    append((encode_key(key), None if value is None else encode_value(value)))
            except Exception as error:  # bad data or a failing updater: recorded, the store goes on
                del changes[done:]  # nothing of a failed record is applied
                self._failed.append((raw, error))
        return changes

    def close(self) -> None:
        self._store.close()


def _failure(raw: Any, error: BaseException) -> ApplyFailure:
    return ApplyFailure(
        raw.topic,
        raw.partition,
        raw.offset,
        raw.timestamp,
        raw.key,
        f"{type(error).__name__}: {error}",
        "".join(traceback.format_exception(error)),
    )
