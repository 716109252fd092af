"""One global store: a topic's records applied to a local store, and the records that could not be."""

from __future__ import annotations

import logging
import traceback
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.config import AppConfig, ErrorPolicy, GlobalStoreConfig
from runtime.counters import Counters
from runtime.global_stores.changes import ChangeMaker, Failed
from runtime.kafka.outputs import Outputs
from runtime.summarised_log import SummarisedLog
from runtime.task.event_time_bounds import moment
from runtime.task.failures import FailureHandler, Stage
from stores import (
    Backend,
    BufferedKeyValueStore,
    Change,
    ReadOnlyView,
    RocksDBBackend,
    StoreCorrupted,
    StoreLocked,
    open_backend,
    wipe,
)

log = logging.getLogger(__name__)

KEPT_FAILURES = 1000
MAX_COPIES = 32
"""Worker processes on one machine each keep a copy of a RocksDB global store: `0/`, `1/`, ..."""


OnFailures = Callable[["GlobalStore", list[Failed]], Awaitable[None]]
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
        return (
            f"{self.topic}[{self.partition}]@{self.offset} ({moment(self.timestamp)}) key={self.key!r}: {self.message}"
        )


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
        # A topic of reference data full of records the store cannot take would log a trace for each.
        self.told = SummarisedLog(log, f"records global store {name} could not apply, not logged one by one")
        self.applied = 0
        self._maker = ChangeMaker.configured(spec.key_serde, spec.value_serde, spec.updater)
        self._store = BufferedKeyValueStore(backend, self._maker.keys, self._maker.values, name=name)
        self._on_failures = on_failures
        self.view = ReadOnlyView(self._store)

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
                log.warning("global store %s at %s is damaged (%s): reading it again from the topic", name, path, error)
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
        changes, failed = self._maker.changes(self.spec.topic, partition, records)
        if failed:
            self.failure_count += len(failed)
            self.failures.extend(_failure(raw, error) for raw, error in failed)
            await self._on_failures(self, failed)
        self._store.restore(changes, next_offset, source=partition)
        self.applied += len(records) - len(failed)

    def write(self, partition: int, changes: Iterable[Change], applied: int, next_offset: int) -> None:
        """Changes made elsewhere (by a bootstrap reader) of `applied` records, written with `next_offset`."""
        self._store.restore(changes, next_offset, source=partition)
        self.applied += applied

    @property
    def incoming(self) -> Path | None:
        """Where bootstrap readers leave SST files for a RocksDB store to ingest: beside its copy."""
        return None if self.path is None else self.path.with_name(f"{self.path.name}.incoming")

    def ingest(self, partition: int, sst: str, applied: int, next_offset: int) -> None:
        """An SST file a bootstrap reader wrote with the changes of `applied` records, then `next_offset`."""
        assert isinstance(self.backend, RocksDBBackend), "only a RocksDB store gets SST files"
        self.backend.ingest([sst], next_offset, source=partition, move=True)
        self.applied += applied

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


def dead_letter_handler(config: AppConfig, name: str, counters: Counters) -> FailureHandler | None:
    """The policy for the records global store `name` cannot apply, when they are dead-lettered."""
    if config.global_stores[name].errors != "dead_letter":
        return None
    policies = {Stage.GLOBAL_STORE: ErrorPolicy.DEAD_LETTER}
    return FailureHandler(config.app_id, policies, config.dead_letter_topic, counters)


async def set_aside(
    store: GlobalStore,
    failed: list[Failed],
    handler: FailureHandler | None,
    dead_letters: Outputs | None,
    counters: Counters,
) -> None:
    """Records of a batch the store could not apply: logged, then dead-lettered (and acknowledged before
    the store's offset moves past them) or, under `errors: skip`, counted as skipped."""
    counters.global_store_errors += len(failed)
    recent = list(store.failures)[-len(failed) :]  # the last KEPT_FAILURES at most
    for failure, (_, error) in zip(recent, failed[len(failed) - len(recent) :], strict=True):
        if store.told.tells(type(error).__name__):
            log.warning("global store %s could not apply %s\n%s", store.name, failure, failure.stack_trace)
    if handler is None or dead_letters is None:
        counters.skipped += len(failed)
        return
    for raw, error in failed:
        handler.handle(Stage.GLOBAL_STORE, store.name, raw, error, dead_letters)
    await dead_letters.wait_acked()
