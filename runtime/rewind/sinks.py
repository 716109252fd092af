"""A `PostgresSink`'s table taken back with the rest of the app.

The sink keeps, in its database, the next offset of each input partition whose rows its table holds
(processors/sinks/positions.py), and skips every record below it: so after the group's offsets go back,
the sink would skip the records after the checkpoint and keep the rows the bug wrote for them. The
rewind moves those positions back to the offsets the group goes back to, never forward, so that the
fixed code writes those records' rows again:

- `upsert`: each row written again replaces the bug's row of its key;
- `insert`: a row written again would stand beside the bug's, so the bug's rows are deleted, in the same
  transaction as the positions: the rows whose partition and offset columns name a record the sink will
  write again. A sink in insert mode whose columns take no partition and offset is refused: its rows
  cannot be told from the others.

A sink reading a topic the app itself writes is not moved (that topic goes to its end, as `reset` does):
the fixed outputs come after the bug's there, and replace its rows by key under `upsert`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import asyncpg
from aiokafka import TopicPartition

from processors.sinks import PostgresSink, PostgresSinkParams, positions
from processors.sinks.postgres import identifier
from processors.sinks.postgres_connection import GONE, CannotConnect, connect, server_of
from runtime.commands.cluster import CommandFailed
from runtime.config import AppConfig

RECORD_FIELDS = ("topic", "partition", "offset")


@dataclass(frozen=True)
class DatabaseSink:
    """A processor of the app that is a `PostgresSink`: where its table and positions are."""

    processor: str
    consumer: str  # the positions' owner, `<app_id>/<processor>`
    params: PostgresSinkParams
    dsn: str
    inputs: list[str]

    @property
    def where(self) -> str:
        """The table and its database, without the DSN's credentials."""
        return f"table {self.params.table} at {server_of(self.dsn)}{urlsplit(self.dsn).path}"

    def record_columns(self) -> dict[str, str]:
        """Which column takes the record's topic, partition and offset, of those the sink writes."""
        return {spec: column for column, spec in self.params.columns.items() if spec in RECORD_FIELDS}

    def rows_of_records(self, action: str, tp: TopicPartition, start: int, end: int) -> tuple[Any, ...]:
        """`action` (DELETE, or SELECT count(*)) over the rows the records `[start, end)` of `tp` wrote, and
        its arguments; refused for a table whose rows do not say which record wrote them."""
        columns = self.record_columns()
        if "partition" not in columns or "offset" not in columns:
            raise CommandFailed(
                f"sink {self.processor} writes {self.where} in insert mode, and no column takes the record's "
                "partition and offset: the rows of the records it would write again cannot be told from the "
                "others, and would stay beside the new ones. Give it columns taking partition and offset (and "
                "topic), or write in upsert mode by a business key"
            )
        offset, partition = identifier(columns["offset"]), identifier(columns["partition"])
        table = identifier(self.params.table)
        sql = f"{action} FROM {table} WHERE {partition} = $1 AND {offset} >= $2 AND {offset} < $3"
        if "topic" in columns:
            return (f"{sql} AND {identifier(columns['topic'])} = $4", tp.partition, start, end, tp.topic)
        return (sql, tp.partition, start, end)


@dataclass(frozen=True)
class SinkMove:
    """One input partition of a sink going back: from `stored` to `new`, and under `insert` the rows the
    records in between wrote, to be deleted (None under `upsert`: the rows written again replace them)."""

    sink: DatabaseSink
    tp: TopicPartition
    stored: int
    new: int
    rows: int | None

    def describe(self) -> str:
        again = f"{self.stored - self.new:,} records written again"
        done = (
            f"the {self.rows:,} rows they wrote deleted"
            if self.rows is not None
            else "each row replaced by key (upsert)"
        )
        return (
            f"  sink {self.sink.processor} ({self.sink.where}): {self.tp.topic}[{self.tp.partition}] "
            f"{self.stored} -> {self.new}, {again}, {done}"
        )

    def record(self) -> dict[str, Any]:
        return {
            "sink": self.sink.processor,
            "table": self.sink.params.table,
            "partition": f"{self.tp.topic}[{self.tp.partition}]",
            "from": self.stored,
            "to": self.new,
            "rows_deleted": self.rows,
        }


def database_sinks(app: AppConfig) -> list[DatabaseSink]:
    """The app's processors that are `PostgresSink`s (or subclasses), with their validated params and DSN."""
    found = []
    for processor in app.processors:
        sink_class = processor.processor_class()
        if not issubclass(sink_class, PostgresSink):
            continue
        params = sink_class.Params.model_validate(processor.params)
        dsn = params.dsn or os.environ.get("DATABASE_URL")
        if not dsn:
            raise CommandFailed(
                f"sink {processor.name}: params.dsn is not set and neither is DATABASE_URL: "
                "the rewind must move its positions in its database"
            )
        found.append(DatabaseSink(processor.name, f"{app.app_id}/{processor.name}", params, dsn, processor.inputs))
    return found


def rows_left_beside(sinks: list[DatabaseSink], own_topics: set[str]) -> list[str]:
    """A line for each sink in insert mode reading a topic the app writes: its positions there stay, and the
    rows of the bug's outputs stay beside those of the fixed outputs."""
    return [
        f"  sink {sink.processor} ({sink.where}) reads {topic}, which the app writes, in insert mode: the rows of "
        "the outputs sent before the rewind stay beside those of the outputs sent again (upsert would replace them)"
        for sink in sinks
        if sink.params.mode == "insert"
        for topic in sink.inputs
        if topic in own_topics
    ]


async def planned_moves(sinks: list[DatabaseSink], offsets: dict[TopicPartition, int]) -> list[SinkMove]:
    """Each sink's input partitions whose stored position lies past the offset the group goes back to."""
    moves = []
    for sink in sinks:
        connection = await _connected(sink)
        try:
            moves += await _moves(connection, sink, offsets)
        finally:
            await connection.close()
    return moves


async def move(moves: list[SinkMove]) -> None:
    """Each sink's positions back, and under `insert` the rows written past them deleted, in one transaction
    per sink: a rewind cut off before it leaves the sink as it was, and is done again."""
    by_sink: dict[str, list[SinkMove]] = {}
    for planned in moves:
        by_sink.setdefault(planned.sink.processor, []).append(planned)
    for its_moves in by_sink.values():
        sink = its_moves[0].sink
        connection = await _connected(sink)
        try:
            async with connection.transaction():
                for planned in its_moves:
                    if planned.rows is not None:
                        await connection.execute(
                            *sink.rows_of_records("DELETE", planned.tp, planned.new, planned.stored)
                        )
                    await connection.execute(
                        positions.rewind_sql(identifier(sink.params.positions_table)),
                        sink.consumer,
                        planned.tp.topic,
                        planned.tp.partition,
                        planned.new,
                    )
        except GONE as error:
            raise CommandFailed(f"sink {sink.processor}: {sink.where} went away ({error!r}): rewind again") from None
        finally:
            await connection.close()


async def _moves(
    connection: asyncpg.Connection, sink: DatabaseSink, offsets: dict[TopicPartition, int]
) -> list[SinkMove]:
    try:
        stored = await connection.fetch(positions.read_all_sql(identifier(sink.params.positions_table)), sink.consumer)
    except asyncpg.UndefinedTableError:  # the sink never ran: it has no positions to move
        return []
    moves = []
    for row in stored:
        tp = TopicPartition(row["topic"], row["partition"])
        new = offsets.get(tp)
        if new is None or new >= row["next_offset"]:
            continue
        rows = None
        if sink.params.mode == "insert":
            rows = await connection.fetchval(*sink.rows_of_records("SELECT count(*)", tp, new, row["next_offset"]))
        moves.append(SinkMove(sink, tp, row["next_offset"], new, rows))
    return sorted(moves, key=lambda planned: (planned.tp.topic, planned.tp.partition))


async def _connected(sink: DatabaseSink) -> asyncpg.Connection:
    try:
        return await connect(sink.dsn)
    except CannotConnect as error:
        raise CommandFailed(f"sink {sink.processor}: {error}") from None
    except GONE as error:
        raise CommandFailed(f"sink {sink.processor}: {sink.where} is out of reach ({error!r})") from None
