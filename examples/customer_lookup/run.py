"""Orders enriched with their customer from PostgreSQL, up to 200 lookups in flight per task:
`python -m examples.customer_lookup.run` (`make example-lookup`).

Starts (or reuses) a local Kafka broker and a local PostgreSQL, writes the `customers` table anew, and
produces orders keyed by customer id, one in a hundred of a customer the table lacks. Runs the app as a
user would, `python -m runtime examples/customer_lookup/app.yaml --until-caught-up`, then reads its
outputs back and checks that every order came out once, with its own customer's row (or unchanged on the
unknown customers' topic), and each customer's orders in the order they went in: the lookups overlap,
but not those of one customer.

The topics and the app's committed offsets stay from one run to the next: each run's orders carry a tag
of their own, and only those are checked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import asyncpg
import orjson
from aiokafka import AIOKafkaProducer, TopicPartition

from examples.acquirers.run import run_app
from examples.broker import database
from examples.customer_lookup.lookup import UNKNOWN, CustomerLookupParams
from examples.demo_cli import run_plain_demo
from examples.payments.run import ROOT, Offsets, end_offsets, ensure_topics, scan
from runtime.config import load_app

APP_YAML = Path("examples/customer_lookup/app.yaml")  # relative to ROOT, as a user would type it
TIERS = ("basic", "silver", "gold")
COUNTRIES = ("DE", "FR", "NL", "PL", "SE", "ES", "IT")
UNKNOWN_SHARE = 0.01
UNKNOWN_COUNTED = re.compile(rf"'{UNKNOWN}': (\d+)")  # the processor's counter, in the worker's last log line
SCHEMA = """
CREATE TABLE IF NOT EXISTS customers (
    id bigint PRIMARY KEY, name text NOT NULL, tier text NOT NULL, country text NOT NULL)
"""

Customer = dict[str, Any]  # {"id", "name", "tier", "country"}: the row, as the app sends it
Order = tuple[int, dict[str, Any]]  # (customer id, value)


def make_customers(count: int, seed: int) -> dict[int, Customer]:
    rng = random.Random(seed)
    return {number: {"id": number, "name": f"Customer {number}", "tier": rng.choice(TIERS),
                     "country": rng.choice(COUNTRIES)}
            for number in range(1, count + 1)}  # fmt: skip


def make_orders(count: int, customers: int, tag: str, seed: int) -> list[Order]:
    """Orders of customers 1 to `customers`, and some of customers above them, whom the table lacks."""
    rng = random.Random(seed + 1)
    orders = []
    for n in range(count):
        unknown = rng.random() < UNKNOWN_SHARE
        customer = rng.randint(customers + 1, 2 * customers) if unknown else rng.randint(1, customers)
        orders.append((customer, {"order": f"{tag}-{n:06d}", "customer": customer,
                                  "amount_minor": rng.randrange(100, 100_000)}))  # fmt: skip
    return orders


async def write_customers(url: str, customers: dict[int, Customer]) -> None:
    """The table holds exactly `customers` afterwards."""
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(SCHEMA)
        async with connection.transaction():
            await connection.execute("TRUNCATE customers")
            await connection.copy_records_to_table(
                "customers",
                records=[(c["id"], c["name"], c["tier"], c["country"]) for c in customers.values()],
                columns=["id", "name", "tier", "country"],
            )
    finally:
        await connection.close()


async def produce(bootstrap: str, topic: str, orders: list[Order]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    await producer.start()
    try:
        for customer, value in orders:
            await producer.send(topic, orjson.dumps(value), key=str(customer).encode())
        await producer.flush()
    finally:
        await producer.stop()


def read_back(bootstrap: str, topic: str, partitions: int, start: Offsets, tag: str) -> dict[int, list[dict[str, Any]]]:
    """This run's orders in `topic` from `start`, by customer (the key), each customer's in offset order."""
    by_customer: dict[int, list[dict[str, Any]]] = defaultdict(list)

    def visit(key: bytes | None, value: bytes) -> None:
        order = json.loads(value)
        if str(order["order"]).startswith(f"{tag}-"):
            by_customer[int(key or b"-1")].append(order)

    tps = [TopicPartition(topic, partition) for partition in range(partitions)]
    asyncio.run(scan(bootstrap, tps, start, visit))
    return by_customer


def check(
    sent: dict[int, list[dict[str, Any]]],
    enriched: dict[int, list[dict[str, Any]]],
    unknown: dict[int, list[dict[str, Any]]],
    customers: dict[int, Customer],
) -> list[str]:
    """What differs from every order out once, on its topic, with its customer, in its customer's order."""
    problems = []
    out = Counter(order["order"] for orders in (*enriched.values(), *unknown.values()) for order in orders)
    if twice := sorted(order for order, times in out.items() if times > 1):
        problems.append(f"{len(twice):,} orders came out more than once, e.g. {twice[0]}")
    if missing := sorted({order["order"] for orders in sent.values() for order in orders} - set(out)):
        problems.append(f"{len(missing):,} orders did not come out, e.g. {missing[0]}")
    misplaced = sorted({*(c for c in enriched if c not in customers), *(c for c in unknown if c in customers)})
    if misplaced:
        problems.append(f"{len(misplaced):,} customers' orders came out on the wrong topic, e.g. {misplaced[0]}")
    wrong = [order for number, orders in enriched.items() if number in customers for order in orders
             if order["customer"] != customers[number]]  # fmt: skip
    if wrong:
        problems.append(f"{len(wrong):,} orders with another customer than their own, e.g. {wrong[0]}")
    reordered = {}  # customer -> (the order ids as they went in, as they came out)
    for number, orders in sent.items():
        went_in = [order["order"] for order in orders]
        came_out = [order["order"] for output in (enriched, unknown) for order in output.get(number, [])]
        if came_out != went_in and sorted(came_out) == sorted(went_in):
            reordered[number] = (went_in, came_out)
    if reordered:
        number = min(reordered)
        problems.append(f"{len(reordered):,} customers' orders came out in another order than they went in, e.g. "
                        f"customer {number}: {reordered[number][1]} for {reordered[number][0]}")  # fmt: skip
    return problems


def demo(app_yaml: Path, bootstrap: str, customers: int, orders: int, seed: int, timeout_s: float) -> list[str]:
    """One run: the table and the orders written, the app run, its outputs checked; what went wrong (nothing,
    when all is well)."""
    with database() as url:  # before the YAML is loaded: its dsn is ${DATABASE_URL}
        config = load_app(ROOT / app_yaml)
        [processor] = config.processors
        params = CustomerLookupParams.model_validate(processor.params)
        source = processor.inputs[0]
        partitions = asyncio.run(ensure_topics(bootstrap, config))
        topics = (source, params.output, params.unknown)
        before = asyncio.run(end_offsets(bootstrap, {topic: partitions[topic] for topic in topics}))
        table = make_customers(customers, seed)
        print(f"writing {customers:,} customers to PostgreSQL and {orders:,} orders to Kafka (seed {seed})")
        asyncio.run(write_customers(url, table))
        tag = uuid.uuid4().hex[:8]
        asyncio.run(produce(bootstrap, source, make_orders(orders, customers, tag, seed)))
        started = time.perf_counter()
        code, log = run_app(app_yaml, bootstrap, timeout_s)
        elapsed = time.perf_counter() - started
        if code != 0:
            return [f"the app exited with {code}:\n{log[-3000:]}"]
        print(f"  {orders:,} orders in {elapsed:.1f} s: {orders / elapsed:,.0f} orders/s, the app's start included")
    sent = read_back(bootstrap, source, partitions[source], before, tag)
    enriched = read_back(bootstrap, params.output, partitions[params.output], before, tag)
    unknown = read_back(bootstrap, params.unknown, partitions[params.unknown], before, tag)
    counted = sum(int(found) for found in UNKNOWN_COUNTED.findall(log))
    print(f"  read back: {sum(map(len, enriched.values())):,} enriched, {sum(map(len, unknown.values())):,} of "
          f"unknown customers ({counted:,} counted)")  # fmt: skip
    return check(sent, enriched, unknown, table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.customer_lookup.run", description=__doc__.splitlines()[0])
    parser.add_argument("--customers", type=int, default=5_000, help="customers (default 5000)")
    parser.add_argument("--orders", type=int, default=50_000, help="orders (default 50000)")
    return run_plain_demo(
        parser,
        argv,
        lambda bootstrap, args, seed: demo(APP_YAML, bootstrap, args.customers, args.orders, seed, args.timeout),
        "OK: every order came out once, with its customer, and each customer's orders in the order they went in",
    )


if __name__ == "__main__":
    sys.exit(main())
