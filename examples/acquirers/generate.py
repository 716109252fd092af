"""Test data for the acquirers example: rows of the table terminal_acquirer and payments at its terminals.

Everything is drawn from one `random.Random`, so a seed reproduces a run. Terminal and payment ids
are random too, so a new seed gives new ones: earlier runs' rows and payments in the same broker do
not change what this run expects.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from aiokafka import AIOKafkaProducer

from examples.acquirers.terminals import table_row
from stores.partitioner import partition_for

ACQUIRERS = ("ACQ-NORTH", "ACQ-SOUTH", "ACQ-EAST")  # ACQ-EAST has no route in app.yaml: its payments stay unrouted
CURRENCIES = ("RUB",) * 8 + ("USD", "EUR")
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: row times are fixed by the seed, not the clock
BATCH_BYTES = 512 * 1024


@dataclass(frozen=True, slots=True)
class Terminal:
    """One row of terminal_acquirer."""

    row_id: int
    terminal_id: str
    acquirer_id: str
    active: bool
    updated_ms: int

    def row(self) -> tuple[bytes, bytes]:
        return table_row(self.row_id, self.terminal_id, self.acquirer_id, self.active, self.updated_ms)


@dataclass(frozen=True, slots=True)
class Payment:
    payment_id: str
    terminal_id: str
    value: bytes

    @property
    def key(self) -> bytes:
        return self.payment_id.encode()


def make_terminals(count: int, rng: random.Random) -> list[Terminal]:
    """`count` active terminals with distinct ids, each at one of `ACQUIRERS`."""
    ids = rng.sample(range(10**9), count)
    return [
        Terminal(row, f"T{number:09d}", rng.choice(ACQUIRERS), True, START_MS + row) for row, number in enumerate(ids)
    ]


def change_terminals(terminals: list[Terminal], share: float, rng: random.Random) -> list[Terminal]:
    """New rows for a `share` of `terminals`: half move to another acquirer, half are deactivated."""
    changed = rng.sample(terminals, round(len(terminals) * share))
    later = START_MS + len(terminals) + 86_400_000
    rows = []
    for index, terminal in enumerate(changed):
        if index % 2 == 0:
            other = rng.choice([a for a in ACQUIRERS if a != terminal.acquirer_id])
            rows.append(replace(terminal, acquirer_id=other, updated_ms=later + index))
        else:
            rows.append(replace(terminal, active=False, updated_ms=later + index))
    return rows


def table(terminals: Iterable[Terminal]) -> dict[str, str | None]:
    """Terminal id -> acquirer id of the last row of each terminal; `None`: deactivated."""
    return {t.terminal_id: t.acquirer_id if t.active else None for t in terminals}


def make_payments(count: int, terminals: list[Terminal], unknown_ratio: float, rng: random.Random) -> list[Payment]:
    """`count` payments, each at one of `terminals`, or with `unknown_ratio` at a terminal no row names."""
    payments = []
    for _ in range(count):
        payment_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        if rng.random() < unknown_ratio:
            terminal_id = f"U{rng.randrange(10**9):09d}"  # table terminals start with T
        else:
            terminal_id = rng.choice(terminals).terminal_id
        value = {"payment_id": payment_id, "terminal_id": terminal_id,
                 "amount_minor": rng.randrange(100, 500_000), "currency": rng.choice(CURRENCIES)}  # fmt: skip
        payments.append(Payment(payment_id, terminal_id, json.dumps(value).encode()))
    return payments


async def produce(bootstrap: str, topic: str, records: Iterable[tuple[bytes, bytes]]) -> int:
    """Produce keyed records in full batches per partition (the default partitioner's choice); returns the count."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_batch_size=BATCH_BYTES, acks="all")
    await producer.start()
    try:
        partitions = len(await producer.partitions_for(topic))
        builders = [producer.create_batch() for _ in range(partitions)]
        deliveries: list[asyncio.Future[Any]] = []
        count = 0
        for key, value in records:
            partition = partition_for(key, partitions)
            if builders[partition].append(key=key, value=value, timestamp=None) is None:
                deliveries.append(await producer.send_batch(builders[partition], topic, partition=partition))
                builders[partition] = producer.create_batch()
                builders[partition].append(key=key, value=value, timestamp=None)
            count += 1
        for partition, builder in enumerate(builders):
            if builder.record_count():
                deliveries.append(await producer.send_batch(builder, topic, partition=partition))
        await asyncio.gather(*deliveries)
        return count
    finally:
        await producer.stop()
