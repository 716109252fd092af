"""Each order enriched with its customer, looked up in PostgreSQL as it comes.

A lookup is a round trip to the database, which one order at a time would wait out order after order.
Declared with `concurrency: {max_in_flight: N, order: key}`, the task has up to N orders awaiting their
lookups at once, and the orders of one customer (the key) still go out in their input order. The pool is
the task's own: its connections cap the lookups actually running, and the orders beyond them wait for a
connection, not for the order before them.

What that buys grows with the time a lookup waits. A PostgreSQL on the same machine answers in a fraction
of a millisecond, and the worker's CPU bounds the rate whatever N is; a database a network away leaves
the task idle between one order and the next, and N orders in flight fill that time.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import asyncpg
from pydantic import BaseModel, ConfigDict, Field, field_validator

from processors import Context, Processor, Record
from processors.params import among_outputs

CUSTOMER = "SELECT name, tier, country FROM customers WHERE id = $1"
UNKNOWN = "unknown_customers"  # ctx.count name: an order whose customer the table lacks
CLOSE_TIMEOUT_S = 10.0


class CustomerLookupParams(BaseModel):
    """`params` of `examples.customer_lookup.lookup:CustomerLookup`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dsn: str  # `${DATABASE_URL}` in the YAML: the password stays out of the file and out of the logs
    output: str  # the orders with their customer
    unknown: str  # the orders whose customer is not in the table, as they came
    # Connections per task: every task of the app opens its own pool, and the server's max_connections
    # must hold them all.
    pool_size: int = Field(default=10, ge=1, le=100)

    _among_outputs = field_validator("output", "unknown")(
        classmethod(lambda cls, topic, info: among_outputs(topic, info))
    )


class CustomerLookup(Processor):
    """Sends each order `{"order", "customer": <id>, ...}` to `params.output` with `"customer"` replaced by
    the customer's row, `{"id", "name", "tier", "country"}`, keyed and timed as it came; an order whose
    customer is not found goes to `params.unknown` unchanged, and is counted (`unknown_customers`)."""

    Params: ClassVar[type[CustomerLookupParams]] = CustomerLookupParams

    async def init(self, ctx: Context) -> None:
        params = self.Params.model_validate(ctx.params)
        self.output, self.unknown = params.output, params.unknown
        self.pool: asyncpg.Pool = await asyncpg.create_pool(
            params.dsn, min_size=1, max_size=params.pool_size, timeout=10
        )

    async def process(self, record: Record, ctx: Context) -> None:
        order: dict[str, Any] = record.value
        customer = int(order["customer"])
        row = await self.pool.fetchrow(CUSTOMER, customer)
        if row is None:
            ctx.count(UNKNOWN)
            ctx.send(self.unknown, order, key=record.key, headers=record.headers)
            return
        enriched = {**order, "customer": {"id": customer, "name": row["name"], "tier": row["tier"],
                                          "country": row["country"]}}  # fmt: skip
        ctx.send(self.output, enriched, key=record.key, headers=record.headers)

    async def close(self) -> None:
        """Lookups the task abandoned (it was revoked or stopped mid-flight) give their connections back as
        their cancellation runs; a pool still busy after that is cut off rather than waited for."""
        try:
            await asyncio.wait_for(self.pool.close(), CLOSE_TIMEOUT_S)
        except TimeoutError:
            self.pool.terminate()
