"""A CDC connector's output, as seed 001 describes it: the rows each database transaction changed go to a
`data` topic of several partitions (keyed by table and primary key), and then one record per
transaction, once it committed, to a `transaction` topic of one partition.

Transactions change 1 to 50 rows each (of a few tables, with `before` and `after` images of about the
size a CDC row has), and their ids (the commit's LSN) grow. Everything is sent in the connector's order:
a transaction's rows, then its record.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

TABLES = ("accounts", "payments", "ledger_entries", "customers")
FIRST_LSN = 22_000_000


@dataclass(frozen=True)
class Transaction:
    id: int  # the commit's LSN
    rows: list[tuple[str, dict[str, Any]]]  # (key, value) of each row, in the order it changed

    def record(self) -> dict[str, Any]:
        """Its record on the transaction topic."""
        return {"id": self.id, "status": "END", "event_count": len(self.rows), "ts_ms": 1767225600000 + self.id}


def row(rng: random.Random, transaction: int, number: int) -> tuple[str, dict[str, Any]]:
    table = rng.choice(TABLES)
    key = f"{table}:{rng.randrange(100_000)}"
    amount, version = rng.randrange(1, 1_000_000) / 100, rng.randrange(1, 50)
    image = {
        "id": key.split(":")[1],
        "owner": f"customer-{rng.randrange(10_000):05d}",
        "amount": amount,
        "currency": rng.choice(("EUR", "SEK", "USD")),
        "note": "x" * rng.randrange(20, 120),
        "version": version,
    }
    after = {**image, "version": version + 1, "amount": amount + 1}
    value = {"tx": transaction, "number": number, "table": table, "op": "u", "before": image, "after": after}
    return key, value


def transactions(count: int, seed: int = 1, max_rows: int = 50, after: int = FIRST_LSN) -> Iterator[Transaction]:
    """`count` transactions whose ids come after `after`."""
    rng = random.Random(seed)
    lsn = after
    for _ in range(count):
        lsn += rng.randrange(1, 400)
        yield Transaction(lsn, [row(rng, lsn, n) for n in range(rng.randint(1, max_rows))])


async def produce(bootstrap: str, data_topic: str, transaction_topic: str, changes: list[Transaction]) -> None:
    """As the connector sends them: each transaction's rows, then its record (keyed by its id)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=512 * 1024)
    await producer.start()
    try:
        sent = []
        for transaction in changes:
            for key, value in transaction.rows:
                sent.append(await producer.send(data_topic, orjson.dumps(value), key=key.encode()))
            record = orjson.dumps(transaction.record())
            sent.append(await producer.send(transaction_topic, record, key=str(transaction.id).encode()))
            if len(sent) > 50_000:
                for future in sent:
                    await future
                sent.clear()
        for future in sent:
            await future
    finally:
        await producer.stop()


def joined(changes: list[Transaction]) -> list[tuple[str, dict[str, Any]]]:
    """Every row joined with its transaction's record, as the merge join sends it (key, value)."""
    return [(key, {"data": value, "transaction": t.record()}) for t in changes for key, value in t.rows]
