"""The outbox poller: an outbox table's rows shipped to Kafka in id order, each exactly once.

A service writes its business rows and an outbox row in one database transaction; the poller reads
outbox rows after the last id it shipped, in id order, a batch at a time, and ships each batch with
its last id as the position (runtime/sources/shipper.py: one Kafka transaction for both).

Ids are handed out when a row is written but become visible when its transaction commits, so a long
transaction can commit a row with a smaller id than rows already shipped, and a poller that moved
past it would never ship it. The settle window guards against it: a row is
shipped only once `settle_ms` have passed since it was written (`created_column`, by the database's
clock: `DEFAULT clock_timestamp()`, the time of the insert), by which time every transaction that
could still commit a smaller id is expected to have ended; and never before a row with a smaller id
that has not settled yet. docs/databases.md describes the alternative that needs no such bound: ordering by commit.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import asyncpg

from runtime.config import ConfigError
from runtime.config.outbox import OutboxConfig
from runtime.sources.polling import PollingSource
from runtime.sources.shipper import Shipped, ShippingSetup


class OutboxPoller(PollingSource):
    def __init__(self, name: str, setup: ShippingSetup):
        self.spec: OutboxConfig = setup.app.outboxes[name]
        super().__init__(name, "outboxes", setup.app.outbox_position_topic(name), self.spec, setup)
        self._text_ids = False

    async def _prepare(self, connection: asyncpg.Connection) -> None:
        self._text_ids = await self._ids_are_text(connection)

    async def _ship_batch(self) -> int:
        """One batch of settled rows and its last id in one Kafka transaction; how many were shipped."""
        rows = await self._database.run(self._settled_rows)
        if not rows:
            return 0
        records: list[Shipped] = []
        for row in rows:
            topic = self.spec.topic or row["topic"]
            if not self._shipper.knows(topic):
                raise ConfigError(
                    f"outboxes.{self.name}: row {row['id']!r} names topic '{topic}', which is not declared under topics"
                )
            records.append((topic, _bytes(row["key"]), _bytes(row["value"]), _headers(row["headers"]), None))
        if not await self._shipper.ship(records, str(rows[-1]["id"])):
            return 0
        return len(rows)

    async def _settled_rows(self, connection: asyncpg.Connection) -> list[Any]:
        """The rows after the last id shipped, in id order, up to the first that has not settled: rows after
        it wait for it, else a row whose id comes first would be passed over. (Shipped ones are deleted
        first, when the outbox says so.)"""
        spec, last = self.spec, self._last_id()
        if spec.delete_shipped and last is not None:
            await connection.execute(f"DELETE FROM {spec.table} WHERE {spec.id_column} <= $1", last)
        columns = [
            f"{spec.id_column} AS id",
            f"{spec.value_column} AS value",
            f"{spec.key_column} AS key" if spec.key_column else "NULL AS key",
            f"{spec.headers_column} AS headers" if spec.headers_column else "NULL AS headers",
            f"{spec.topic_column} AS topic" if spec.topic_column else "NULL AS topic",
            f"{spec.created_column} <= now() - make_interval(secs => $1) AS settled",
        ]
        after = f"{spec.id_column} > $3" if last is not None else "$3::text IS NULL"
        sql = f"SELECT {', '.join(columns)} FROM {spec.table} WHERE {after} ORDER BY {spec.id_column} LIMIT $2"
        rows = await connection.fetch(sql, spec.settle_ms / 1000, spec.batch_size, last)
        return list(itertools.takewhile(lambda row: row["settled"], rows))

    def _last_id(self) -> Any:
        position = self._shipper.position
        if position is None or self._text_ids:
            return position
        return int(position)

    async def _ids_are_text(self, connection: asyncpg.Connection) -> bool:
        schema, _, table = self.spec.table.rpartition(".")
        kind = await connection.fetchval(
            "SELECT data_type FROM information_schema.columns WHERE table_schema = coalesce($1, current_schema()) "
            "AND table_name = $2 AND column_name = $3",
            schema or None,
            table,
            self.spec.id_column,
        )
        if kind is None:
            raise ConfigError(
                f"outboxes.{self.name}: table '{self.spec.table}' has no column "
                f"'{self.spec.id_column}' (id_column), or does not exist"
            )
        return kind in ("text", "character varying", "character")


def _bytes(found: Any) -> bytes | None:
    if found is None or isinstance(found, bytes):
        return found
    return str(found).encode()


def _headers(found: Any) -> list[tuple[str, bytes]]:
    if found is None:
        return []
    headers = json.loads(found) if isinstance(found, str) else found
    return [(str(name), str(value).encode()) for name, value in headers.items()]
