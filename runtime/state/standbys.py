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
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition

from runtime.config import AppConfig
from runtime.kafka.standby_placement import Task, task_name
from runtime.state.task_state import store_path
from stores import Backend, StoreError, open_backend
from stores.rocksdb import stored_offset

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


class StandbyFollower:
    """Keeps the standby stores the group's leader gave this worker (`follow`) up to their changelogs."""

    def __init__(self, tasks: Mapping[Task, list[StandbyStore]], new_consumer: Callable[[], AIOKafkaConsumer]) -> None:
        self._tasks = tasks
        self._new_consumer = new_consumer
        self._wanted: set[Task] = set()
        self._open: dict[TopicPartition, Backend] = {}
        self._stores: dict[TopicPartition, StandbyStore] = {
            store.changelog: store for stores in tasks.values() for store in stores
        }
        self._positions: dict[TopicPartition, int] = {}
        self._ends: dict[TopicPartition, int] = {}
        self._changed = asyncio.Event()
        self._retry_at = 0.0  # a store held by a task leaving this worker is tried again from then

    @property
    def following(self) -> set[Task]:
        return set(self._wanted)

    def positions(self) -> dict[Task, int]:
        """Per task whose stores this worker's state directory holds: the sum of their changelog offsets, what
        the group's leader compares members by."""
        sums: dict[Task, int] = {}
        for task, stores in self._tasks.items():
            offsets = [self._position(store) for store in stores]
            held = [offset for offset in offsets if offset is not None]
            if held:
                sums[task] = sum(held)
        return sums

    def _position(self, store: StandbyStore) -> int | None:
        backend = self._open.get(store.changelog)
        return backend.changelog_offset() if backend is not None else stored_offset(store.path)

    def follow(self, tasks: set[Task]) -> None:
        """The standbys of the latest assignment: those no longer wanted close at once, so that a task
        now assigned here opens its stores without waiting for their lock."""
        self._wanted = {task for task in tasks if task in self._tasks}
        self._retry_at = 0.0
        for tp in [tp for tp, store in self._stores.items() if tp in self._open and store.task not in self._wanted]:
            self._close(tp)
        self._changed.set()

    def lags(self) -> dict[tuple[str, int], int]:
        """Per changelog partition followed: records between its end, as last fetched, and the standby's position."""
        return {
            (tp.topic, tp.partition): max(0, self._ends[tp] - position)
            for tp, position in list(self._positions.items())
            if tp in self._ends
        }

    async def run(self, busy: Busy) -> None:
        consumer = self._new_consumer()
        await consumer.start()
        try:
            while True:
                await self._step(consumer, busy)
        finally:
            for tp in list(self._open):
                self._close(tp)
            await consumer.stop()

    async def _step(self, consumer: AIOKafkaConsumer, busy: Busy) -> None:
        if self._changed.is_set() and time.monotonic() >= self._retry_at:
            self._changed.clear()
            await self._reassign(consumer)
        assigned = consumer.assignment()
        if not assigned:
            await self._wait_for_change()
            return
        if busy.paused():
            consumer.pause(*assigned)
            await asyncio.sleep(IDLE_S)
            return
        consumer.resume(*assigned)
        batches = await consumer.getmany(timeout_ms=int(IDLE_S * 1000), max_records=STANDBY_BATCH)
        for tp in assigned:
            position = await consumer.position(tp)
            backend = self._open.get(tp)
            if backend is None:  # given up while the read waited
                continue
            records = batches.get(tp, [])
            if records or position != self._positions.get(tp):
                backend.write(((record.key, record.value) for record in records), position)
                self._positions[tp] = position
            end = consumer.last_stable_offset(tp)
            if end is None or end < 0:
                end = consumer.highwater(tp)
            if end is not None and end >= 0:
                self._ends[tp] = end

    async def _wait_for_change(self) -> None:
        if self._changed.is_set():  # stores still held elsewhere: tried again at `_retry_at`
            await asyncio.sleep(max(0.0, self._retry_at - time.monotonic()))
            return
        try:
            await asyncio.wait_for(self._changed.wait(), timeout=IDLE_S * 5)
        except TimeoutError:
            self._changed.set()  # a store another task held may be free now

    async def _reassign(self, consumer: AIOKafkaConsumer) -> None:
        """Open the wanted stores not open yet (one still held by a task leaving this worker is tried again
        later), and read each open one's changelog from the offset it holds."""
        for task in sorted(self._wanted):
            for store in self._tasks[task]:
                if store.changelog not in self._open:
                    self._open_store(store)
        wanted = set(self._open)
        if wanted != consumer.assignment():
            known = consumer.assignment()
            consumer.assign(sorted(wanted))
            fresh = []
            for tp in wanted - known:
                offset = self._open[tp].changelog_offset()
                if offset is None:
                    fresh.append(tp)
                else:
                    consumer.seek(tp, offset)
            if fresh:
                await consumer.seek_to_beginning(*fresh)
        if any(store.task in self._wanted for tp, store in self._stores.items() if tp not in self._open):
            self._retry_at = time.monotonic() + RETRY_S
            self._changed.set()

    def _open_store(self, store: StandbyStore) -> None:
        try:
            backend = open_backend("rocksdb", store.path)
        except StoreError as error:  # held by a task that is leaving, or damaged: tried again at the next change
            log.debug("standby store %s partition %d not opened: %s", store.name, store.changelog.partition, error)
            return
        self._open[store.changelog] = backend
        offset = backend.changelog_offset()
        if offset is not None:
            self._positions[store.changelog] = offset
        log.info(
            "standby of store %s partition %d follows its changelog from offset %s",
            store.name,
            store.changelog.partition,
            offset if offset is not None else "the beginning",
        )

    def _close(self, tp: TopicPartition) -> None:
        backend = self._open.pop(tp)
        self._positions.pop(tp, None)
        self._ends.pop(tp, None)
        try:
            backend.close()
        except StoreError as error:
            log.error("standby store %s: %s", tp, error)
