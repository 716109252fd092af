"""The output path: records are appended to one Kafka record batch per target partition and sent whole.

Per-record `send()` costs ~15x more than `create_batch()` + `send_batch()` in aiokafka, so every
record the runtime writes (outputs, dead letters, changelogs) goes through here.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from aiokafka import AIOKafkaProducer

from runtime.counters import Counters
from runtime.telemetry.trace_headers import TRACEPARENT, TRACEPARENT_CLASS
from stores.partitioner import partition_for

HeaderList = Sequence[tuple[str, bytes]]
Headers = HeaderList | bytes
"""A record's headers; bytes are a `traceparent` value, its only header (a traced record's output)."""
_NO_HEADERS: list[tuple[str, bytes]] = []  # shared: the batch builder only reads it


class UnknownTopicError(LookupError):
    pass


class Outputs:
    """Batches per (topic, partition); `flush` hands them to the producer, `wait_acked` awaits the acks."""

    def __init__(self, producer: AIOKafkaProducer, partition_counts: dict[str, int], counters: Counters):
        self.producer = producer
        self.sent = 0
        self._partition_counts = partition_counts
        self._counters = counters
        self._open: dict[tuple[str, int], Any] = {}
        self._open_counts: dict[tuple[str, int], int] = {}
        self._full: list[tuple[str, int, Any, int]] = []
        self._inflight: list[asyncio.Future[Any]] = []
        self._round_robin = itertools.count()
        self._traceparent: list[tuple[str, bytes]] = [(TRACEPARENT, b"")]
        self.acked_ends: dict[tuple[str, int], int] = {}

    def partitions(self, topic: str) -> int:
        try:
            return self._partition_counts[topic]
        except KeyError:
            raise UnknownTopicError(f"topic '{topic}' is not an output of this app") from None

    def append(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers = (),
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        if partition is None:
            count = self.partitions(topic)
            partition = partition_for(key, count) if key is not None else next(self._round_robin) % count
        target = (topic, partition)
        # aiokafka's batch builder takes lists only, and only reads them (it encodes them right away),
        # so a traceparent goes in a list kept for it.
        kind = headers.__class__
        header_list: Any
        if kind is TRACEPARENT_CLASS:
            header_list = self._traceparent
            header_list[0] = (TRACEPARENT, headers)
        else:
            header_list = _NO_HEADERS if not headers else headers if kind is list else list(headers)
        builder = self._open.get(target)
        if builder is not None and builder.append(timestamp=timestamp_ms, key=key, value=value,
                                                  headers=header_list) is not None:  # fmt: skip
            self._open_counts[target] += 1  # the common case: the open batch has room
            return
        if builder is not None:  # full: it goes out with the next flush
            self._full.append((topic, partition, builder, self._open_counts[target]))
        builder = self._open[target] = self.producer.create_batch()
        builder.append(timestamp=timestamp_ms, key=key, value=value, headers=header_list)
        self._open_counts[target] = 1

    def append_all(self, records: Iterable[tuple[str, bytes | None, bytes | None, Headers]]) -> None:
        """Append (topic, key, value, headers) records, each to its partition by Kafka's partitioner."""
        append, counts = self.append, self._partition_counts
        for topic, key, value, headers in records:
            if key is None:
                append(topic, key, value, headers)
            else:
                append(topic, key, value, headers, partition_for(key, counts[topic]))

    @property
    def pending(self) -> int:
        """Records appended but not yet handed to the producer."""
        return sum(self._open_counts.values()) + sum(count for *_, count in self._full)

    async def flush(self) -> None:
        """Hand every batch to the producer (returns once they are queued, not acknowledged)."""
        batches = self._full
        batches.extend((topic, partition, builder, self._open_counts[(topic, partition)])
                       for (topic, partition), builder in self._open.items())  # fmt: skip
        self._full, self._open, self._open_counts = [], {}, {}
        for topic, partition, builder, count in batches:
            future = await self.producer.send_batch(builder, topic, partition=partition)
            future.add_done_callback(functools.partial(self._acked, topic, partition, count))
            self._inflight.append(future)
            self._counters.produced += count
            self.sent += count
        self._inflight = [future for future in self._inflight if not future.done() or _raise_if_failed(future)]

    def discard(self) -> None:
        """Drop batches not yet handed to the producer (their transaction aborted)."""
        self._full, self._open, self._open_counts = [], {}, {}

    def _acked(self, topic: str, partition: int, count: int, future: asyncio.Future[Any]) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        end = future.result().offset + count
        target = (topic, partition)
        if end > self.acked_ends.get(target, 0):
            self.acked_ends[target] = end

    async def wait_acked(self) -> None:
        """Flush, then wait until the broker acknowledged everything sent so far; raise if any failed."""
        await self.flush()
        inflight, self._inflight = self._inflight, []
        if inflight:
            await asyncio.gather(*inflight)


def _raise_if_failed(future: asyncio.Future[Any]) -> bool:
    future.result()
    return False
