"""A steady load: records produced at a fixed rate, in small batches, each stamped with its send time."""

from __future__ import annotations

import asyncio
import time

import msgpack
from aiokafka import AIOKafkaProducer

from bench.data import BatchProducer, make_key, make_value


class PacedProducer:
    """Produces `rate` records per second into `topic`, one batch per partition every `tick` seconds.

    Each value is `make_value(i)` plus `sent`, the wall-clock time (time.time()) its batch was built.
    The pace is kept against the clock: a late tick sends what is due, so the average rate holds.
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float, tick: float = 0.01) -> None:
        self._bootstrap = bootstrap
        self._topic = topic
        self._partitions = partitions
        self._rate = rate
        self._tick = tick
        self.sent = 0
        self.stop = asyncio.Event()
        self.stamps: list[tuple[float, int]] = []  # (sent, records) per tick

    def sent_between(self, start: float, end: float) -> int:
        """How many records were stamped with a `sent` time in [start, end)."""
        return sum(count for stamp, count in self.stamps if start <= stamp < end)

    async def run(self) -> None:
        """Produce until `stop` is set, then wait for every record to be acknowledged."""
        producer = AIOKafkaProducer(bootstrap_servers=self._bootstrap, acks="all", linger_ms=0)
        await producer.start()
        try:
            out = BatchProducer(producer, self._topic, self._partitions)
            packer = msgpack.Packer()
            started = time.monotonic()
            while not self.stop.is_set():
                due = int((time.monotonic() - started) * self._rate)
                stamp = time.time()
                for index in range(self.sent, due):
                    value = make_value(index)
                    value["sent"] = stamp
                    await out.append(make_key(index).encode(), packer.pack(value))
                if due > self.sent:
                    self.stamps.append((stamp, due - self.sent))
                    self.sent = due
                await out.send_open()
                await asyncio.sleep(self._tick)
            await out.flush()
        finally:
            await producer.stop()
