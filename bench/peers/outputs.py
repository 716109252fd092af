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


class VisibleOutputs:
    """A thread that asks the broker every `SAMPLE_EVERY` s for the output partitions' last stable offsets
    (a ListOffsets request each, the end offsets under `read_committed`) and keeps their sum over time.

    Under exactly-once the sum also counts the transactions' commit markers, so the count of records is
    read back afterwards (`read_back`); the samples give when the last of them became visible.
    """

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._bootstrap = bootstrap
        self._topic = topic
        self._done = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._sample()), name="visible outputs")
        self.samples: list[tuple[float, int]] = []  # (time.perf_counter(), visible offsets in all partitions)
        self.error: BaseException | None = None

    def __enter__(self) -> VisibleOutputs:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._done.set()
        self._thread.join()

    async def _sample(self) -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=self._bootstrap, isolation_level="read_committed")
        await consumer.start()
        try:
            partitions = [TopicPartition(self._topic, p) for p in await partitions_of(self._bootstrap, self._topic)]
            while True:
                stopping = self._done.is_set()  # one more sample after the peer exited: the final count
                offsets = await consumer.end_offsets(partitions)
                self.samples.append((time.perf_counter(), sum(offsets.values())))
                if stopping:
                    return
                await asyncio.sleep(SAMPLE_EVERY)
        except Exception as error:  # reported with the run: without samples it has no visible time
            self.error = error
        finally:
            await consumer.stop()

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
