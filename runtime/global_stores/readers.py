"""Bootstrap readers: processes that read a large backlog of a global store's topic, so that decoding and
the updater run on every core while the worker only writes.

A reader (a Python process running `main` below) gets its job on stdin: a consumer's settings, some
partitions of one topic with the offsets to read from and until, and the settings of the stores
that read the topic. It reads its partitions with its own consumer, turns each fetched batch into
each store's changes with the `ChangeMaker` the worker uses, and sends them to the worker on stdout,
with the partition's next offset, as length-prefixed msgpack. The worker writes each batch with
its offset in one write, as it writes the batches it reads itself. For a RocksDB store the reader
gathers up to `ReaderJob.sst_records` records of a partition and writes their changes, sorted, into
an SST file that the worker ingests with the offset: the worker then writes nothing per record, and
RocksDB neither logs nor flushes what it ingests. A batch in which a record failed comes back as
its raw records instead: the worker applies those itself, so the failure is recorded and
dead-lettered before the offset moves past it, as always. A reader writes its errors to the
worker's stderr; if it fails, the worker reads what it left.

An updater then runs in several processes, one instance in each: it must not count on seeing
every record of the topic (no state carried from record to record).
"""

from __future__ import annotations

import asyncio
import os
import pickle
import struct
import sys
from collections import defaultdict
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

import msgpack
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from runtime.garbage_collection import bulk_allocations
from runtime.global_stores.changes import ChangeMaker
from runtime.kafka.aiokafka_internals import replace_consumer_record
from runtime.kafka.security import client_security
from stores.sst import write_partition_sst

if TYPE_CHECKING:
    from stores import Change
    from stores.kafka_security import KafkaSecurity

BATCH_RECORDS = 20_000
POLL_MS = 200
STREAM_LIMIT = 16 * 1024 * 1024
_LENGTH = struct.Struct(">I")


class ReaderFailed(Exception):
    """A reader process ended before reading its partitions to their ends."""


@dataclass(frozen=True)
class StoreSettings:
    """What a reader needs of a store: how it makes changes, and where it starts in each partition."""

    key_serde: str
    value_serde: str
    updater: str | None
    starts: Mapping[int, int]  # partition -> first offset the store takes; absent: every record
    sst_dir: str | None = None  # a RocksDB store's: where the reader writes SST files for the worker


@dataclass(frozen=True)
class ReaderJob:
    consumer: Mapping[str, Any]  # the consumer's keyword arguments
    topic: str
    ranges: Mapping[int, tuple[int, int]]  # partition -> (offset to read from, end offset to read until)
    stores: list[StoreSettings]  # every store reading the topic, in the worker's order
    sst_records: int  # records of a partition gathered into one SST file
    security: KafkaSecurity  # the consumer's TLS and SASL, made into a context and a token provider by the reader


StoreChanges = tuple[int, Sequence["Change"], str | None]
"""A store's part of a batch: (records applied, changes, or the SST file holding them instead)."""


@dataclass(frozen=True)
class Batch:
    """Records of a partition up to `next_offset`: each store's changes, or the raw records when some
    record failed (`changes` is then None)."""

    partition: int
    next_offset: int
    read: int
    changes: Sequence[StoreChanges] | None
    records: list[ConsumerRecord[bytes, bytes]]


def plan(ranges: Mapping[TopicPartition, tuple[int, int]], processes: int) -> list[list[TopicPartition]]:
    """The partitions with records to read, in at most `processes` groups per topic, balanced by their
    backlogs: the largest first, each to the group with the least so far."""
    by_topic: dict[str, list[TopicPartition]] = defaultdict(list)
    for tp, (start, end) in ranges.items():
        if start < end:
            by_topic[tp.topic].append(tp)
    groups: list[list[TopicPartition]] = []
    for tps in by_topic.values():
        tps.sort(key=lambda tp: ranges[tp][0] - ranges[tp][1])
        topic_groups: list[list[TopicPartition]] = [[] for _ in range(min(processes, len(tps)))]
        backlogs = [0] * len(topic_groups)
        for tp in tps:
            least = backlogs.index(min(backlogs))
            topic_groups[least].append(tp)
            backlogs[least] += ranges[tp][1] - ranges[tp][0]
        groups.extend(topic_groups)
    return groups


class ReaderProcess:
    """A reader process of the worker, and the batches it sends."""

    def __init__(self, job: ReaderJob, process: asyncio.subprocess.Process):
        self.job = job
        self._process = process

    @classmethod
    async def start(cls, job: ReaderJob) -> ReaderProcess:
        # The reader imports what the worker imports (the updater's module too), from the same places.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path or os.getcwd() for path in sys.path)}
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            f"from {__name__} import main; main()",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=env,
            limit=STREAM_LIMIT,
        )
        assert process.stdin is not None
        process.stdin.write(pickle.dumps(job))
        process.stdin.close()
        return cls(job, process)

    async def batches(self) -> AsyncIterator[Batch]:
        """Until the reader is done; raises `ReaderFailed` if it ends any other way."""
        stdout = self._process.stdout
        assert stdout is not None
        topic = self.job.topic
        while True:
            try:
                header = await stdout.readexactly(_LENGTH.size)
                payload = await stdout.readexactly(_LENGTH.unpack(header)[0])
            except asyncio.IncompleteReadError:
                code = await self._process.wait()
                if code == 0:  # it read its partitions to their ends and sent every batch
                    return
                raise ReaderFailed(f"the reader of {topic} {sorted(self.job.ranges)} exited with {code}") from None
            partition, next_offset, read, changes, raw = msgpack.unpackb(payload, use_list=False)
            records = [
                ConsumerRecord(
                    topic,
                    partition,
                    offset,
                    timestamp,
                    timestamp_type,
                    key,
                    value,
                    None,
                    -1 if key is None else len(key),
                    -1 if value is None else len(value),
                    headers,
                )
                for offset, timestamp, timestamp_type, key, value, headers in raw
            ]
            yield Batch(partition, next_offset, read, changes, records)

    async def stop(self) -> None:
        """Ends the process if it still runs (the bootstrap was cancelled or failed)."""
        if self._process.returncode is None:
            self._process.kill()
        await self._process.wait()


class _Chunk:
    """A partition's records since its last message, as each store's changes."""

    def __init__(self, stores: int):
        self.read = 0
        self.applied = [0] * stores
        self.changes: list[list[Change]] = [[] for _ in range(stores)]

    def add(self, made: list[tuple[int, list[Change]]], read: int) -> None:
        self.read += read
        for index, (applied, changes) in enumerate(made):
            self.applied[index] += applied
            self.changes[index].extend(changes)


class _Sender:
    """Packs messages onto the worker's channel; writes a RocksDB store's changes into an SST file."""

    def __init__(self, job: ReaderJob, out: IO[bytes]):
        self._job = job
        self._out = out
        self._pack = msgpack.Packer().pack
        self.gathers = any(store.sst_dir is not None for store in job.stores)

    def chunk(self, partition: int, next_offset: int, chunk: _Chunk) -> None:
        made: list[StoreChanges] = []
        for store, applied, changes in zip(self._job.stores, chunk.applied, chunk.changes, strict=True):
            if store.sst_dir is not None and changes:
                path = os.path.join(store.sst_dir, f"{self._job.topic}-{partition}-{next_offset}.sst")
                latest = dict(changes)  # the last change of each key
                write_partition_sst(sorted(latest.items()), path)
                made.append((applied, [], path))
            else:
                made.append((applied, changes, None))
        self._send([partition, next_offset, chunk.read, made, []])

    def failed(self, partition: int, next_offset: int, records: list[Any]) -> None:
        raw = [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers) for r in records]
        self._send([partition, next_offset, len(records), None, raw])

    def _send(self, message: list[Any]) -> None:
        payload = self._pack(message)
        self._out.write(_LENGTH.pack(len(payload)))
        self._out.write(payload)


async def _read(job: ReaderJob, out: IO[bytes]) -> None:
    """The reader's side: read the job's partitions until their end offsets, sending what they make:
    each batch, or, when a store gathers SST files, a message per `job.sst_records` records."""
    makers = [ChangeMaker.configured(store.key_serde, store.value_serde, store.updater) for store in job.stores]
    sender = _Sender(job, out)
    ends = {TopicPartition(job.topic, partition): end for partition, (_, end) in job.ranges.items()}
    chunks = {tp: _Chunk(len(job.stores)) for tp in ends}
    consumer = AIOKafkaConsumer(**job.consumer, **client_security(job.security))
    await consumer.start()
    try:
        consumer.assign(list(ends))
        for tp in ends:
            consumer.seek(tp, job.ranges[tp.partition][0])
        while ends:
            batches = await consumer.getmany(*ends, timeout_ms=POLL_MS, max_records=BATCH_RECORDS)
            for tp, end in list(ends.items()):
                records = batches.get(tp, [])
                next_offset = await consumer.position(tp)
                chunk = chunks[tp]
                if records:
                    made = _made(makers, job.stores, tp, records)
                    if made is None:  # the worker applies this batch itself, after what came before it
                        if chunk.read:
                            sender.chunk(tp.partition, records[0].offset, chunk)
                        chunk = chunks[tp] = _Chunk(len(job.stores))
                        sender.failed(tp.partition, next_offset, records)
                    else:
                        chunk.add(made, len(records))
                if next_offset >= end or (chunk.read and (not sender.gathers or chunk.read >= job.sst_records)):
                    sender.chunk(tp.partition, next_offset, chunk)
                    chunks[tp] = _Chunk(len(job.stores))
                if next_offset >= end:
                    consumer.pause(tp)
                    del ends[tp]
        out.flush()
    finally:
        await consumer.stop()


def _made(
    makers: list[ChangeMaker], stores: list[StoreSettings], tp: TopicPartition, records: list[Any]
) -> list[tuple[int, list[Change]]] | None:
    """Each store's (records applied, changes) of a batch, or None when a record failed."""
    made: list[tuple[int, list[Change]]] = []
    for maker, store in zip(makers, stores, strict=True):
        start = store.starts.get(tp.partition)
        taken = (
            records
            if start is None or not records or records[0].offset >= start
            else [raw for raw in records if raw.offset >= start]
        )
        changes, failed = maker.changes(tp.topic, tp.partition, taken)
        if failed:
            return None
        made.append((len(taken), changes))
    return made


def take_records_as_fetched() -> None:
    """aiokafka wraps each record of a fetched batch in a ConsumerRecord, a dataclass of 11 fields built
    in Python: about half of its cost per record. A reader needs only the fields of the record as
    fetched (offset, timestamp, key, value, headers), so it takes that record. This changes aiokafka
    for the whole process: for reader processes only. (Were the method gone from aiokafka, the reader
    would get ConsumerRecords, which have those fields too.)"""
    replace_consumer_record(_as_fetched)


def _as_fetched(partition_records: Any, tp: TopicPartition, record: Any) -> Any:
    return record


def main() -> None:
    take_records_as_fetched()
    job: ReaderJob = pickle.load(sys.stdin.buffer)
    # The batches go to the worker on the original stdout; anything printed goes to stderr instead.
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    with bulk_allocations():
        asyncio.run(_read(job, channel))
