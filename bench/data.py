"""Input records: str keys and ~100-byte msgpack (or JSON) values, produced fast in per-partition batches."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaProducer

from stores.partitioner import partition_for
from stores.serdes import resolve_serde

DISTINCT_KEYS = 10_000
NOTE = "benchmark-payload"
PLAIN_BYTES = 90  # the msgpack size of an unpadded value whose id is 65,536 or more (86 to 89 bytes below)
BATCH_BYTES = 512 * 1024


def make_key(index: int, keys: int = DISTINCT_KEYS) -> str:
    """The key of record `index` when the input has `keys` distinct keys."""
    return f"user-{index % keys:06d}"


def make_value(index: int, keys: int = DISTINCT_KEYS, value_bytes: int | None = None) -> dict[str, Any]:
    """About 100 bytes once msgpack-encoded, about 115 as JSON; with `value_bytes`, `note` is padded with dots
    so that the msgpack value is about that many bytes (a few more: a longer str's header)."""
    note = NOTE if value_bytes is None else NOTE + "." * max(0, value_bytes - PLAIN_BYTES)
    return {
        "id": index,
        "user": make_key(index, keys),
        "amount": round(index * 0.37 % 1000, 2),
        "currency": "EUR",
        "ts": 1_700_000_000_000 + index,
        "note": note,
    }


class BatchProducer:
    """Appends encoded records into one open batch per partition and sends a batch when it is full."""

    def __init__(self, producer: AIOKafkaProducer, topic: str, partitions: int) -> None:
        self._producer = producer
        self._topic = topic
        self._partitions = partitions
        self._open: dict[int, Any] = {}
        self._futures: list[asyncio.Future[Any]] = []

    async def append(
        self, key: bytes, value: bytes, partition: int | None = None, timestamp: int | None = None
    ) -> None:
        """Append one record; `timestamp` (ms) None lets the producer stamp it with the time of sending."""
        target = partition_for(key, self._partitions) if partition is None else partition
        batch = self._open.get(target)
        if batch is None:
            batch = self._open[target] = self._producer.create_batch()
        if batch.append(key=key, value=value, timestamp=timestamp) is None:
            await self._send(target, batch)
            batch = self._open[target] = self._producer.create_batch()
            batch.append(key=key, value=value, timestamp=timestamp)

    async def _send(self, partition: int, batch: Any) -> None:
        self._futures.append(await self._producer.send_batch(batch, self._topic, partition=partition))

    async def send_open(self) -> None:
        """Send every open batch, without waiting for the acks."""
        for partition, batch in self._open.items():
            if batch.record_count():
                await self._send(partition, batch)
        self._open.clear()
        pending = []
        for future in self._futures:
            if future.done():
                future.result()  # raises if the batch was not delivered
            else:
                pending.append(future)
        self._futures = pending

    async def flush(self) -> None:
        """Send every open batch and wait until all sent batches are acknowledged."""
        await self.send_open()
        futures, self._futures = self._futures, []
        await asyncio.gather(*futures)


async def fill_topic(
    bootstrap: str,
    topic: str,
    records: int,
    partitions: int,
    keys: int = DISTINCT_KEYS,
    value_serde: str = "msgpack",
    timestamp: Callable[[int], int] | None = None,
    value_bytes: int | None = None,
) -> float:
    """Produce `records` records over `keys` distinct keys (record i has key i mod `keys`) into `topic`,
    values encoded by the runtime's `value_serde`, as an app's output would be; record i's timestamp is
    `timestamp(i)` (ms), or the time of sending without it; `value_bytes` pads the values (`make_value`).

    Returns the records per second achieved.
    """
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", max_batch_size=BATCH_BYTES, max_request_size=4 * BATCH_BYTES
    )
    await producer.start()
    started = time.perf_counter()
    try:
        encode = resolve_serde(value_serde).serialize
        encoded = [make_key(i, keys).encode() for i in range(min(keys, records))]
        targets = [partition_for(key, partitions) for key in encoded]
        out = BatchProducer(producer, topic, partitions)
        for index in range(records):
            slot = index % keys
            stamp = timestamp(index) if timestamp is not None else None
            await out.append(encoded[slot], encode(make_value(index, keys, value_bytes)), targets[slot], stamp)
            if index % 100_000 == 99_999:
                await out.flush()
        await out.flush()
    finally:
        await producer.stop()
    return records / (time.perf_counter() - started)
