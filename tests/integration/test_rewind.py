"""Rewind after a bug fix (seed 004) against a real broker: an app checkpoints, a buggy version of it runs
on, the bug is fixed and the app rewound to the checkpoint; processing again gives the state of the fixed
code over the whole input, exactly, under exactly-once, and so does a restore from nothing after it; and
the tables its sinks wrote in a real PostgreSQL, as a clean run of the fixed code writes them."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg
import msgpack
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

from runtime.config import parse_app
from runtime.rewind.catalog import checkpoints
from stores.rocksdb import RocksDBBackend
from stores.snapshot import ingest_partition
from tests.conftest import TopicNamer
from tests.integration.test_state import counting_app, true_counts
from tests.support.kafka_helpers import committed_offsets, create_topic, produce, read_topic
from tests.support.kills import FAST_FAILOVER, kill_and_replace
from tests.support.running import REPO, numbered, spawn_worker, write_app

PARTITIONS = 3


def runtime(bootstrap: str, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "runtime", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout_s, check=False)  # fmt: skip


def latest(bootstrap: str, topic: str, decode: Any) -> dict[Any, Any]:
    """Each key's last value, in offset order (read committed)."""
    found: dict[Any, Any] = {}
    for record in asyncio.run(read_topic(bootstrap, topic)):
        found[decode(record.key)] = None if record.value is None else msgpack.unpackb(record.value)
    return found


def wait_until_committed(bootstrap: str, group: str, topic: str, total: int) -> None:
    deadline = time.monotonic() + 60
    while sum(o for (t, _), o in asyncio.run(committed_offsets(bootstrap, group)).items() if t == topic) < total:
        assert time.monotonic() < deadline, "the app did not catch up"
        time.sleep(0.2)


def checkpointing_app(
    bootstrap: str, topic_name: TopicNamer, tmp_path: Path, **snapshots: Any
) -> tuple[dict[str, Any], str, str]:
    """The counting app under exactly-once with a snapshot location (and `snapshots`' other settings), its
    input and output topics created: (app, input, output)."""
    source, sink = topic_name("in"), topic_name("out")
    for topic in (source, sink):
        asyncio.run(create_topic(bootstrap, topic, PARTITIONS))
    app = counting_app(topic_name("app"), source, sink, PARTITIONS, tmp_path / "state", "rocksdb")
    app |= {"guarantee": "exactly_once", "commit_interval_ms": 100, "kafka": {"bootstrap_servers": bootstrap},
            "snapshots": {"location": str(tmp_path / "checkpoints"), **snapshots}}  # fmt: skip
    return app, source, sink


def test_a_fixed_app_rewound_to_its_checkpoint_ends_as_if_the_bug_never_ran(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    app, source, sink = checkpointing_app(kafka_bootstrap, topic_name, tmp_path)
    fixed = write_app(tmp_path, app, "fixed.yaml")
    app["processors"][0]["class"] = "tests.support.apps:DoubleCountPerKey"
    buggy = write_app(tmp_path, app, "buggy.yaml")
    changelog = f"{app['app_id']}-counts-changelog"

    # The correct code runs over the first 3,000 records, and checkpoints.
    asyncio.run(produce(kafka_bootstrap, source, numbered(3_000)))
    worker = spawn_worker(fixed, log=tmp_path / "fixed.log")
    wait_until_committed(kafka_bootstrap, app["app_id"], source, 3_000)
    refused = runtime(kafka_bootstrap, "rewind", str(fixed), "--to-time", "2100-01-01")
    assert refused.returncode == 1 and "active member" in refused.stderr, refused.stderr  # a worker runs
    asked = runtime(kafka_bootstrap, "checkpoint", str(fixed), "--timeout", "60")
    assert asked.returncode == 0, asked.stderr + (tmp_path / "fixed.log").read_text()
    name = asked.stdout.strip()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(60) == 0

    # A buggy version runs over the next 3,000: keys ending in 7 are counted twice.
    asyncio.run(produce(kafka_bootstrap, source, numbered(3_000, start=3_000)))
    assert runtime(kafka_bootstrap, str(buggy), "--until-caught-up").returncode == 0
    wrong = latest(kafka_bootstrap, sink, bytes.decode)
    assert wrong != {key: {"count": count} for key, count in true_counts(6_000).items()}
    assert wrong["k7"]["count"] > true_counts(6_000)["k7"]

    # Fixed, rewound to the checkpoint, and run again over what came after it.
    plan = runtime(kafka_bootstrap, "rewind", str(fixed), "--to", name, "--dry-run")
    assert plan.returncode == 0 and "dry run: nothing was changed" in plan.stdout, plan.stderr
    done = runtime(kafka_bootstrap, "rewind", str(fixed), "--to", name)
    assert done.returncode == 0, done.stderr
    assert f"rewind consumer group {app['app_id']} to checkpoint {name}" in done.stdout
    assert runtime(kafka_bootstrap, str(fixed), "--until-caught-up").returncode == 0
    counts = {key: update["count"] for key, update in latest(kafka_bootstrap, sink, bytes.decode).items()}
    assert counts == true_counts(6_000)
    # The changelog holds the fixed state too: a restore from it cannot bring the bug's counts back.
    assert latest(kafka_bootstrap, changelog, msgpack.unpackb) == true_counts(6_000)

    # The local state deleted: restored from the snapshot the rewind left and the changelog, one more record
    # per key.
    shutil.rmtree(tmp_path / "state")
    asyncio.run(produce(kafka_bootstrap, source, numbered(97, start=6_000)))
    restored = runtime(kafka_bootstrap, str(fixed), "--until-caught-up")
    carried = done.stdout.split("to restore from without the changelog's tail: ")[1].split()[0]
    assert restored.returncode == 0 and f"ingesting snapshot {carried} " in restored.stderr  # the rewind's own
    counts = {key: update["count"] for key, update in latest(kafka_bootstrap, sink, bytes.decode).items()}
    assert counts == true_counts(6_097)
    recorded = [json.loads(r.value) for r in asyncio.run(read_topic(kafka_bootstrap, f"{app['app_id']}-rewinds"))]
    assert [record["checkpoint"] for record in recorded] == [name]

    # Once retention deleted input the checkpoint would process again, it is refused.
    asyncio.run(delete_records(kafka_bootstrap, source, 1_500))
    gone = runtime(kafka_bootstrap, "rewind", str(fixed), "--to", name)
    assert gone.returncode == 1 and "needs input that retention deleted" in gone.stderr, gone.stderr


async def delete_records(bootstrap: str, topic: str, below: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_records({TopicPartition(topic, p): RecordsToDelete(below) for p in range(PARTITIONS)})
    finally:
        await admin.close()


def query(url: str, sql: str) -> list[dict[str, Any]]:
    async def fetch() -> list[dict[str, Any]]:
        connection = await asyncpg.connect(url)
        try:
            return [dict(row) for row in await connection.fetch(sql)]
        finally:
            await connection.close()

    return asyncio.run(fetch())


def payments(count: int, start: int = 0) -> list[tuple[bytes, bytes]]:
    """Keyed `k<n % 97>`, with the `n` the counting processor reads and the `amount` the sinks write."""
    return [(f"k{n % 97}".encode(), msgpack.packb({"n": n, "amount": n})) for n in range(start, start + count)]


def with_sinks(app: dict[str, Any], source: str, dsn: str, tables: dict[str, str], buggy: bool) -> dict[str, Any]:
    """The app with three writers of `source` to PostgreSQL, each writing amounts ten times over for keys ending
    in 7 when `buggy`: a PostgresSink inserting a row per record, one upserting the latest per key, and a
    processor of its own writing by idempotency key."""
    sink = {"class": "tests.support.apps:AmountSink", "inputs": [source]}
    ledger = {
        "table": tables["ledger"],
        "mode": "insert",
        "buggy": buggy,
        "columns": {"part": "partition", "position": "offset", "account": "key", "amount": "value.amount"},
    }
    latest = {
        "table": tables["latest"],
        "mode": "upsert",
        "key_columns": ["account"],
        "buggy": buggy,
        "columns": {"account": "key", "amount": "value.amount"},
    }
    own = {"dsn": dsn, "table": tables["keyed"], "buggy": buggy}
    return app | {"processors": [*app["processors"], {**sink, "name": "ledger", "params": {**ledger, "dsn": dsn}},
                                 {**sink, "name": "latest", "params": {**latest, "dsn": dsn}},
                                 {"name": "keyed", "class": "tests.support.apps:LedgerWriter", "inputs": [source],
                                  "params": own}]}  # fmt: skip


def create_tables(dsn: str, suffix: str) -> dict[str, str]:
    tables = {name: f"{name}_{suffix}" for name in ("ledger", "latest", "keyed")}
    query(dsn, f"CREATE TABLE {tables['ledger']} (part integer, position bigint, account text, amount bigint)")
    query(dsn, f"CREATE TABLE {tables['latest']} (account text PRIMARY KEY, amount bigint)")
    query(dsn, f"CREATE TABLE {tables['keyed']} (idempotency_key text PRIMARY KEY, account text, amount bigint)")
    return tables


def table_rows(dsn: str, tables: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    return {name: query(dsn, f"SELECT * FROM {table} ORDER BY 1, 2") for name, table in tables.items()}


def test_a_rewind_after_a_buggy_postgres_sink_leaves_the_tables_of_a_clean_run_of_the_fixed_code(
    kafka_bootstrap: str, postgres_url: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    app, source, _ = checkpointing_app(kafka_bootstrap, topic_name, tmp_path)
    suffix = uuid.uuid4().hex[:8]
    tables = create_tables(postgres_url, suffix)
    fixed = write_app(tmp_path, with_sinks(app, source, postgres_url, tables, buggy=False), "fixed.yaml")
    buggy = write_app(tmp_path, with_sinks(app, source, postgres_url, tables, buggy=True), "buggy.yaml")

    # The fixed code over the first 150 records, and a checkpoint; the buggy one over the next 150.
    asyncio.run(produce(kafka_bootstrap, source, payments(150)))
    worker = spawn_worker(fixed, log=tmp_path / "fixed.log")
    wait_until_committed(kafka_bootstrap, app["app_id"], source, 150)
    asked = runtime(kafka_bootstrap, "checkpoint", str(fixed), "--timeout", "60")
    assert asked.returncode == 0, asked.stderr + (tmp_path / "fixed.log").read_text()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(60) == 0
    asyncio.run(produce(kafka_bootstrap, source, payments(150, start=150)))
    assert runtime(kafka_bootstrap, str(buggy), "--until-caught-up").returncode == 0
    wrong = table_rows(postgres_url, tables)
    assert max(row["amount"] for row in wrong["ledger"]) == 2_980  # record 298 (k7), ten times over

    # Rewound to the checkpoint, each sink's positions go back with the group's offsets, and the fixed code
    # writes the records after the checkpoint again.
    done = runtime(kafka_bootstrap, "rewind", str(fixed), "--to", asked.stdout.strip())
    assert done.returncode == 0, done.stderr
    moved = [line.strip() for line in done.stdout.splitlines() if line.strip().startswith("sink ")]
    assert len(moved) == 2 * PARTITIONS, done.stdout  # one line per sink and partition
    assert all(f"{source}[" in line for line in moved)
    assert sum("rows they wrote deleted" in line for line in moved) == PARTITIONS  # the insert mode's
    assert sum("replaced by key (upsert)" in line for line in moved) == PARTITIONS
    assert runtime(kafka_bootstrap, str(fixed), "--until-caught-up").returncode == 0
    rewound = table_rows(postgres_url, tables)

    # A clean run of the fixed code, another app over the same input, into tables of its own.
    clean_tables = create_tables(postgres_url, f"clean_{suffix}")
    clean_app = {key: value for key, value in app.items() if key != "snapshots"} | {"app_id": f"{app['app_id']}-clean"}
    clean = write_app(tmp_path, with_sinks(clean_app, source, postgres_url, clean_tables, buggy=False), "clean.yaml")
    assert runtime(kafka_bootstrap, str(clean), "--until-caught-up").returncode == 0
    expected = table_rows(postgres_url, clean_tables)
    assert len(expected["ledger"]) == len(expected["keyed"]) == 300 and len(expected["latest"]) == 97
    assert rewound == expected
    for table in (*tables.values(), *clean_tables.values()):
        query(postgres_url, f"DROP TABLE {table}")


def test_checkpoints_taken_every_second_while_workers_are_killed_hold_exactly_their_input_offsets_state(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    app, source, _ = checkpointing_app(kafka_bootstrap, topic_name, tmp_path, every="1s", keep=1000)
    app["kafka"]["consumer"] = FAST_FAILOVER
    app["processors"][0]["class"] = "tests.support.apps:SlowCountPerKey"
    path = write_app(tmp_path, app)
    asyncio.run(produce(kafka_bootstrap, source, numbered(12_000)))
    asyncio.run(kill_and_replace(path, kafka_bootstrap, app["app_id"], tmp_path, seed=4, kills=3))
    assert runtime(kafka_bootstrap, str(path), "--until-caught-up").returncode == 0  # and more checkpoints
    inputs: dict[int, list[str]] = {}  # partition -> its records' keys in offset order
    for record in asyncio.run(read_topic(kafka_bootstrap, source)):
        inputs.setdefault(record.partition, []).append(record.key.decode())
    found = checkpoints(parse_app(app))
    assert len(found) >= 3, f"only {len(found)} complete checkpoints"
    for checkpoint in found:
        manifest, directory = checkpoint.manifests["counts"], tmp_path / "checkpoints" / "counts" / checkpoint.name
        for partition in range(PARTITIONS):
            upto = manifest.input_offsets[partition][source]
            expected = Counter(inputs.get(partition, [])[:upto])
            held = {msgpack.unpackb(key): msgpack.unpackb(value)
                    for key, value in snapshot_rows(directory, manifest, partition)}  # fmt: skip
            assert held == dict(expected), f"checkpoint {checkpoint.name} partition {partition} (up to {upto})"


def snapshot_rows(directory: Path, manifest: Any, partition: int) -> list[tuple[bytes, bytes]]:
    store = RocksDBBackend(directory.parent / f".check-{directory.name}-{partition}")
    try:
        ingest_partition(store, directory, manifest, partition)
        return list(store.items())
    finally:
        store.close()
