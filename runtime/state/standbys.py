"""Standby replicas: the stores of tasks other workers run, kept warm here by following their changelogs.

A standby writes into the directory the task's own store would have on this worker, with the changelog
offset it reached, so that when the task lands here its restore (runtime/state/restore.py) reads from
that offset and replays only the standby's lag. One consumer serves all of the worker's standbys; it
reads committed records only (under exactly-once the changelog holds aborted writes), a bounded batch at
a time, and is paused while the worker's own tasks are held back (a full queue, a restore): standbys
give way to the work they stand in for.

Only RocksDB stores with a changelog have standbys: a memory store starts empty in its task whatever
was kept beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition

from runtime.config import AppConfig
from runtime.kafka.standby_placement import Task, task_name
from runtime.state.task_state import store_path
from stores import Backend, StoreCorrupted, StoreError, open_backend, wipe
from stores.rocksdb import held_offset

log = logging.getLogger(__name__)

STANDBY_BATCH = 2_000
"""Records one read takes, across all standbys: small enough that a write of them never holds the loop long."""
IDLE_S = 0.2
RETRY_S = 1.0


class Busy(Protocol):
    """The worker's partitions held back now: while any is, its tasks come first."""

    def paused(self) -> set[TopicPartition]: ...


@dataclass(frozen=True)
class StandbyStore:
    """One store of a stateful task, as a standby follows it."""

    task: Task
    name: str
    changelog: TopicPartition
    path: Path


def logged_stores(config: AppConfig) -> dict[str, list[str]]:
    """Per processor with any, its RocksDB stores logged to a changelog: what a standby keeps."""
    stores = {
        processor.name: [
            name for name, spec in processor.stores.items() if spec.changelog and spec.backend == "rocksdb"
        ]
        for processor in config.processors
    }
    return {processor: names for processor, names in stores.items() if names}


def first_inputs(config: AppConfig) -> dict[str, str]:
    """Per processor with standbys, the input whose partition N its task N reads (its owner runs the task)."""
    stateful = logged_stores(config)
    return {processor.name: processor.inputs[0] for processor in config.processors if processor.name in stateful}


def stateful_tasks(config: AppConfig, partitions: Mapping[str, int]) -> dict[Task, list[StandbyStore]]:
    """Every task with a RocksDB store logged to a changelog, with those stores; `partitions` by input topic."""
    tasks: dict[Task, list[StandbyStore]] = {}
    stateful = logged_stores(config)
    for processor in config.processors:
        logged = stateful.get(processor.name, [])
        for partition in range(partitions.get(processor.inputs[0], 0)) if logged else ():
            tasks[task_name(processor.name, partition)] = [
                StandbyStore(
                    task_name(processor.name, partition),
                    name,
                    TopicPartition(config.changelog_topic(name), partition),
                    store_path(config, name, partition),
                )
                for name in logged
            ]
    return tasks


class StandbyStores:
    """The standby stores of this worker's state directory: those the group's leader asked it to keep
    (`follow`) open, each written with the changelog records a follower reads and the offset after them."""

    def __init__(self, tasks: Mapping[Task, list[StandbyStore]]) -> None:
        self._tasks = tasks
        self._by_changelog = {store.changelog: store for stores in tasks.values() for store in stores}
        self._wanted: set[Task] = set()
        self._open: dict[TopicPartition, Backend] = {}
        self._ends: dict[TopicPartition, int] = {}
        self.changed = asyncio.Event()  # set by `follow`: the follower reads other changelogs now

    @property
    def following(self) -> set[Task]:
        return set(self._wanted)

    @property
    def open(self) -> dict[TopicPartition, int | None]:
        """The changelog partitions of the open stores, with the offset each holds (None: from the beginning)."""
        return {tp: backend.changelog_offset() for tp, backend in self._open.items()}

    @property
    def missing(self) -> bool:
        """Whether a wanted store could not be opened yet (a task leaving this worker still holds it)."""
        return any(store.task in self._wanted and tp not in self._open for tp, store in self._by_changelog.items())

    def positions(self) -> dict[Task, int]:
        """Per task whose stores this worker's state directory holds: the sum of their changelog offsets, what
        the group's leader compares members by. Read in the group's join: a store this process has not opened
        is read from its directory the first time only (`read_all` reads them all before the first join)."""
        sums: dict[Task, int] = {}
        for task, stores in self._tasks.items():
            held = [offset for store in stores if (offset := held_offset(store.path)) is not None]
            if held:
                sums[task] = sum(held)
        return sums

    async def read_all(self) -> None:
        """The positions of the stores on disk, read off the event loop: tens of milliseconds a store."""
        await asyncio.to_thread(self.positions)

    def follow(self, tasks: set[Task]) -> None:
        """The standbys of the latest assignment: those no longer wanted close at once, so that a task
        now assigned here opens its stores without waiting for their lock."""
        self._wanted = {task for task in tasks if task in self._tasks}
        for tp in [tp for tp in self._open if self._by_changelog[tp].task not in self._wanted]:
            self._close(tp)
        self.changed.set()

    def open_wanted(self) -> None:
        for task in sorted(self._wanted):
            for store in self._tasks[task]:
                if store.changelog not in self._open:
                    self._open_store(store)

    def apply(self, tp: TopicPartition, records: list[Any], next_offset: int, end: int | None) -> None:
        """Changelog records and the offset after them, in one write; a store closed meanwhile takes nothing."""
        backend = self._open.get(tp)
        if backend is None:
            return
        if records or next_offset != backend.changelog_offset():
            backend.write(((record.key, record.value) for record in records), next_offset)
        if end is not None:
            self._ends[tp] = end

    def lags(self) -> dict[tuple[str, int], int]:
        """Per changelog partition followed: records between its end, as last fetched, and the standby's position."""
        lags = {}
        for tp, backend in list(self._open.items()):
            end, position = self._ends.get(tp), backend.changelog_offset()
            if end is not None:
                lags[(tp.topic, tp.partition)] = max(0, end - (position or 0))
        return lags

    def close(self) -> None:
        for tp in list(self._open):
            self._close(tp)

    def _open_store(self, store: StandbyStore) -> None:
        partition = store.changelog.partition
        try:
            try:
                backend = open_backend("rocksdb", store.path)
            except StoreCorrupted as error:
                log.warning(
                    "standby store %s partition %d is damaged (%s): rebuilding it", store.name, partition, error
                )
                wipe(store.path)
                backend = open_backend("rocksdb", store.path)
        except StoreError as error:  # held by a task that is leaving: tried again later
            log.debug("standby store %s partition %d not opened: %s", store.name, partition, error)
            return
        self._open[store.changelog] = backend
        offset = backend.changelog_offset()
        log.info(
            "standby of store %s partition %d follows its changelog from %s",
            store.name,
            partition,
            "the beginning" if offset is None else f"offset {offset}",
        )

    def _close(self, tp: TopicPartition) -> None:
        backend = self._open.pop(tp)
        self._ends.pop(tp, None)
        try:
            backend.close()
        except StoreError as error:
            log.error("standby store %s partition %d: %s", self._by_changelog[tp].name, tp.partition, error)


class StandbyFollower:
    """One consumer that keeps all of this worker's standby stores up to their changelogs."""

    def __init__(self, stores: StandbyStores, new_consumer: Callable[[], AIOKafkaConsumer]) -> None:
        self._stores = stores
        self._new_consumer = new_consumer
        self._retry_at = 0.0  # a store still held by a task leaving this worker is tried again from then

    async def run(self, busy: Busy) -> None:
        consumer = self._new_consumer()
        await consumer.start()
        try:
            while True:
                await self._step(consumer, busy)
        finally:
            self._stores.close()
            await consumer.stop()

    async def _step(self, consumer: AIOKafkaConsumer, busy: Busy) -> None:
        changed = self._stores.changed
        if changed.is_set() or (self._stores.missing and time.monotonic() >= self._retry_at):
            changed.clear()
            await self._reassign(consumer)
        assigned = consumer.assignment()
        if not assigned:
            await self._idle()
            return
        if busy.paused():
            consumer.pause(*assigned)
            await asyncio.sleep(IDLE_S)
            return
        consumer.resume(*assigned)
        batches = await consumer.getmany(timeout_ms=int(IDLE_S * 1000), max_records=STANDBY_BATCH)
        for tp in assigned:
            position = await consumer.position(tp)
            end = consumer.last_stable_offset(tp)
            if end is None or end < 0:
                end = consumer.highwater(tp)
            self._stores.apply(tp, batches.get(tp, []), position, end if end is not None and end >= 0 else None)

    async def _idle(self) -> None:
        """Nothing to follow: until the next assignment, or the retry of a store still held."""
        timeout = max(0.0, self._retry_at - time.monotonic()) if self._stores.missing else None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stores.changed.wait(), timeout=timeout)

    async def _reassign(self, consumer: AIOKafkaConsumer) -> None:
        """Read each open store's changelog from the offset it holds; a new assignment forgets the positions."""
        self._stores.open_wanted()
        if self._stores.missing:
            self._retry_at = time.monotonic() + RETRY_S
        offsets = self._stores.open
        if set(offsets) == consumer.assignment():
            return
        consumer.assign(sorted(offsets))
        for tp, offset in offsets.items():
            if offset is not None:
                consumer.seek(tp, offset)
        fresh = [tp for tp, offset in offsets.items() if offset is None]
        if fresh:
            await consumer.seek_to_beginning(*fresh)


def state_home(config: AppConfig) -> str:
    """Where this process keeps the app's stores, as the group's members tell it: the members that share it
    share their stores."""
    return f"{socket.gethostname()}:{config.state_dir.resolve() / config.app_id}"
