"""A rewind finds the app's PostgresSinks (subclasses too) and their databases from its YAML, and says per
sink and partition what it moves; an insert-mode table whose rows do not name their record is refused."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka import TopicPartition

from runtime.commands.cluster import CommandFailed
from runtime.config import parse_app
from runtime.rewind.sinks import DatabaseSink, SinkMove, database_sinks, rows_left_beside

DSN = "postgresql://writer:s3cret@db.internal:5433/orders"


def app(**sinks: dict[str, Any]) -> dict[str, Any]:
    processors = [{"name": "count", "class": "tests.support.apps:CountPerKey", "inputs": ["in"], "outputs": ["out"],
                   "params": {"output": "out"}, "stores": {"counts": {}}}]  # fmt: skip
    for name, params in sinks.items():
        spec = {"table": "ledger", "mode": "insert", "columns": {"amount": "value.amount"}} | params
        processors.append({"name": name, "class": spec.pop("class", "processors.sinks:PostgresSink"),
                           "inputs": ["in"], "params": spec})  # fmt: skip
    return {"app_id": "payments", "topics": {"in": {"partitions": 3}, "out": {"partitions": 3}},
            "processors": processors}  # fmt: skip


def test_the_sinks_are_the_postgres_sinks_and_their_subclasses_each_with_its_database(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://runtime@127.0.0.1:5432/postgres")
    found = database_sinks(parse_app(app(plain={}, own={"class": "tests.support.apps:AmountSink", "dsn": DSN,
                                                        "buggy": True})))  # fmt: skip
    assert [(sink.processor, sink.consumer, sink.dsn, sink.inputs) for sink in found] == [
        ("plain", "payments/plain", "postgresql://runtime@127.0.0.1:5432/postgres", ["in"]),
        ("own", "payments/own", DSN, ["in"]),
    ]
    assert found[1].where == "table ledger at db.internal:5433/orders"  # no credentials


def test_a_sink_without_a_database_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    with pytest.raises(CommandFailed, match=r"sink plain: params\.dsn is not set and neither is DATABASE_URL"):
        database_sinks(parse_app(app(plain={})))


def sink(columns: dict[str, str]) -> DatabaseSink:
    (found,) = database_sinks(parse_app(app(ledger={"dsn": DSN, "columns": columns})))
    return found


def test_an_insert_table_loses_the_rows_of_the_records_written_again_by_their_partition_and_offset() -> None:
    tp = TopicPartition("in", 2)
    named = sink({"p": "partition", "o": "offset", "amount": "value.amount"})
    assert named.rows_of_records("DELETE", tp, 100, 160) == (
        'DELETE FROM "ledger" WHERE "p" = $1 AND "o" >= $2 AND "o" < $3', 2, 100, 160
    )  # fmt: skip
    with_topic = sink({"t": "topic", "p": "partition", "o": "offset"})
    assert with_topic.rows_of_records("SELECT count(*)", tp, 100, 160) == (
        'SELECT count(*) FROM "ledger" WHERE "p" = $1 AND "o" >= $2 AND "o" < $3 AND "t" = $4', 2, 100, 160, "in"
    )  # fmt: skip
    with pytest.raises(CommandFailed, match="in insert mode, and no column takes the record's partition and offset"):
        sink({"o": "offset", "amount": "value.amount"}).rows_of_records("DELETE", tp, 100, 160)


def test_each_move_is_one_line_and_a_record() -> None:
    ledger = sink({"p": "partition", "o": "offset"})
    deleted = SinkMove(ledger, TopicPartition("in", 0), 1_500, 1_000, 480)
    upserted = SinkMove(ledger, TopicPartition("in", 1), 1_500, 1_000, None)
    assert deleted.describe() == (
        "  sink ledger (table ledger at db.internal:5433/orders): in[0] 1500 -> 1000, 500 records written again, "
        "the 480 rows they wrote deleted"
    )
    assert upserted.describe().endswith(
        "in[1] 1500 -> 1000, 500 records written again, each row replaced by key (upsert)"
    )
    assert deleted.record() == {"sink": "ledger", "table": "ledger", "partition": "in[0]", "from": 1_500, "to": 1_000,
                                "rows_deleted": 480}  # fmt: skip


def test_an_insert_sink_reading_a_topic_the_app_writes_is_said_to_keep_the_bugs_rows() -> None:
    spec = app(ledger={"dsn": DSN}, latest={"dsn": DSN, "mode": "upsert", "key_columns": ["amount"]})
    for processor in spec["processors"][1:]:
        processor["inputs"] = ["out"]
    (line,) = rows_left_beside(database_sinks(parse_app(spec)), {"out"})
    assert line.startswith("  sink ledger (table ledger at db.internal:5433/orders) reads out, which the app writes")
