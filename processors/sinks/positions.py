"""Where a sink's table stands in its inputs: the next offset of each input partition whose records the
table holds, kept in the same database, and written in the same database transaction as their rows.

So the table and its positions never disagree: after any crash, a record below its partition's position
is in the table, and one at or above it is not, whatever Kafka's committed offsets say. A task skips the
records below its positions; Kafka's delivery, at least once, does the rest. A rewind
(`python -m runtime rewind`) moves them back with the group's offsets, so that the records after a
checkpoint are written again rather than skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DEFAULT_TABLE = "kafka_sink_positions"


def create_sql(table: str) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {table} (consumer text NOT NULL, topic text NOT NULL, "
        "partition integer NOT NULL, next_offset bigint NOT NULL, PRIMARY KEY (consumer, topic, partition))"
    )


def read_sql(table: str) -> str:
    return f"SELECT topic, next_offset FROM {table} WHERE consumer = $1 AND partition = $2"


def read_all_sql(table: str) -> str:
    return f"SELECT topic, partition, next_offset FROM {table} WHERE consumer = $1"


def rewind_sql(table: str) -> str:
    """Back to an earlier offset, never forward: a partition already behind it keeps its position."""
    return (
        f"UPDATE {table} SET next_offset = $4 "
        "WHERE consumer = $1 AND topic = $2 AND partition = $3 AND next_offset > $4"
    )


def write_sql(table: str) -> str:
    return (
        f"INSERT INTO {table} (consumer, topic, partition, next_offset) VALUES ($1, $2, $3, $4) "
        "ON CONFLICT (consumer, topic, partition) DO UPDATE SET next_offset = excluded.next_offset"
    )


def rows(consumer: str, partition: int, positions: Mapping[str, int]) -> list[tuple[Any, ...]]:
    return [(consumer, topic, partition, offset) for topic, offset in positions.items()]
