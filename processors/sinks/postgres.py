"""The exactly-once PostgreSQL sink: each record's row in a table, every record's effect once.

Kafka's transactions end at the broker; the database has its own. So the sink keeps, in the database,
the next offset of each input partition whose rows the table holds (`positions.py`), and writes a
batch's rows and the positions after them in one database transaction. A task starts from the
positions the database holds and skips every record below them: a record Kafka delivers again (after
a crash, under any guarantee) finds its row already there, and a row is never written twice, nor
lost, since the database commits rows and positions together or neither.

Rows are buffered and written at each commit of the task (`flush`, before its offsets are committed)
and whenever `batch_size` rows wait, by binary COPY: straight into the table in `insert` mode; for
`upsert`, into a temporary table, then merged (`INSERT ... ON CONFLICT (key columns) DO UPDATE`), the
last record of a key winning within a batch. A database that goes away is waited for: the write is
retried with a growing pause, each attempt logged, and the positions read back first, so that a
transaction whose commit was cut off is not written twice. One that refuses the connection (its TLS, the
login) stops the worker with one line naming it (`postgres_connection.py`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Callable
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

import asyncpg
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from processors.context import Context
from processors.processor import Processor
from processors.record import Record
from processors.sinks import positions
from processors.sinks.postgres_connection import GONE, connect, server_of
from processors.sinks.rows import converter, source_of

log = logging.getLogger(__name__)

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SKIPPED = "rows_already_written"  # ctx.count name: a record below the table's position, delivered again
RETRIES = "database_retries"  # ctx.count name: a write retried after the database went away
MAX_PAUSE_S = 5.0


def identifier(name: str) -> str:
    """A table (`schema.table`) or column name, checked, as SQL quotes it."""
    parts = name.split(".")
    if len(parts) > 2 or not all(IDENTIFIER.match(part) for part in parts):
        raise ValueError(f"'{name}' is not a table or column name (letters, digits and _, schema.table at most)")
    return ".".join(f'"{part}"' for part in parts)


class PostgresSinkParams(BaseModel):
    """`params` of `processors.sinks:PostgresSink` (docs/databases.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    table: str
    columns: dict[str, str]  # column -> what it takes of the record (rows.SOURCES)
    key_columns: list[str] = Field(default_factory=list)
    mode: Literal["upsert", "insert"] = "upsert"
    batch_size: int = Field(default=5000, ge=1)
    dsn: str | None = None  # else the environment's DATABASE_URL
    positions_table: str = positions.DEFAULT_TABLE

    @field_validator("table", "positions_table")
    @classmethod
    def _a_table_name(cls, name: str) -> str:
        identifier(name)
        return name

    @field_validator("columns")
    @classmethod
    def _columns_take_something(cls, columns: dict[str, str]) -> dict[str, str]:
        if not columns:
            raise ValueError("name at least one column")
        for column, spec in columns.items():
            try:
                identifier(column)
                source_of(spec)
            except ValueError as error:
                raise ValueError(f"{column}: {error}") from None
        return columns

    @model_validator(mode="after")
    def _keys_among_columns(self) -> PostgresSinkParams:
        missing = [key for key in self.key_columns if key not in self.columns]
        if missing:
            raise ValueError(f"key_columns {missing} are not among the columns {sorted(self.columns)}")
        if self.mode == "upsert" and not self.key_columns:
            raise ValueError("mode upsert needs key_columns: the columns of the table's primary key or a unique index")
        return self


class PostgresSink(Processor):
    """Writes each record as a row of `params.table`, exactly once; sends nothing."""

    Params: ClassVar[type[PostgresSinkParams]] = PostgresSinkParams

    async def init(self, ctx: Context) -> None:
        params = self.Params.model_validate(ctx.params)
        dsn = params.dsn or os.environ.get("DATABASE_URL")
        if not dsn:
            raise ValueError(
                "params.dsn is not set and neither is DATABASE_URL (`python -m runtime dev-postgres start` prints one)"
            )
        self.ctx, self.params, self.dsn = ctx, params, dsn
        self.consumer, self.partition = f"{ctx.app_id}/{ctx.processor_name}", ctx.partition
        schema, _, table = params.table.rpartition(".")
        self.schema, self.table = schema or None, table
        self.columns = list(params.columns)
        self.sources = [source_of(spec) for spec in params.columns.values()]
        self.rows: dict[Any, tuple[Any, ...]] | list[tuple[Any, ...]] = {} if params.mode == "upsert" else []
        self.key_of: Callable[[tuple[Any, ...]], Any] = self._key_getter()
        self.pending: dict[str, int] = {}  # the positions after the rows buffered
        self.connection = await self._connect()
        self.converters = [converter(column, data_type) for column, data_type in await self._column_types()]
        self.positions = await self._stored_positions()

    async def process(self, record: Record, ctx: Context) -> None:
        if record.offset < self.positions.get(record.topic, 0):
            ctx.count(SKIPPED)
            return
        row = tuple(convert(source(record)) for source, convert in zip(self.sources, self.converters, strict=True))
        if isinstance(self.rows, dict):
            self.rows[self.key_of(row)] = row
        else:
            self.rows.append(row)
        self.pending[record.topic] = record.offset + 1
        if len(self.rows) >= self.params.batch_size:
            await self._write()

    async def flush(self, ctx: Context) -> None:
        await self._write()

    async def close(self) -> None:
        await self.connection.close()

    async def _write(self) -> None:
        """The buffered rows and the positions after them, in one database transaction."""
        if not self.pending:
            return
        rows = list(self.rows.values()) if isinstance(self.rows, dict) else self.rows
        pause = 0.1
        while True:
            try:
                async with self.connection.transaction():
                    if rows:
                        await self._copy(rows)
                    await self.connection.executemany(
                        positions.write_sql(identifier(self.params.positions_table)),
                        positions.rows(self.consumer, self.partition, self.pending),
                    )
                break
            except GONE as error:
                self.ctx.count(RETRIES)
                log.warning(
                    "writing %d rows to %s failed (%r); trying again in %.1fs",
                    len(rows),
                    self.params.table,
                    error,
                    pause,
                )
                await asyncio.sleep(pause)
                pause = min(pause * 2, MAX_PAUSE_S)
                if await self._reconnected_and_written():
                    break
        self.positions.update(self.pending)
        self.pending.clear()
        self.rows = {} if isinstance(self.rows, dict) else []

    async def _copy(self, rows: list[tuple[Any, ...]]) -> None:
        if self.params.mode == "insert":
            await self.connection.copy_records_to_table(
                self.table, records=rows, columns=self.columns, schema_name=self.schema
            )
            return
        await self.connection.copy_records_to_table("sink_rows", records=rows, columns=self.columns)
        await self.connection.execute(self._merge_sql())

    def _merge_sql(self) -> str:
        columns = ", ".join(identifier(column) for column in self.columns)
        keys = ", ".join(identifier(key) for key in self.params.key_columns)
        others = [identifier(c) for c in self.columns if c not in self.params.key_columns]
        action = f"DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in others)}" if others else "DO NOTHING"
        return (
            f"INSERT INTO {identifier(self.params.table)} ({columns}) SELECT {columns} FROM sink_rows "
            f"ON CONFLICT ({keys}) {action}"
        )

    async def _reconnected_and_written(self) -> bool:
        """A new connection once the database answers; whether the write being retried was committed after
        all (its commit was cut off): the positions it wrote are there."""
        try:
            self.connection.terminate()
            self.connection = await self._connect()
            stored = await self._stored_positions()
        except GONE as error:
            log.warning("the database at %s is still out of reach (%r)", server_of(self.dsn), error)
            return False
        return all(stored.get(topic, 0) >= offset for topic, offset in self.pending.items())

    async def _connect(self) -> asyncpg.Connection:
        connection = await connect(self.dsn)
        async with connection.transaction():  # one task at a time: concurrent CREATE IF NOT EXISTS can collide
            await connection.execute("SELECT pg_advisory_xact_lock(hashtext($1))", self.params.positions_table)
            await connection.execute(positions.create_sql(identifier(self.params.positions_table)))
        if self.params.mode == "upsert":
            await connection.execute(
                f"CREATE TEMP TABLE IF NOT EXISTS sink_rows ON COMMIT DELETE ROWS AS SELECT "
                f"{', '.join(map(identifier, self.columns))} FROM {identifier(self.params.table)} WITH NO DATA"
            )
        return connection

    async def _column_types(self) -> list[tuple[str, str]]:
        """Each column's type; a table or column that does not exist is named, with its YAML field."""
        found = await self.connection.fetch(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = coalesce($1, current_schema()) AND table_name = $2",
            self.schema,
            self.table,
        )
        types = {row["column_name"]: row["data_type"] for row in found}
        if not types:
            raise ValueError(f"params.table: table '{self.params.table}' does not exist in {self._database()}")
        for column in self.columns:
            if column not in types:
                raise ValueError(
                    f"params.columns.{column}: table '{self.params.table}' has no column '{column}' "
                    f"(it has {sorted(types)})"
                )
        return [(column, types[column]) for column in self.columns]

    async def _stored_positions(self) -> dict[str, int]:
        sql = positions.read_sql(identifier(self.params.positions_table))
        return {
            row["topic"]: row["next_offset"] for row in await self.connection.fetch(sql, self.consumer, self.partition)
        }

    def _database(self) -> str:
        """host:port/database, without the DSN's credentials and options."""
        return f"{server_of(self.dsn)}{urlsplit(self.dsn).path}"

    def _key_getter(self) -> Callable[[tuple[Any, ...]], Any]:
        indexes = [self.columns.index(key) for key in self.params.key_columns]
        if len(indexes) == 1:
            (index,) = indexes
            return lambda row: row[index]
        return lambda row: tuple(row[index] for index in indexes)
