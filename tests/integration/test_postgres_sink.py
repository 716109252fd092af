"""The exactly-once PostgreSQL sink against a real PostgreSQL: rows and positions in one database
transaction, records delivered again not written twice, bad tables and values named, a database that
goes away waited for; and kill -9 of its workers under load against a real broker."""

from __future__ import annotations

import asyncio
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import msgpack
import pytest

from runtime.config import parse_app
from runtime.devpostgres.server import throwaway
from runtime.errors import StopAfterCommit
from runtime.testkit import AppDriver
from runtime.worker.worker import Worker
from tests.conftest import TopicNamer
from tests.support.kafka_helpers import create_topic, produce
from tests.support.kills import FAST_FAILOVER, kill_and_replace
from tests.support.running import write_app


def query(url: str, sql: str) -> list[Any]:
    async def fetch() -> list[Any]:
        connection = await asyncpg.connect(url)
        try:
            return list(await connection.fetch(sql))
        finally:
            await connection.close()

    return asyncio.run(fetch())


@pytest.fixture
def table(postgres_url: str) -> Iterator[str]:
    """A table of its own for each test: payments (id, account, amount), no key (duplicates would show)."""
    name = f"payments_{uuid.uuid4().hex[:8]}"
    query(postgres_url, f"CREATE TABLE {name} (id text, account text, amount bigint, seen timestamptz)")
    yield name
    query(postgres_url, f"DROP TABLE {name}")


def sink_app(dsn: str, table: str, **params: Any) -> dict[str, Any]:
    topic = {"partitions": 3, "key_serde": "str", "value_serde": "json"}
    columns = {"id": "value.id", "account": "key", "amount": "value.amount", "seen": "timestamp"}
    spec = {"name": "sink", "class": "processors.sinks:PostgresSink", "inputs": ["payments"],
            "params": {"dsn": dsn, "table": table, "columns": columns, "mode": "insert", **params}}  # fmt: skip
    return {"app_id": f"sink-{table}", "topics": {"payments": topic}, "processors": [spec],
            "errors": {"processing": "dead_letter"}}  # fmt: skip


def payments(count: int, start: int = 0) -> list[tuple[str, dict[str, Any]]]:
    return [(f"acc-{n % 17}", {"id": f"p-{n}", "amount": n}) for n in range(start, start + count)]


def test_a_record_delivered_again_finds_its_row_there_and_is_not_written_twice(postgres_url: str, table: str) -> None:
    with (
        tempfile.TemporaryDirectory() as state,
        AppDriver(sink_app(postgres_url, table), state_dir=Path(state)) as first,
    ):
        first.pipe_all("payments", payments(100))
    # A new worker with no state, given the same records again (Kafka's offsets were lost, say), and more.
    with (
        tempfile.TemporaryDirectory() as state,
        AppDriver(sink_app(postgres_url, table), state_dir=Path(state)) as again,
    ):
        again.pipe_all("payments", payments(100))
        assert again.count("sink", "rows_already_written") == 100
        again.pipe_all("payments", payments(50, start=100))
    rows = query(postgres_url, f"SELECT count(*) AS rows, count(DISTINCT id) AS ids, sum(amount) AS total FROM {table}")
    assert (rows[0]["rows"], rows[0]["ids"], rows[0]["total"]) == (150, 150, sum(range(150)))
    positions = query(postgres_url, f"SELECT sum(next_offset) AS next FROM kafka_sink_positions "
                                    f"WHERE consumer = 'sink-{table}/sink'")  # fmt: skip
    assert positions[0]["next"] == 150


def test_upsert_keeps_the_last_row_of_each_key(postgres_url: str) -> None:
    name = f"balances_{uuid.uuid4().hex[:8]}"
    query(postgres_url, f"CREATE TABLE {name} (account text PRIMARY KEY, last_id text, amount bigint)")
    app = sink_app(postgres_url, name, mode="upsert", key_columns=["account"], batch_size=7)
    app["processors"][0]["params"]["columns"] = {"account": "key", "last_id": "value.id", "amount": "value.amount"}
    with tempfile.TemporaryDirectory() as state, AppDriver(app, state_dir=Path(state)) as driver:
        driver.pipe_all("payments", payments(100))
    rows = {row["account"]: row["amount"] for row in query(postgres_url, f"SELECT * FROM {name}")}
    assert rows == {f"acc-{k}": max(n for n in range(100) if n % 17 == k) for k in range(17)}


def test_a_processor_writing_with_idempotency_keys_writes_a_record_delivered_again_once(postgres_url: str) -> None:
    name = f"ledger_{uuid.uuid4().hex[:8]}"
    query(postgres_url, f"CREATE TABLE {name} (idempotency_key text PRIMARY KEY, account text, amount bigint)")
    app = sink_app(postgres_url, name)
    app["processors"][0].update({"class": "tests.support.apps:LedgerWriter", "params": {"dsn": postgres_url,
                                                                                        "table": name}})  # fmt: skip
    for _ in range(2):  # the second time, as if Kafka delivered them all again
        with tempfile.TemporaryDirectory() as state, AppDriver(app, state_dir=Path(state)) as driver:
            driver.pipe_all("payments", payments(60))
    rows = query(postgres_url, f"SELECT count(*) AS rows, sum(amount) AS total FROM {name}")
    assert (rows[0]["rows"], rows[0]["total"]) == (60, sum(range(60)))


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"table": "no_such_table"}, "params.table: table 'no_such_table' does not exist"),
        ({"columns": {"id": "value.id", "amount_minor": "value.amount"}}, "params.columns.amount_minor: table '"),
    ],
)
def test_a_table_or_column_that_does_not_exist_is_named(
    postgres_url: str, table: str, change: dict[str, Any], named: str
) -> None:
    app = sink_app(postgres_url, table)
    app["processors"][0]["params"].update(change)
    with tempfile.TemporaryDirectory() as state, pytest.raises(StopAfterCommit, match=named):
        AppDriver(app, state_dir=Path(state))


def test_a_value_its_column_cannot_take_is_a_poison_row_for_the_policy(postgres_url: str, table: str) -> None:
    with (
        tempfile.TemporaryDirectory() as state,
        AppDriver(sink_app(postgres_url, table), state_dir=Path(state)) as driver,
    ):
        driver.pipe_all("payments", [("acc-1", {"id": "p-1", "amount": 5}), ("acc-1", {"id": "p-2", "amount": "5"}),
                                     ("acc-1", {"id": "p-3"}), ("acc-1", {"id": "p-4", "amount": 7})])  # fmt: skip
        wrong_type, missing = driver.dead_letters()
    assert wrong_type.message == "column 'amount' (bigint) takes an integer, not str '5'"
    assert missing.message == "the record's value has no field 'amount'"
    assert [row["id"] for row in query(postgres_url, f"SELECT id FROM {table} ORDER BY id")] == ["p-1", "p-4"]


def test_a_database_that_goes_away_is_waited_for_and_nothing_is_lost(tmp_path: Path) -> None:
    with throwaway() as server:
        query(server.url, "CREATE TABLE payments_gone (id text, account text, amount bigint, seen timestamptz)")
        with AppDriver(sink_app(server.url, "payments_gone"), state_dir=tmp_path / "state") as driver:
            driver.pipe_all("payments", payments(50))
            server.stop()
            restart = threading.Timer(2.0, server.start)
            restart.start()
            driver.pipe_all("payments", payments(50, start=50))  # its commit waits for the database
            restart.join()
            assert driver.count("sink", "database_retries") >= 1
        rows = query(server.url, "SELECT count(*) AS rows, count(DISTINCT id) AS ids FROM payments_gone")
        assert (rows[0]["rows"], rows[0]["ids"]) == (100, 100)


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_kills_under_load_leave_every_row_in_the_table_exactly_once(
    kafka_bootstrap: str, postgres_url: str, table: str, topic_name: TopicNamer, tmp_path: Path, guarantee: str
) -> None:
    records = 40_000
    topic = topic_name("payments")
    asyncio.run(create_topic(kafka_bootstrap, topic, 3))
    encoded = [(key.encode(), msgpack.packb(value)) for key, value in payments(records)]
    asyncio.run(produce(kafka_bootstrap, topic, encoded))
    app = sink_app(postgres_url, table, batch_size=300)  # written between commits too: the database runs ahead
    app["app_id"] = topic_name("app")
    app["topics"] = {topic: {"partitions": 3, "key_serde": "str", "value_serde": "msgpack"}}
    app["processors"][0].update({"class": "tests.support.apps:SlowPostgresSink", "inputs": [topic]})
    app.update({"guarantee": guarantee, "state_dir": str(tmp_path / "state"), "commit_interval_ms": 1000,
                "kafka": {"bootstrap_servers": kafka_bootstrap, "consumer": FAST_FAILOVER},
                "errors": {"processing": "fail"}})  # fmt: skip
    path = write_app(tmp_path, app)
    committed = asyncio.run(kill_and_replace(path, kafka_bootstrap, app["app_id"], tmp_path, seed=len(guarantee)))
    assert 0 < committed < records  # the kills landed while it wrote
    asyncio.run(Worker(parse_app(app), kafka_bootstrap, until_caught_up=True).run())
    rows = query(postgres_url, f"SELECT count(*) AS rows, count(DISTINCT id) AS ids, sum(amount) AS total FROM {table}")
    assert (rows[0]["rows"], rows[0]["ids"], rows[0]["total"]) == (records, records, sum(range(records)))
