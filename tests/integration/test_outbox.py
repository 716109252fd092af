"""The transactional outbox against a real PostgreSQL and a real Kafka: rows shipped in id order, each
exactly once, with concurrent writers whose transactions commit out of id order, with the poller
killed -9 again and again, and with three workers of which one at a time runs it."""

from __future__ import annotations

import asyncio
import datetime
import itertools
import json
import random
import signal
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from runtime.config import parse_app
from runtime.devpostgres.server import throwaway
from runtime.worker.worker import Worker
from tests.conftest import TopicNamer
from tests.support.kafka_helpers import read_topic
from tests.support.kills import FAST_FAILOVER
from tests.support.running import spawn_worker, until, write_app

KEYS = 7


def outbox_app(name: TopicNamer, dsn: str, table: str, settle_ms: int, state: Path) -> dict[str, Any]:
    events, copies = name("order-events"), name("order-copies")
    topic = {"partitions": 3, "key_serde": "str", "value_serde": "json"}
    return {
        "app_id": name("orders"),
        "topics": {events: topic, copies: topic},
        "outboxes": {"orders": {"dsn": dsn, "table": table, "topic": events, "key_column": "aggregate",
                                "value_column": "payload", "headers_column": "headers", "settle_ms": settle_ms,
                                "poll_interval_ms": 20, "batch_size": 500}},
        "processors": [{"name": "copy", "class": "tests.support.apps:Echo", "inputs": [events], "outputs": [copies],
                        "params": {"output": copies}}],
        "state_dir": str(state),
    }  # fmt: skip


async def create_outbox(dsn: str) -> str:
    table = f"outbox_{uuid.uuid4().hex[:8]}"
    connection = await asyncpg.connect(dsn)
    try:
        columns = ("id bigserial PRIMARY KEY, aggregate text NOT NULL, payload jsonb NOT NULL, headers jsonb, "
                   "created_at timestamptz NOT NULL DEFAULT clock_timestamp()")  # fmt: skip
        await connection.execute(f"CREATE TABLE {table} ({columns})")
    finally:
        await connection.close()
    return table


async def write_orders(dsn: str, table: str, first: int, count: int, pause_s: float = 0.0) -> None:
    """`count` orders, one database transaction each (a row per order, keyed by its aggregate)."""
    connection = await asyncpg.connect(dsn)
    try:
        for n in range(first, first + count):
            await connection.execute(
                f"INSERT INTO {table} (aggregate, payload, headers) VALUES ($1, $2, $3)",
                f"order-{n % KEYS}", json.dumps({"n": n}), json.dumps({"source": "orders-service"}),
            )  # fmt: skip
            if pause_s:
                await asyncio.sleep(pause_s)
    finally:
        await connection.close()


async def slow_transaction(dsn: str, table: str, n: int, holds_s: float) -> None:
    """An order whose id is handed out at once but whose transaction commits `holds_s` later."""
    connection = await asyncpg.connect(dsn)
    try:
        async with connection.transaction():
            await connection.execute(f"INSERT INTO {table} (aggregate, payload) VALUES ($1, $2)", "order-slow",
                                     json.dumps({"n": n}))  # fmt: skip
            await asyncio.sleep(holds_s)
    finally:
        await connection.close()


async def shipped(bootstrap: str, topic: str) -> list[Any]:
    return await read_topic(bootstrap, topic)  # read_committed


async def ids_by_number(dsn: str, table: str) -> dict[int, int]:
    connection = await asyncpg.connect(dsn)
    try:
        return {json.loads(row["payload"])["n"]: row["id"] for row in await connection.fetch(f"SELECT * FROM {table}")}
    finally:
        await connection.close()


def check_each_once_in_order(records: list[Any], ids: dict[int, int]) -> None:
    """Every row once, and each key's rows in the order of their ids."""
    numbers = [json.loads(r.value)["n"] for r in records]
    assert sorted(numbers) == sorted(ids), (len(numbers), len(ids))
    by_key: dict[bytes, list[int]] = defaultdict(list)
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        by_key[record.key].append(ids[json.loads(record.value)["n"]])
    for key, in_order in by_key.items():
        assert in_order == sorted(in_order), key


@pytest.mark.parametrize("settle_ms", [0, 1_500])
def test_a_transaction_that_commits_after_later_ids_is_shipped_only_with_a_settle_window(
    kafka_bootstrap: str, postgres_url: str, topic_name: TopicNamer, tmp_path: Path, settle_ms: int
) -> None:
    table = asyncio.run(create_outbox(postgres_url))
    app = outbox_app(topic_name, postgres_url, table, settle_ms, tmp_path / "state")
    events = next(iter(app["topics"]))

    async def scenario() -> list[Any]:
        worker = Worker(parse_app(app), kafka_bootstrap)
        running = asyncio.create_task(worker.run())
        await write_orders(postgres_url, table, 100, 1)  # shipped once the poller runs
        for _ in range(300):
            if await shipped(kafka_bootstrap, events):
                break
            await asyncio.sleep(0.1)
        slow = asyncio.create_task(slow_transaction(postgres_url, table, 0, holds_s=1.5))  # an id before the rest
        await asyncio.sleep(0.1)
        await write_orders(postgres_url, table, 1, 50, pause_s=0.01)  # later ids, committed first
        await slow
        await asyncio.sleep(settle_ms / 1000 + 2.0)
        worker.stop()
        await running
        return await shipped(kafka_bootstrap, events)

    records = asyncio.run(scenario())
    numbers = {json.loads(r.value)["n"] for r in records}
    assert set(range(1, 51)) <= numbers
    if settle_ms == 0:
        assert 0 not in numbers  # the seed's problem: the poller moved past the slow transaction's id
    else:
        check_each_once_in_order(records, asyncio.run(ids_by_number(postgres_url, table)))
        assert all(dict(r.headers).get("source") == b"orders-service" for r in records if json.loads(r.value)["n"])


def test_every_row_reaches_kafka_exactly_once_through_kills_of_the_poller(
    kafka_bootstrap: str, postgres_url: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    table = asyncio.run(create_outbox(postgres_url))
    app = outbox_app(topic_name, postgres_url, table, 200, tmp_path / "state")
    app["kafka"] = {"bootstrap_servers": kafka_bootstrap, "consumer": FAST_FAILOVER}
    app["singletons"] = {"session_timeout_ms": FAST_FAILOVER["session_timeout_ms"]}
    path = write_app(tmp_path, app)
    events = next(iter(app["topics"]))
    rows, rng = 6_000, random.Random(11)

    async def scenario() -> list[Any]:
        writers = [asyncio.create_task(write_orders(postgres_url, table, w * rows // 3, rows // 3, pause_s=0.001))
                   for w in range(3)]  # fmt: skip
        logs = iter(tmp_path / f"worker{n}.log" for n in range(10))
        worker = spawn_worker(path, log=next(logs))
        for _ in range(5):
            await asyncio.sleep(rng.uniform(1.0, 2.5))
            assert worker.poll() is None, "the worker exited by itself"
            worker.send_signal(signal.SIGKILL)
            worker.wait()
            worker = spawn_worker(path, log=next(logs))
        await asyncio.gather(*writers)
        deadline = asyncio.get_running_loop().time() + 60
        while len(records := await shipped(kafka_bootstrap, events)) < rows:
            assert asyncio.get_running_loop().time() < deadline, f"{len(records)} of {rows} rows shipped"
            await asyncio.sleep(0.5)
        await asyncio.sleep(1.0)  # nothing more comes
        worker.send_signal(signal.SIGTERM)
        worker.wait()
        return await shipped(kafka_bootstrap, events)

    records = asyncio.run(scenario())
    check_each_once_in_order(records, asyncio.run(ids_by_number(postgres_url, table)))


def test_a_settled_row_waits_for_an_earlier_id_that_has_not_settled(
    kafka_bootstrap: str, postgres_url: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    table = asyncio.run(create_outbox(postgres_url))
    app = outbox_app(topic_name, postgres_url, table, 3_000, tmp_path / "state")
    events = next(iter(app["topics"]))

    async def scenario() -> tuple[list[Any], list[Any]]:
        connection = await asyncpg.connect(postgres_url)
        try:  # id 1 written now; id 2 written as if an hour ago (a transaction's time can come before an id's)
            insert = f"INSERT INTO {table} (aggregate, payload, created_at) VALUES ($1, $2, $3)"
            now = await connection.fetchval("SELECT now()")
            await connection.execute(insert, "a", json.dumps({"n": 1}), now)
            await connection.execute(insert, "b", json.dumps({"n": 2}), now - datetime.timedelta(hours=1))
        finally:
            await connection.close()
        worker = Worker(parse_app(app), kafka_bootstrap)
        running = asyncio.create_task(worker.run())
        await asyncio.sleep(1.5)
        early = await shipped(kafka_bootstrap, events)
        await asyncio.sleep(3.5)
        worker.stop()
        await running
        return early, await shipped(kafka_bootstrap, events)

    early, late = asyncio.run(scenario())
    assert early == []  # id 2 has settled, but id 1 comes first and has not
    assert [json.loads(r.value)["n"] for r in late] == [1, 2]


def test_a_database_that_goes_away_is_waited_for_and_no_row_is_lost_or_shipped_twice(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    with throwaway() as server:
        table = asyncio.run(create_outbox(server.url))
        app = outbox_app(topic_name, server.url, table, 200, tmp_path / "state")
        events = next(iter(app["topics"]))

        async def scenario() -> list[Any]:
            worker = Worker(parse_app(app), kafka_bootstrap)
            running = asyncio.create_task(worker.run())
            await write_orders(server.url, table, 0, 100)
            await asyncio.sleep(1.0)
            await asyncio.to_thread(server.stop)  # the poller's reads fail now, and are retried
            await asyncio.sleep(2.0)
            await asyncio.to_thread(server.start)
            await write_orders(server.url, table, 100, 100)
            for _ in range(100):
                if len(await shipped(kafka_bootstrap, events)) >= 200:
                    break
                await asyncio.sleep(0.2)
            await asyncio.sleep(1.0)
            worker.stop()
            await running
            return await shipped(kafka_bootstrap, events)

        records = asyncio.run(scenario())
        check_each_once_in_order(records, asyncio.run(ids_by_number(server.url, table)))


def test_text_ids_in_order_and_shipped_rows_deleted(
    kafka_bootstrap: str, postgres_url: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    """ULIDs in a text column (they sort as they were made), and `delete_shipped`: each row shipped once, then gone."""
    table = f"ulid_outbox_{uuid.uuid4().hex[:8]}"
    app = outbox_app(topic_name, postgres_url, table, 0, tmp_path / "state")
    app["outboxes"]["orders"]["delete_shipped"] = True
    events = next(iter(app["topics"]))
    ulids = sorted(f"01J{n:023d}" for n in range(300))  # 26 characters, in the order they are written

    async def scenario() -> tuple[list[Any], int]:
        connection = await asyncpg.connect(postgres_url)
        try:
            columns = ("id text PRIMARY KEY, aggregate text NOT NULL, payload jsonb NOT NULL, headers jsonb, "
                       "created_at timestamptz DEFAULT clock_timestamp()")  # fmt: skip
            await connection.execute(f"CREATE TABLE {table} ({columns})")
            insert = f"INSERT INTO {table} (id, aggregate, payload) VALUES ($1, $2, $3)"
            await connection.executemany(insert, [(u, f"order-{n % KEYS}", json.dumps({"n": n}))
                                                  for n, u in enumerate(ulids[:150])])  # fmt: skip
            worker = Worker(parse_app(app), kafka_bootstrap)
            running = asyncio.create_task(worker.run())
            await asyncio.sleep(2.0)
            await connection.executemany(insert, [(u, f"order-{n % KEYS}", json.dumps({"n": n}))
                                                  for n, u in enumerate(ulids[150:], start=150)])  # fmt: skip
            for _ in range(100):
                if len(await shipped(kafka_bootstrap, events)) >= 300:
                    break
                await asyncio.sleep(0.2)
            await asyncio.sleep(1.0)  # the next round deletes what the last one shipped
            worker.stop()
            await running
            left = await connection.fetchval(f"SELECT count(*) FROM {table}")
        finally:
            await connection.close()
        return await shipped(kafka_bootstrap, events), left

    records, left = asyncio.run(scenario())
    check_each_once_in_order(records, {n: n for n in range(300)})  # n is the order of its ULID
    assert left == 0


RUNS, STOPS = "this process runs it now", ("stopped here", "fenced by another process")


def poller_runs(log: Path, killed_at: float | None) -> list[tuple[float, float]]:
    """(from, to) of each run of the outbox poller in one worker, by its JSON log lines' times: from its
    election to its stop (or to `killed_at`, or for ever)."""
    runs: list[tuple[float, float]] = []
    started: float | None = None
    for line in log.read_text().splitlines() if log.exists() else []:
        if not line.startswith("{"):
            continue
        entry = json.loads(line)
        at = datetime.datetime.fromisoformat(entry["time"]).timestamp()
        if "outbox poller" not in entry["message"]:
            continue
        if RUNS in entry["message"]:
            assert started is None, f"{log.name}: elected twice without stopping in between"
            started = at
        elif any(stop in entry["message"] for stop in STOPS) and started is not None:
            runs.append((started, at))
            started = None
    if started is not None:
        runs.append((started, killed_at or float("inf")))
    return runs


def elected(log: Path) -> bool | None:
    """Whether the worker's last election made it the poller's runner; None before its first."""
    last = None
    for line in log.read_text().splitlines() if log.exists() else []:
        if "outbox poller" in line and RUNS in line:
            last = True
        elif "outbox poller" in line and "stands by" in line:
            last = False
    return last


def test_of_three_workers_one_at_a_time_runs_the_poller_and_a_standby_takes_over_from_one_killed(
    kafka_bootstrap: str, postgres_url: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    table = asyncio.run(create_outbox(postgres_url))
    app = outbox_app(topic_name, postgres_url, table, 200, tmp_path / "state")
    app["kafka"] = {"bootstrap_servers": kafka_bootstrap}
    app["singletons"] = {"session_timeout_ms": 3000}
    path = write_app(tmp_path, app)
    events = next(iter(app["topics"]))
    logs = [tmp_path / f"worker{n}.log" for n in range(3)]

    async def scenario() -> tuple[int, float]:
        workers = [spawn_worker(path, "--log-format", "json", log=log) for log in logs]
        await until(lambda: all(elected(log) is not None for log in logs), "all three workers stood for election")
        await until(lambda: [elected(log) for log in logs].count(True) == 1, "one worker runs the poller", 30)
        await write_orders(postgres_url, table, 0, 20)
        writer = asyncio.create_task(write_orders(postgres_url, table, 20, 40, pause_s=0.05))
        deadline = time.monotonic() + 60
        while len(records := await shipped(kafka_bootstrap, events)) < 20:
            assert time.monotonic() < deadline, f"{len(records)} of 20 rows shipped"
            await asyncio.sleep(0.2)
        owner = next(n for n, log in enumerate(logs) if elected(log))
        assert all(worker.poll() is None for worker in workers), "a worker exited by itself"
        workers[owner].send_signal(signal.SIGKILL)
        killed_at = time.time()
        workers[owner].wait()
        await writer
        deadline = time.monotonic() + 60
        while len(records := await shipped(kafka_bootstrap, events)) < 60:
            assert time.monotonic() < deadline, f"{len(records)} of 60 rows shipped after the kill"
            await asyncio.sleep(0.5)
        for n, worker in enumerate(workers):
            if n != owner:
                worker.send_signal(signal.SIGTERM)
                assert worker.wait(timeout=60) == 0
        return owner, killed_at

    owner, killed_at = asyncio.run(scenario())
    runs = sorted((run, n) for n, log in enumerate(logs) for run in poller_runs(log, killed_at if n == owner else None))
    for (earlier, by), (later, _) in itertools.pairwise(runs):
        assert earlier[1] <= later[0], f"worker {by} still ran the poller when another started it: {runs}"
    takeovers = [n for (began, _), n in runs if began > killed_at]
    # Another took over; a rebalance of the election (a standby's heartbeat late on a loaded machine) may
    # stop and start it again on the same or another process, never two at once (checked above).
    assert takeovers and owner not in takeovers, f"after the kill of worker {owner}: {runs}"
    check_each_once_in_order(
        asyncio.run(shipped(kafka_bootstrap, events)), asyncio.run(ids_by_number(postgres_url, table))
    )
