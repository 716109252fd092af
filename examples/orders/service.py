"""The orders service: each order and its outbox row written in ONE database transaction, by several
connections at once, as a service's request handlers would."""

from __future__ import annotations

import asyncio
import json
import random

import asyncpg

SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    id bigserial PRIMARY KEY, customer text NOT NULL, amount_minor bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS order_outbox (
    id bigserial PRIMARY KEY, customer text NOT NULL, payload jsonb NOT NULL, headers jsonb,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS customer_totals (
    customer text PRIMARY KEY, orders bigint NOT NULL, amount_minor bigint NOT NULL);
"""


async def create_tables(url: str) -> None:
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(SCHEMA)
    finally:
        await connection.close()


async def place_orders(url: str, count: int, customers: int, seed: int, connections: int = 4) -> None:
    """`count` orders over `customers` customers, from `connections` connections at once."""

    async def handler(number: int) -> None:
        rng = random.Random(f"{seed}-{number}")
        connection = await asyncpg.connect(url)
        try:
            for _ in range(count // connections + (number < count % connections)):
                customer, amount = f"customer-{rng.randrange(customers):04d}", rng.randrange(100, 100_000)
                async with connection.transaction():  # the order and the event that tells of it, together
                    order = await connection.fetchval(
                        "INSERT INTO orders (customer, amount_minor) VALUES ($1, $2) RETURNING id", customer, amount
                    )
                    event = {"order": order, "customer": customer, "amount_minor": amount, "status": "PLACED"}
                    await connection.execute(
                        "INSERT INTO order_outbox (customer, payload, headers) VALUES ($1, $2, $3)",
                        customer, json.dumps(event), json.dumps({"event-type": "OrderPlaced"}),
                    )  # fmt: skip
        finally:
            await connection.close()

    await asyncio.gather(*(handler(number) for number in range(connections)))


async def expected_totals(url: str) -> dict[str, tuple[int, int]]:
    """Each customer's order count and sum, as the orders table has them."""
    connection = await asyncpg.connect(url)
    try:
        rows = await connection.fetch("SELECT customer, count(*), sum(amount_minor) FROM orders GROUP BY customer")
        return {row[0]: (row[1], row[2]) for row in rows}
    finally:
        await connection.close()


async def written_totals(url: str) -> dict[str, tuple[int, int]]:
    """Each customer's totals, as the app wrote them."""
    connection = await asyncpg.connect(url)
    try:
        rows = await connection.fetch("SELECT customer, orders, amount_minor FROM customer_totals")
        return {row[0]: (row[1], row[2]) for row in rows}
    finally:
        await connection.close()
