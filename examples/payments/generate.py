"""Payments test data: `python -m examples.payments.generate --bootstrap HOST:PORT --count N`.

With `--delayed-share`, `--max-delay-s`, `--late-share` and `--late-delay-s` some payments arrive
after later ones (examples/disorder.py); `--key account` keys them by account, as windows per
account need (examples/minute_totals/).

With `--opening-totals PATH` it writes instead, as Parquet, the totals the accounts of those payments
held before (a bulk source to bootstrap the totals store from, see snapshot_demo.py).

Values are msgpack maps, keys the UTF-8 payment id (or account). The same seed gives the same
payments, so a run can be reproduced; a share of them is invalid on purpose (see `INVALID_KINDS`),
and an optional share is poison (not a map, or not msgpack at all) to exercise the error policy.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import msgpack
from aiokafka import AIOKafkaProducer

from examples.disorder import Disorder, add_disorder_options, disorder_of, in_arrival_order
from examples.payments.processors import DEFAULT_MAX_AMOUNT_MINOR
from stores.partitioner import partition_for

VALID: Final = "valid"
INVALID: Final = "invalid"
POISON: Final = "poison"
INVALID_KINDS: Final = ("zero_amount", "negative_amount", "over_limit", "unknown_currency", "missing_field")

START_MS: Final = 1_767_225_600_000  # 2026-01-01T00:00:00Z: created_at is fixed by the seed, not the clock
CURRENCIES: Final = ("RUB",) * 17 + ("USD",) * 2 + ("EUR",)  # 85% / 10% / 5%: choice() is cheap
BATCH_BYTES: Final = 512 * 1024


@dataclass(frozen=True, slots=True)
class Payment:
    key: bytes
    value: bytes
    kind: str  # VALID, INVALID or POISON


def make_payments(
    count: int,
    invalid_ratio: float = 0.05,
    seed: int = 1,
    poison_ratio: float = 0.0,
    *,
    start_ms: int = START_MS,
    disorder: Disorder | None = None,
    key_field: str = "payment_id",
) -> Iterator[Payment]:
    """`count` encoded payments; each is invalid with `invalid_ratio`, poison with `poison_ratio`.

    They are created from `start_ms` on, up to 49 ms apart, and produced in that order, or with
    `disorder` in the order they arrive (its draws do not change the payments of a seed). Each is keyed
    by its `key_field`: `account` puts all payments of an account in one partition, as windows per
    account need.
    """
    payments = _payments(count, invalid_ratio, seed, poison_ratio, start_ms, key_field)
    if disorder is None:
        return (payment for _, payment in payments)
    return in_arrival_order(payments, disorder, random.Random(f"disorder-{seed}"))


def _payments(
    count: int, invalid_ratio: float, seed: int, poison_ratio: float, start_ms: int, key_field: str
) -> Iterator[tuple[int, Payment]]:
    """(created_at, payment) in the order of creation."""
    rng = random.Random(seed)
    accounts = _accounts(rng, count)
    terminals = [f"T{rng.randrange(10**7):07d}" for _ in range(max(1, count // 200))]
    created_at = start_ms
    for _ in range(count):
        payment_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        created_at += rng.randrange(50)
        payment: dict[str, Any] = {
            "payment_id": payment_id,
            "terminal_id": rng.choice(terminals),
            "account": rng.choice(accounts),
            # Mostly small amounts, a long tail up to a tenth of the limit.
            "amount_minor": min(int(rng.lognormvariate(8.5, 1.5)) + 1, DEFAULT_MAX_AMOUNT_MINOR // 10),
            "currency": rng.choice(CURRENCIES),
            "created_at": created_at,
        }
        key = str(payment[key_field]).encode()
        draw = rng.random()
        if draw < poison_ratio:
            # Half decode to something that is not a map, half do not decode at all.
            value = msgpack.packb([payment_id]) if rng.random() < 0.5 else b"\xc1not msgpack"
            yield created_at, Payment(key, value, POISON)
            continue
        kind = VALID
        if draw < poison_ratio + invalid_ratio:
            kind = INVALID
            _spoil(payment, rng)
        yield created_at, Payment(key, msgpack.packb(payment), kind)


def _accounts(rng: random.Random, count: int) -> list[str]:
    """The accounts `count` payments of a seed go to: drawn first, so other data can share them."""
    return [f"40817810{rng.randrange(10**12):012d}" for _ in range(max(1, count // 20))]


def opening_totals(count: int, seed: int = 1) -> Iterator[tuple[str, int, dict[str, int], int]]:
    """(account, count, totals per currency, offset) for the accounts of `make_payments(count, seed=seed)`:
    what a bank's books held before the app ran, for bootstrapping its store. Offset -1: no payment
    of `payments-valid` is counted in it yet."""
    balances = random.Random(f"opening-{seed}")
    for account in _accounts(random.Random(seed), count):
        payments = balances.randrange(1, 500)
        yield account, payments, {"RUB": payments * balances.randrange(100, 100_000)}, -1


def write_opening_totals(path: str, count: int, seed: int = 1) -> int:
    """Writes `opening_totals` as Parquet (with PySpark, from the `spark` extra); returns the row count."""
    from stores.spark.session import spark_session

    rows = list(opening_totals(count, seed))
    spark = spark_session("payments opening totals", "local[2]")
    try:
        schema = "account string, count long, totals map<string, long>, offset long"
        spark.createDataFrame(rows, schema).coalesce(1).write.mode("overwrite").parquet(path)
    finally:
        spark.stop()
    return len(rows)


def _spoil(payment: dict[str, Any], rng: random.Random) -> None:
    match rng.choice(INVALID_KINDS):
        case "zero_amount":
            payment["amount_minor"] = 0
        case "negative_amount":
            payment["amount_minor"] = -payment["amount_minor"]
        case "over_limit":
            payment["amount_minor"] = DEFAULT_MAX_AMOUNT_MINOR + 1 + rng.randrange(DEFAULT_MAX_AMOUNT_MINOR)
        case "unknown_currency":
            payment["currency"] = rng.choice(["GBP", "XXX", "rub", ""])
        case _:
            del payment[rng.choice(["terminal_id", "account", "currency"])]


async def produce_payments(bootstrap: str, topic: str, payments: Iterator[Payment]) -> dict[str, int]:
    """Produce `payments` in full batches per partition: far faster than one send() per record."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_batch_size=BATCH_BYTES, acks="all")
    await producer.start()
    try:
        partitions = len(await producer.partitions_for(topic))
        builders = [producer.create_batch() for _ in range(partitions)]
        deliveries: list[asyncio.Future[Any]] = []
        counts = {VALID: 0, INVALID: 0, POISON: 0}
        for payment in payments:
            partition = partition_for(payment.key, partitions)
            if builders[partition].append(key=payment.key, value=payment.value, timestamp=None) is None:
                # Full: ship it (this waits only while the partition's previous batch is unsent).
                deliveries.append(await producer.send_batch(builders[partition], topic, partition=partition))
                builders[partition] = producer.create_batch()
                builders[partition].append(key=payment.key, value=payment.value, timestamp=None)
            counts[payment.kind] += 1
        for partition, builder in enumerate(builders):
            if builder.record_count():
                deliveries.append(await producer.send_batch(builder, topic, partition=partition))
        await asyncio.gather(*deliveries)
        return counts
    finally:
        await producer.stop()


async def generate_payments(
    bootstrap: str,
    topic: str,
    count: int,
    invalid_ratio: float = 0.05,
    seed: int = 1,
    *,
    poison_ratio: float = 0.0,
    disorder: Disorder | None = None,
    key_field: str = "payment_id",
) -> dict[str, int]:
    """Produce `count` payments to an existing `topic`; returns how many were valid, invalid (and poison)."""
    payments = make_payments(count, invalid_ratio, seed, poison_ratio, disorder=disorder, key_field=key_field)
    return await produce_payments(bootstrap, topic, payments)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.payments.generate", description="Produce test payments.")
    parser.add_argument("--bootstrap", help="HOST:PORT of a Kafka broker")
    parser.add_argument("--topic", default="payments", help="an existing topic (default: payments)")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--invalid-ratio", type=float, default=0.05)
    parser.add_argument("--poison-ratio", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--key", choices=["payment_id", "account"], default="payment_id", help="the record key")
    add_disorder_options(parser, delayed_share=0.0, max_delay_s=0.0, late=(0.0, 0.0))
    parser.add_argument(
        "--opening-totals", metavar="PATH", help="instead: write the accounts' opening totals as Parquet to PATH"
    )
    args = parser.parse_args(argv)
    if args.opening_totals:
        rows = write_opening_totals(args.opening_totals, args.count, args.seed)
        print(f"wrote the opening totals of {rows} accounts to {args.opening_totals}")
        return 0
    if not args.bootstrap:
        parser.error("--bootstrap is required to produce payments")
    if args.count < 0 or not 0 <= args.invalid_ratio + args.poison_ratio <= 1:
        parser.error("--count must be >= 0 and the ratios must add up to at most 1")
    disorder = disorder_of(parser, args)
    counts = asyncio.run(
        generate_payments(
            args.bootstrap,
            args.topic,
            args.count,
            args.invalid_ratio,
            args.seed,
            poison_ratio=args.poison_ratio,
            disorder=disorder,
            key_field=args.key,
        )
    )
    print(", ".join(f"{kind} {n}" for kind, n in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
