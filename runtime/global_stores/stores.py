"""Global stores: every worker reads their topics whole before it processes anything, then follows them.

One consumer outside the group reads every partition of every global store's topic. The bootstrap
ends when each partition's position reaches the end offset taken at start (under `read_committed`,
the last stable offset); from then on the same consumer follows the topics for the life of the
worker. Each batch is written with its partition's next offset, so a persistent store resumes
where it stopped, and a store claiming offsets the topic does not have is read again from scratch.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from runtime.config import AppConfig
from runtime.counters import Counters
from runtime.global_stores.readers import ReaderFailed, ReaderJob, ReaderProcess, StoreSettings, plan
from runtime.global_stores.store import GlobalStore, dead_letter_handler, set_aside
from runtime.kafka.connection import Clients, start_with_retries
from runtime.kafka.outputs import Outputs
from runtime.task.failures import FailureHandler
from stores import ReadOnlyView, RocksDBBackend
from stores.snapshot import SnapshotError, SnapshotMismatch, ingest_whole, validate
from stores.snapshot_location import Snapshot, newest_snapshot
from stores.snapshot_storage import SnapshotStorage

log = logging.getLogger(__name__)

FETCH_RECORDS = 20_000
READ_IN_PROCESSES = 200_000
"""Records to read at bootstrap from which reader processes do it: they take a few hundred ms to start."""
READERS_PER_CPU = 2
"""Reader processes per topic and CPU at most: more readers than CPUs even out partitions that do not
divide among the CPUs (3 on 2), as the system shares the CPUs among them."""
SST_RECORDS = 250_000
"""Records of a partition a reader gathers into one SST file for a RocksDB store: fewer, larger files
leave RocksDB less to compact, and the reader holds the changes of that many records meanwhile."""
FOLLOW_POLL_MS = 500
BOOTSTRAP_POLL_MS = 200


class GlobalStores:
    """The app's global stores, their consumer, and the follow loop."""

    def __init__(self, config: AppConfig, clients: Clients, counters: Counters):
        self._config = config
        self._clients = clients
        self._counters = counters
        self._stores: dict[str, GlobalStore] = {}
        self._readers: dict[TopicPartition, list[GlobalStore]] = defaultdict(list)
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._dead_letters: Outputs | None = None
        self._failures: dict[str, FailureHandler] = {}
        self._positions: dict[TopicPartition, int] = {}
        self._ends: dict[TopicPartition, int] = {}
        self.bootstrap_seconds: float | None = None

    @property
    def views(self) -> Mapping[str, ReadOnlyView]:
        return {name: store.view for name, store in self._stores.items()}

    def positions(self) -> dict[tuple[str, int], tuple[int, int]]:
        """(next offset to apply, end offset last seen) per partition; read by the metrics' thread."""
        return {(tp.topic, tp.partition): (position, self._ends.get(tp, 0)) for tp, position in self._positions.items()}

    def failures(self, name: str) -> list[Any]:
        """The last records store `name` could not apply (`ApplyFailure`s, oldest first)."""
        return list(self._stores[name].failures)

    async def bootstrap(self, partition_counts: Mapping[str, int]) -> None:
        """Open the stores and read their topics up to the end offsets of now: the barrier before processing."""
        config = self._config
        if not config.global_stores:
            return
        started = time.monotonic()
        for name, spec in config.global_stores.items():
            store = GlobalStore.open(config, name, self._on_failures)
            self._stores[name] = store
            for partition in range(partition_counts[spec.topic]):
                self._readers[TopicPartition(spec.topic, partition)].append(store)
            handler = dead_letter_handler(config, name, self._counters)
            if handler is not None:
                self._failures[name] = handler
        await self._start_clients(partition_counts)
        consumer = self._consumer
        assert consumer is not None
        tps = list(self._readers)
        consumer.assign(tps)
        beginnings = await consumer.beginning_offsets(tps)
        self._ends = await consumer.end_offsets(tps)
        self._discard_impossible(beginnings)
        for store in self._stores.values():
            await self._load_snapshot(store, partition_counts[store.spec.topic])
        for tp in tps:
            stored = [store.next_offset(tp.partition) for store in self._readers[tp]]
            start = min((offset if offset is not None else beginnings[tp]) for offset in stored)
            consumer.seek(tp, start)
            self._positions[tp] = start
        applied_before = self._applied()
        backlog = sum(self._ends[tp] - position for tp, position in self._positions.items())
        cpus = os.cpu_count() or 1
        if backlog >= READ_IN_PROCESSES and cpus > 1:
            await self._read_in_processes(READERS_PER_CPU * cpus)
            for tp, position in self._positions.items():
                consumer.seek(tp, position)
        while any(self._positions[tp] < end for tp, end in self._ends.items()):
            await self._poll(BOOTSTRAP_POLL_MS)
        self.bootstrap_seconds = time.monotonic() - started
        self._counters.global_bootstrap_seconds = self.bootstrap_seconds
        log.info(
            "global stores %s ready: %d records read in %.2fs",
            sorted(self._stores),
            self._applied() - applied_before,
            self.bootstrap_seconds,
        )

    async def follow(self) -> None:
        """Apply new records as they come, until cancelled; a failure to write a store ends the worker."""
        if not self._stores:
            return
        while True:
            await self._poll(FOLLOW_POLL_MS)

    async def close(self) -> None:
        try:
            if self._consumer is not None:
                await self._consumer.stop()
            if self._producer is not None:
                await self._producer.stop()
        finally:
            for store in self._stores.values():
                store.close()

    async def _start_clients(self, partition_counts: Mapping[str, int]) -> None:
        bootstrap = self._clients.bootstrap_servers
        self._consumer = self._clients.consumer(group_id=None, client_id=f"{self._config.app_id}-global-stores")
        await start_with_retries("global-store consumer", bootstrap, self._consumer.start)
        if self._failures:
            self._producer = self._clients.producer(client_id=f"{self._config.app_id}-global-stores")
            await start_with_retries("global-store dead-letter producer", bootstrap, self._producer.start)
            self._dead_letters = Outputs(self._producer, dict(partition_counts), self._counters)

    def _discard_impossible(self, beginnings: Mapping[TopicPartition, int]) -> None:
        """A stored offset past the end (the topic was recreated) or before the beginning (records the
        store never saw were deleted) cannot be resumed from: that store is read again from scratch."""
        for store in self._stores.values():
            for tp, readers in self._readers.items():
                offset = store.next_offset(tp.partition) if store in readers else None
                if offset is not None and not beginnings[tp] <= offset <= self._ends[tp]:
                    log.warning(
                        "global store %s claims offset %d of %s[%d], outside %d..%d: reading it again",
                        store.name,
                        offset,
                        tp.topic,
                        tp.partition,
                        beginnings[tp],
                        self._ends[tp],
                    )
                    store.wipe()
                    break

    async def _load_snapshot(self, store: GlobalStore, partitions: int) -> None:
        """A store missing or behind the newest snapshot (a Spark job's, e.g. from a database dump) is
        loaded from it, so only the topic's records after the snapshot's offsets are read."""
        settings = self._config.snapshots_for(store.spec)
        if settings is None:
            return
        storage = await asyncio.to_thread(settings.storage)  # a bucket's client is made once, from files
        snapshot = await asyncio.to_thread(newest_snapshot, storage, store.name)
        if snapshot is None:
            log.info("global store %s: no snapshot in %s yet", store.name, settings.location)
            return
        manifest, topic = snapshot.manifest, store.spec.topic
        try:
            validate(
                manifest,
                self._config.app_id,
                store.name,
                partitions,
                store.spec.key_serde,
                store.spec.value_serde,
                topic,
            )
            for partition in range(partitions):
                end = self._ends[TopicPartition(topic, partition)]
                if manifest.offset(partition) > end:
                    raise SnapshotMismatch(
                        f"it covers {topic}[{partition}] up to offset {manifest.offset(partition)}, "
                        f"but the topic ends at {end} (was the topic recreated?)"
                    )
        except SnapshotMismatch as error:
            raise SnapshotMismatch(f"global store {store.name}: refusing snapshot {snapshot.where}: {error}") from None
        stored = [store.next_offset(partition) for partition in range(partitions)]
        if all(offset is not None and offset >= manifest.offset(p) for p, offset in enumerate(stored)):
            log.info("global store %s is not behind snapshot %s: keeping it", store.name, snapshot.where)
            return
        if not isinstance(store.backend, RocksDBBackend):
            raise SnapshotError(f"global store {store.name} is not a RocksDB store: snapshots cannot be ingested")
        rows = sum(manifest.row_counts.values())
        log.info("ingesting snapshot %s into global store %s: %d rows", snapshot.where, store.name, rows)
        started = time.monotonic()
        store.wipe()
        await asyncio.to_thread(_ingest_whole, store.backend, storage, snapshot)
        elapsed = time.monotonic() - started
        self._counters.snapshot_ingests += 1
        self._counters.snapshot_rows += rows
        self._counters.snapshot_seconds += elapsed
        log.info(
            "ingested snapshot into global store %s: %d rows in %.2fs, reading %s from offsets %s",
            store.name,
            rows,
            elapsed,
            topic,
            dict(manifest.changelog_offsets),
        )

    async def _poll(self, timeout_ms: int) -> None:
        consumer = self._consumer
        assert consumer is not None
        batches = await consumer.getmany(timeout_ms=timeout_ms, max_records=FETCH_RECORDS)
        for tp, records in batches.items():
            await self._apply(tp, records, await consumer.position(tp))
        for tp in self._positions:
            end = consumer.last_stable_offset(tp)
            if end is not None and end > self._ends.get(tp, 0):
                self._ends[tp] = end
        # Positions move past transaction markers without records: keep them current too.
        for tp, position in self._positions.items():
            if position < self._ends.get(tp, 0) and tp not in batches:
                self._positions[tp] = await consumer.position(tp)

    async def _apply(self, tp: TopicPartition, records: list[Any], next_offset: int) -> None:
        for store in self._readers[tp]:
            stored = store.next_offset(tp.partition)
            new = records if stored is None else [raw for raw in records if raw.offset >= stored]
            await store.apply(tp.partition, new, next_offset)
        self._positions[tp] = next_offset
        self._counters.global_records += len(records)

    async def _read_in_processes(self, processes: int) -> None:
        """A large backlog is read by reader processes (runtime/global_stores/readers.py), at most `processes`
        per topic, while this one writes; what they leave (records written meanwhile, or the rest of a
        reader that failed) is read here."""
        ranges = {tp: (position, self._ends[tp]) for tp, position in self._positions.items()}
        options = self._clients.consumer_options(group_id=None, client_id=f"{self._config.app_id}-global-stores")
        readers: list[ReaderProcess] = []
        applying: list[asyncio.Task[None]] = []
        incoming = [store.incoming for store in self._stores.values() if store.incoming is not None]
        try:
            for directory in incoming:
                shutil.rmtree(directory, ignore_errors=True)  # what a bootstrap that crashed left
                directory.mkdir(parents=True)
            for group in plan(ranges, processes):
                stores = [_reader_settings(store, group) for store in self._readers[group[0]]]
                group_ranges = {tp.partition: ranges[tp] for tp in group}
                job = ReaderJob(options, group[0].topic, group_ranges, stores, SST_RECORDS, self._config.kafka.security)
                readers.append(await ReaderProcess.start(job))
            log.info(
                "global stores: %d reader processes read %d records",
                len(readers),
                sum(end - start for start, end in ranges.values()),
            )
            applying = [asyncio.create_task(self._apply_from(reader)) for reader in readers]
            await asyncio.gather(*applying)
        finally:
            for task in applying:
                task.cancel()
            for reader in readers:
                await reader.stop()
            for directory in incoming:
                shutil.rmtree(directory, ignore_errors=True)

    async def _apply_from(self, reader: ReaderProcess) -> None:
        try:
            async for batch in reader.batches():
                tp = TopicPartition(reader.job.topic, batch.partition)
                if batch.changes is None:
                    await self._apply(tp, batch.records, batch.next_offset)
                    continue
                for store, (applied, changes, sst) in zip(self._readers[tp], batch.changes, strict=True):
                    if sst is None:
                        store.write(tp.partition, changes, applied, batch.next_offset)
                    else:
                        store.ingest(tp.partition, sst, applied, batch.next_offset)
                self._positions[tp] = batch.next_offset
                self._counters.global_records += batch.read
        except ReaderFailed as error:
            log.warning("%s: the worker reads the rest itself", error)

    async def _on_failures(self, store: GlobalStore, failed: list[tuple[Any, BaseException]]) -> None:
        await set_aside(store, failed, self._failures.get(store.name), self._dead_letters, self._counters)

    def _applied(self) -> int:
        return sum(store.applied + store.failure_count for store in self._stores.values())


def _reader_settings(store: GlobalStore, partitions: list[TopicPartition]) -> StoreSettings:
    stored = {tp.partition: store.next_offset(tp.partition) for tp in partitions}
    starts = {partition: offset for partition, offset in stored.items() if offset is not None}
    sst_dir = None if store.incoming is None else str(store.incoming)
    return StoreSettings(store.spec.key_serde, store.spec.value_serde, store.spec.updater, starts, sst_dir)


def _ingest_whole(backend: RocksDBBackend, storage: SnapshotStorage, snapshot: Snapshot) -> None:
    """Every partition's files fetched where they are not local (each checked against its checksum), then loaded."""
    with storage.local_files(snapshot.key, snapshot.manifest.checksums) as directory:
        ingest_whole(backend, directory, snapshot.manifest)
