"""The table follower: a table's rows into a compacted topic, keyed by the table's key, in the order of
their version (then key), each batch with the (version, key) it reaches as its position in one Kafka
transaction (runtime/sources/shipper.py). With no position yet, that order first walks the whole table: the
snapshot; after it, every insert and update (they set the version) comes after the position: the
follow. A row whose `deleted_column` is true goes as a tombstone; a row deleted outright is not seen,
so a table to follow deletes softly.

A version handed out by a transaction that commits later than others can come before rows already
shipped, as an outbox's ids can; with a timestamp version, the settle window does for the follower
what it does for the outbox (runtime/sources/outbox/poller.py), and with a numeric one, the numbers must be
handed out in commit order.
"""

from __future__ import annotations

import datetime
import decimal
import itertools
import json
import uuid
from typing import Any

import asyncpg

from runtime.config import ConfigError
from runtime.config.table_follower import TableFollowerConfig
from runtime.kafka.topic_serdes import serde_for
from runtime.sources.polling import PollingSource
from runtime.sources.shipper import Shipped, ShippingSetup


class TableFollower(PollingSource):
    def __init__(self, name: str, setup: ShippingSetup):
        app = setup.app
        self.spec: TableFollowerConfig = app.table_followers[name]
        spec = self.spec
        super().__init__(name, "table_followers", app.follower_position_topic(name), spec, setup)
        topic = app.topics[spec.topic]
        self._key_serde = serde_for(topic.key_serde, spec.topic, "key", topic.key_schema, None)
        self._value_serde = serde_for(topic.value_serde, spec.topic, "value", topic.value_schema, None)
        self._types: tuple[str, str] = ("", "")  # of the version and key columns

    async def _prepare(self, connection: asyncpg.Connection) -> None:
        self._types = await self._column_types(connection)

    async def _ship_batch(self) -> int:
        rows = await self._database.run(self._next_rows)
        if not rows:
            return 0
        records: list[Shipped] = [
            (self.spec.topic, self._key_serde.serialize(row[self.spec.key_column]), self._value(row), [], None)
            for row in rows
        ]
        last = rows[-1]
        if not await self._shipper.ship(records, json.dumps([last["__version"], last["__key"]])):
            return 0
        return len(rows)

    def _value(self, row: Any) -> bytes | None:
        spec = self.spec
        if spec.deleted_column is not None and row[spec.deleted_column]:
            return None
        columns = row.keys()  # an asyncpg record iterates over its values
        fields = spec.fields or {name: name for name in columns if not name.startswith("__")}
        return self._value_serde.serialize({field: _plain(row[column]) for field, column in fields.items()})

    async def _next_rows(self, connection: asyncpg.Connection) -> list[Any]:
        """The rows after the position in (version, key) order, up to the first whose version has not settled."""
        spec = self.spec
        version_type, key_type = self._types
        settled = (
            f"{spec.version_column} <= now() - make_interval(secs => $1)"
            if version_type.startswith("timestamp")
            else "$1::float8 IS NOT NULL"
        )
        position = self._shipper.position
        after, parameters = "TRUE", [spec.settle_ms / 1000, spec.batch_size]
        if position is not None:
            after = f"({spec.version_column}, {spec.key_column}) > ($3::text::{version_type}, $4::text::{key_type})"
            parameters += json.loads(position)
        sql = (
            f"SELECT *, {spec.version_column}::text AS __version, {spec.key_column}::text AS __key, "
            f"{settled} AS __settled FROM {spec.table} WHERE {after} "
            f"ORDER BY {spec.version_column}, {spec.key_column} LIMIT $2"
        )
        rows = await connection.fetch(sql, *parameters)
        return list(itertools.takewhile(lambda row: row["__settled"], rows))

    async def _column_types(self, connection: asyncpg.Connection) -> tuple[str, str]:
        schema, _, table = self.spec.table.rpartition(".")
        found = await connection.fetch(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = coalesce($1, current_schema()) AND table_name = $2",
            schema or None,
            table,
        )
        types = {row["column_name"]: row["data_type"] for row in found}
        if not types:
            raise ConfigError(f"table_followers.{self.name}.table: table '{self.spec.table}' does not exist")
        columns = {"key_column": self.spec.key_column, "version_column": self.spec.version_column}
        columns.update({f"fields.{field}": column for field, column in (self.spec.fields or {}).items()})
        if self.spec.deleted_column is not None:
            columns["deleted_column"] = self.spec.deleted_column
        for where, column in columns.items():
            if column not in types:
                raise ConfigError(
                    f"table_followers.{self.name}.{where}: table '{self.spec.table}' has no column "
                    f"'{column}' (it has {sorted(types)})"
                )
        return types[self.spec.version_column], types[self.spec.key_column]


def _plain(found: Any) -> Any:
    """A column's value as the topic's serdes take it: times as epoch milliseconds (as Kafka Connect's JSON
    converter writes them), numbers as numbers, UUIDs as text."""
    if isinstance(found, datetime.datetime):
        moment = found if found.tzinfo is not None else found.replace(tzinfo=datetime.UTC)
        return int(moment.timestamp() * 1000)
    if isinstance(found, datetime.date):
        return found.isoformat()
    if isinstance(found, decimal.Decimal):
        return int(found) if found == found.to_integral_value() else float(found)
    if isinstance(found, uuid.UUID):
        return str(found)
    return found
