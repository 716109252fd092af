"""The output topic as a `read_committed` reader sees it: how much of it is visible over time, sampled while a
peer runs, and every record of it read back afterwards for the check."""

from __future__ import annotations

import asyncio
import threading
import time
from types import TracebackType

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from bench.broker import partitions_of
from bench.peers.workloads import OutputCheck

SAMPLE_EVERY = 0.05  # seconds
READ_IDLE_LIMIT = 5.0  # seconds without a record before reading back gives up on the rest
SETTLE_LIMIT = 60.0  # seconds after a peer's exit for its last transaction's markers to be written


class VisibleOutputs:
    """A thread that asks the broker every `SAMPLE_EVERY` s for the output partitions' last stable offsets
    (a ListOffsets request each, the end offsets under `read_committed`) and keeps their sum over time.

    Under exactly-once the sum also counts the transactions' commit markers, so the count of records is
    read back afterwards (`read_back`); the samples give when the last of them became visible. Leaving
    the `with` block, the samples go on until everything written is visible.
    """

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._bootstrap = bootstrap
        self._topic = topic
        self._done = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._sample()), name="visible outputs")
        self.samples: list[tuple[float, int]] = []  # (time.perf_counter(), visible offsets in all partitions)
        self.error: BaseException | None = None

    def __enter__(self) -> VisibleOutputs:
        """Start sampling; return once the first sample is in, so that the peer starts on a quiet machine."""
        self._thread.start()
        self._ready.wait()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._done.set()
        self._thread.join()

    async def _sample(self) -> None:
        committed = AIOKafkaConsumer(bootstrap_servers=self._bootstrap, isolation_level="read_committed")
        written = AIOKafkaConsumer(bootstrap_servers=self._bootstrap)
        await asyncio.gather(committed.start(), written.start())
        try:
            partitions = [TopicPartition(self._topic, p) for p in await partitions_of(self._bootstrap, self._topic)]
            while not self._done.is_set():
                await self._take(committed, partitions)
                self._ready.set()
                await asyncio.sleep(SAMPLE_EVERY)
            # The peer exited. A transaction's commit markers reach the partitions after the commit returned,
            # so sampling goes on until every record written is visible (or a hanging transaction times out).
            deadline = time.monotonic() + SETTLE_LIMIT
            while await self._take(committed, partitions) < sum((await written.end_offsets(partitions)).values()):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"records of {self._topic} still not visible {SETTLE_LIMIT:.0f}s after exit")
                await asyncio.sleep(SAMPLE_EVERY)
        except Exception as error:  # reported with the run: without samples it has no visible time
            self.error = error
        finally:
            self._ready.set()
            await asyncio.gather(committed.stop(), written.stop())

    async def _take(self, consumer: AIOKafkaConsumer, partitions: list[TopicPartition]) -> int:
        visible = int(sum((await consumer.end_offsets(partitions)).values()))
        self.samples.append((time.perf_counter(), visible))
        return visible

    def first_at_least(self, offsets: float) -> float | None:
        """When the visible offsets first reached `offsets` (a perf_counter time), None if never."""
        return next((when for when, seen in self.samples if seen >= offsets and seen > 0), None)

    @property
    def final(self) -> int:
        return self.samples[-1][1] if self.samples else 0


async def read_back(bootstrap: str, topic: str, check: OutputCheck) -> int:
    """Hand every committed record of `topic` to `check` (key as str, value decoded from JSON); how many."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False)
    await consumer.start()
    read = 0
    try:
        partitions = [TopicPartition(topic, p) for p in await partitions_of(bootstrap, topic)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        idle_since = time.monotonic()
        while await unread(consumer, ends):
            batches = await consumer.getmany(timeout_ms=500, max_records=10_000)
            if not batches:
                if time.monotonic() - idle_since > READ_IDLE_LIMIT:
                    break
                continue
            idle_since = time.monotonic()
            for records in batches.values():
                for record in records:
                    check.add(record.key.decode(), orjson.loads(record.value))
                read += len(records)
    finally:
        await consumer.stop()
    return read


async def unread(consumer: AIOKafkaConsumer, ends: dict[TopicPartition, int]) -> bool:
    """Whether some partition's position is short of its end offset."""
    for partition, end in ends.items():
        if await consumer.position(partition) < end:
            return True
    return False
