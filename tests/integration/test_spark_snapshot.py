"""The Spark snapshot job over a real changelog: updates, deletes, and committed and aborted transactions."""

from __future__ import annotations

import json
import random
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import msgpack
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions

from runtime.commands import reset
from runtime.devkafka import LocalBroker
from runtime.devs3.server import LocalS3
from runtime.worker.worker import Worker
from stores import BufferedKeyValueStore, ReadOnlyView
from stores.partitioner import partition_for
from stores.rocksdb import RocksDBBackend
from stores.serdes import JsonSerde, StrSerde
from stores.snapshot import ingest_partition, read_manifest, validate, verify_checksums
from stores.spark.__main__ import main
from stores.spark.bootstrap import bootstrap, read_source
from stores.spark.changelog_seed import ChangelogSeed
from stores.spark.repartition import repartition
from stores.spark.s3a import S3ASettings
from stores.spark.session import spark_session
from stores.spark.snapshot import snapshot
from tests.conftest import TopicNamer
from tests.integration.test_global_stores import STORE as GLOBAL_STORE
from tests.integration.test_global_stores import Names, acquirer_of, prepare, router_app, rows
from tests.integration.test_window_stores import KINDS as TIMED_KINDS
from tests.integration.test_window_stores import PARTITIONS as TIMED_PARTITIONS
from tests.integration.test_window_stores import app as timed_app
from tests.integration.test_window_stores import run_until_caught_up, stored, timed_records
from tests.support.kafka_helpers import create_topic, produce, read_topic
from tests.support.running import write_app
from tests.support.snapshots import (
    PARTITIONS as STORE_PARTITIONS,
)
from tests.support.snapshots import (
    STORE,
    changes,
    latest_per_partition,
    restore_only,
    snapshot_app,
    store_contents,
)

PARTITIONS = 3


@pytest.fixture(scope="module")
def _stop_spark_after_module() -> Iterator[None]:
    yield
    spark_session("stores-spark-integration-tests", "local[2]", kafka=True).stop()


@pytest.fixture
def spark(_stop_spark_after_module: None, object_store: LocalS3) -> Any:
    """The active session, made again if a test stopped it (the CLI stops the session it used). It reaches
    the session's object store, through S3A (whose jars join the classpath only when the JVM starts)."""
    reaching = S3ASettings.from_environment(object_store.environment())
    session = spark_session("stores-spark-integration-tests", "local[2]", kafka=True, object_store=reaching)
    session.sparkContext.setLogLevel("ERROR")
    return session


async def _transactions(bootstrap: str, topic: str, committed: list[tuple[bytes, bytes | None]]) -> None:
    """One committed transaction, then one aborted: its writes must not reach the snapshot."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}-writer")
    await producer.start()
    try:
        async with producer.transaction():
            for key, value in committed:
                await producer.send(topic, value, key=key)
        await producer.begin_transaction()
        for key, _ in committed:
            await producer.send(topic, b"aborted", key=key)
        await producer.send(topic, b"aborted", key=b"only-aborted")
        await producer.abort_transaction()
    finally:
        await producer.stop()


def _changelog(seed: int) -> list[tuple[bytes, bytes | None]]:
    """Puts, overwrites and deletes (tombstones) of 300 keys, some deleted and written again."""
    generator = random.Random(seed)
    records: list[tuple[bytes, bytes | None]] = []
    for step in range(3000):
        key = f"key-{generator.randrange(300)}".encode()
        records.append((key, None if generator.random() < 0.2 else f"value-{step}".encode()))
    return records


def test_snapshot_equals_the_latest_value_per_key(
    spark: Any, kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    topic = topic_name("balances-changelog")

    async def fill() -> None:
        await create_topic(kafka_bootstrap, topic, PARTITIONS, {"cleanup.policy": "compact"})
        await produce(kafka_bootstrap, topic, _changelog(1))
        await _transactions(kafka_bootstrap, topic, _changelog(2)[:200])

    anyio.run(fill)
    records = anyio.run(read_topic, kafka_bootstrap, topic)
    latest: dict[int, dict[bytes, bytes | None]] = {}
    ends: dict[int, int] = {}
    for record in records:
        assert record.key is not None
        latest.setdefault(record.partition, {})[record.key] = record.value
        ends[record.partition] = record.offset
    expected = {
        partition: sorted((key, value) for key, value in values.items() if value is not None)
        for partition, values in latest.items()
    }
    assert all(value != b"aborted" for values in latest.values() for value in values.values())

    result = snapshot(
        spark,
        bootstrap_servers=kafka_bootstrap,
        topic=topic,
        app="bank",
        store="balances",
        partitions=PARTITIONS,
        key_serde="bytes",
        value_serde="bytes",
        out=tmp_path / "snap",
    )

    manifest = read_manifest(tmp_path / "snap")
    validate(manifest, "bank", "balances", PARTITIONS, "bytes", "bytes")
    verify_checksums(tmp_path / "snap", manifest)
    assert manifest.changelog_topic == topic
    assert result.records_read == len(records)
    assert result.rows_written == sum(len(rows) for rows in expected.values())
    for partition in range(PARTITIONS):
        # The end offset is past the last committed record (and the aborted transaction's records and markers).
        assert manifest.changelog_offsets[partition] > ends.get(partition, -1)
        backend = RocksDBBackend(tmp_path / f"db-{partition}")
        try:
            offset = ingest_partition(backend, tmp_path / "snap", read_manifest(tmp_path / "snap"), partition)
            assert offset == manifest.changelog_offsets[partition]
            assert list(backend.items()) == expected.get(partition, [])
            assert backend.changelog_offset() == offset
        finally:
            backend.close()

    # The command line runs the same job (and stops the session it used).
    argv = ["snapshot", f"--bootstrap-servers={kafka_bootstrap}", f"--topic={topic}", "--app=bank", "--store=balances"]
    argv += [f"--partitions={PARTITIONS}", "--key-serde=bytes", "--value-serde=bytes", f"--out={tmp_path / 'cli'}"]
    assert main(argv) == 0
    again = read_manifest(tmp_path / "cli")
    assert (again.changelog_offsets, again.row_counts) == (manifest.changelog_offsets, manifest.row_counts)


def test_runtime_restores_from_the_spark_snapshot_plus_the_changelog_tail(
    spark: Any, kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    app_id, source, sink = topic_name("app"), topic_name("in"), topic_name("out")
    changelog = f"{app_id}-{STORE}-changelog"

    async def fill(records: list[tuple[bytes, bytes | None]]) -> None:
        await produce(kafka_bootstrap, changelog, records)

    async def create() -> None:
        await create_topic(kafka_bootstrap, source, STORE_PARTITIONS)
        await create_topic(kafka_bootstrap, changelog, STORE_PARTITIONS, {"cleanup.policy": "compact"})

    anyio.run(create)
    anyio.run(fill, changes(11, 3000))
    result = snapshot(
        spark,
        bootstrap_servers=kafka_bootstrap,
        topic=changelog,
        app=app_id,
        store=STORE,
        partitions=STORE_PARTITIONS,
        key_serde="msgpack",
        value_serde="msgpack",
        out=tmp_path / "snapshots" / STORE / "from-spark",
    )
    tail = changes(12, 1000)
    anyio.run(fill, tail)
    expected, ends = anyio.run(latest_per_partition, kafka_bootstrap, changelog)

    fast = anyio.run(restore_only, snapshot_app(app_id, source, sink, tmp_path / "fast", tmp_path / "snapshots"),
                     kafka_bootstrap)  # fmt: skip
    full = anyio.run(restore_only, snapshot_app(app_id, source, sink, tmp_path / "full", None), kafka_bootstrap)
    assert fast.counters.snapshot_rows == result.rows_written
    assert fast.counters.restored == len(tail) == full.counters.restored - 3000
    restored = store_contents(tmp_path / "fast", app_id)
    assert restored == store_contents(tmp_path / "full", app_id)
    assert restored == {p: (sorted(expected[p].items()), ends[p]) for p in range(STORE_PARTITIONS)}


async def _grow(bootstrap: str, topic: str, partitions: int) -> None:
    """As `kafka-topics.sh --alter --partitions` does: the records stay in the partitions they are in."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_partitions({topic: NewPartitions(total_count=partitions)})
    finally:
        await admin.close()


def _counted(keys: int, numbers: range) -> list[tuple[bytes, bytes]]:
    return [(f"k{n % keys}".encode(), msgpack.packb({"n": n})) for n in numbers]


def test_an_app_moves_from_6_to_12_partitions_with_its_state_repartitioned(
    spark: Any, kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    """The procedure of docs/snapshots.md: the counting app drains its input at 6 partitions and stops;
    its changelog is snapshotted, the changelog and state deleted, the snapshot re-partitioned to 12 with
    the new changelog seeded, the input grown to 12. Every partition of the app at 12 then holds what an
    app that counted at 12 from the start holds, and so does one restoring from the seeded changelog alone.
    The store's keys are msgpack and the input's str, so keys placed by the store's bytes would be lost."""
    app_id, source, sink = topic_name("app"), topic_name("in"), topic_name("out")
    changelog = f"{app_id}-{STORE}-changelog"
    before, after = _counted(30, range(120)), _counted(30, range(120, 210))
    anyio.run(create_topic, kafka_bootstrap, source, 6)
    anyio.run(produce, kafka_bootstrap, source, before)
    at_6 = snapshot_app(app_id, source, sink, tmp_path / "state", None, partitions=6)
    anyio.run(restore_only, at_6, kafka_bootstrap)  # `--until-caught-up`: its input drained

    snapshots = tmp_path / "snapshots"
    snapshot(spark, bootstrap_servers=kafka_bootstrap, topic=changelog, app=app_id, store=STORE, partitions=6,
             key_serde="msgpack", value_serde="msgpack", out=tmp_path / "at-6")  # fmt: skip
    yaml_at_6 = write_app(tmp_path, {**at_6, "kafka": {"bootstrap_servers": kafka_bootstrap}})
    assert reset.main([str(yaml_at_6), "--to", "latest", "--delete-state", "--delete-changelogs"]) == 0
    moved = repartition(spark, snapshot_dir=tmp_path / "at-6", partitions=12, out=snapshots / STORE / "at-12",
                        input_key_serde="str", seed=ChangelogSeed(kafka_bootstrap, changelog))  # fmt: skip
    assert moved.rows_read == moved.rows_written == 30
    anyio.run(_grow, kafka_bootstrap, source, 12)
    anyio.run(produce, kafka_bootstrap, source, after)
    at_12 = anyio.run(restore_only, snapshot_app(app_id, source, sink, tmp_path / "state", snapshots, 12),
                     kafka_bootstrap)  # fmt: skip
    assert at_12.counters.snapshot_rows == 30

    reference_id, reference_source = topic_name("reference"), topic_name("reference-in")
    anyio.run(create_topic, kafka_bootstrap, reference_source, 12)
    anyio.run(produce, kafka_bootstrap, reference_source, before + after)
    reference = snapshot_app(reference_id, reference_source, topic_name("reference-out"), tmp_path / "ref", None, 12)
    anyio.run(restore_only, reference, kafka_bootstrap)
    from_changelog = snapshot_app(app_id, source, sink, tmp_path / "from-changelog", None, partitions=12)
    anyio.run(restore_only, from_changelog, kafka_bootstrap)

    def counts(state_dir: Path, app: str) -> dict[int, list[tuple[bytes, bytes]]]:
        return {partition: rows for partition, (rows, _) in store_contents(state_dir, app, 12).items()}

    expected = counts(tmp_path / "ref", reference_id)
    assert sum(msgpack.unpackb(value) for rows in expected.values() for _, value in rows) == 210
    assert counts(tmp_path / "state", app_id) == expected
    assert counts(tmp_path / "from-changelog", app_id) == expected


@pytest.mark.parametrize("kind", TIMED_KINDS)
def test_a_window_or_session_store_restores_from_the_snapshot_of_its_changelog(
    spark: Any, kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, kind: str
) -> None:
    """The job copies the changelog's bytes, so the windows' layout and the stream time come through."""
    app_id, source, store = topic_name("app"), topic_name("in"), TIMED_KINDS[kind].store
    anyio.run(create_topic, kafka_bootstrap, source, TIMED_PARTITIONS)
    records = [(key.encode(), msgpack.packb({"t": time})) for key, time in timed_records(2000, seed=5)]
    anyio.run(produce, kafka_bootstrap, source, records)
    config = timed_app(kind, app_id, source, tmp_path / "state")
    anyio.run(run_until_caught_up, config, kafka_bootstrap)
    code = main([
        "snapshot", f"--bootstrap-servers={kafka_bootstrap}", f"--topic={app_id}-{store}-changelog", f"--kind={kind}",
        f"--app={app_id}", f"--store={store}", f"--partitions={TIMED_PARTITIONS}", "--key-serde=str",
        f"--out={tmp_path / 'snapshots' / store / '1'}", "--master=local[2]",
    ])  # fmt: skip
    assert code == 0
    assert read_manifest(tmp_path / "snapshots" / store / "1").kind == kind

    from_snapshot = {
        **config,
        "state_dir": str(tmp_path / "restored"),
        "snapshots": {"location": str(tmp_path / "snapshots")},
    }
    restored = anyio.run(run_until_caught_up, from_snapshot, kafka_bootstrap)
    assert (restored.counters.snapshot_ingests, restored.counters.restored) == (TIMED_PARTITIONS, 0)
    original = stored(kind, tmp_path / "state", app_id)
    assert all(task.contents and task.stream_time > 0 for task in original.values())
    assert stored(kind, tmp_path / "restored", app_id) == original


def test_a_global_store_starts_from_a_database_dump_and_reads_only_newer_rows(
    spark: Any, kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    """Seed 000 with a big table: Spark turns the database's dump into the store, and the worker reads
    only the topic's rows written after the offsets the dump covers."""
    names = Names(topic_name)
    anyio.run(prepare, kafka_bootstrap, names)
    anyio.run(produce, kafka_bootstrap, names.table, rows(2_000) + rows(100, active=False))
    dump = tmp_path / "terminal_acquirer.csv"  # COPY (SELECT ... WHERE is_active) TO ... WITH CSV HEADER
    dump.write_text("terminalId,acquirerId\n" + "".join(f"T{n:06d},{acquirer_of(n)}\n" for n in range(100, 2_000)))
    snapshots = tmp_path / "snapshots"
    code = main([
        "bootstrap", "--source", "csv", "--path", str(dump), "--key-column", "terminalId",
        "--value-column", "acquirerId", "--app", names.app, "--store", GLOBAL_STORE, "--partitions", "3",
        "--key-serde", "str", "--value-serde", "json", "--out", str(snapshots / GLOBAL_STORE / "dump-1"),
        "--master", "local[2]", "--topic-offsets", names.table, "--bootstrap-servers", kafka_bootstrap,
    ])  # fmt: skip
    assert code == 0
    # After the dump: 10 terminals move to the other acquirer, 10 are deactivated, 10 are new.
    changes = [
        *rows(10, start=200, acquirer=lambda n: acquirer_of(n + 1)),
        *rows(10, start=300, active=False),
        *rows(10, start=5_000),
    ]
    anyio.run(produce, kafka_bootstrap, names.table, changes)

    worker = Worker(router_app(names, tmp_path / "state", snapshots=snapshots), kafka_bootstrap, until_caught_up=True)
    anyio.run(worker.run)

    assert worker.counters.snapshot_rows == 1_900
    assert worker.counters.global_records == len(changes)  # not the 2,100 rows before the dump
    expected = {f"T{n:06d}": acquirer_of(n) for n in range(100, 2_000)}
    expected.update({f"T{n:06d}": acquirer_of(n + 1) for n in range(200, 210)})
    expected.update({f"T{n:06d}": acquirer_of(n) for n in range(5_000, 5_010)})
    for n in range(300, 310):
        del expected[f"T{n:06d}"]
    backend = RocksDBBackend(tmp_path / "state" / names.app / "global" / GLOBAL_STORE / "0")
    view = ReadOnlyView(BufferedKeyValueStore(backend, StrSerde(), JsonSerde()))
    assert dict(view.range()) == expected


def test_bootstrap_can_seed_the_changelog(
    spark: Any, kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    """The rows also go into the store's changelog, each to the partition its key belongs to, and the
    manifest covers them: the changelog stays the full truth."""
    changelog = topic_name("totals-changelog")
    source = tmp_path / "opening.csv"
    source.write_text("account,total\n" + "".join(f"acc-{n},{n * 10}\n" for n in range(500)))
    arguments = [
        "bootstrap", "--source", "csv", "--path", str(source), "--key-column", "account", "--value-column", "total",
        "--app", "bank", "--store", "totals", "--partitions", "3", "--key-serde", "str", "--value-serde", "msgpack",
        "--master", "local[2]", "--seed-changelog", changelog, "--bootstrap-servers", kafka_bootstrap,
    ]  # fmt: skip
    assert main([*arguments, "--out", str(tmp_path / "first")]) == 0

    records = anyio.run(read_topic, kafka_bootstrap, changelog)
    assert sorted((r.key, r.value) for r in records) == sorted(
        (f"acc-{n}".encode(), msgpack.packb(n * 10)) for n in range(500)
    )
    assert all(r.partition == partition_for(r.key, 3) for r in records if r.key is not None)
    manifest = read_manifest(tmp_path / "first")
    assert manifest.changelog_topic == changelog
    assert manifest.changelog_offsets == {p: sum(1 for r in records if r.partition == p) for p in range(3)}
    assert manifest.row_counts == manifest.changelog_offsets

    # A changelog with records is not seeded again: the snapshot would claim records it does not hold.
    assert main([*arguments, "--out", str(tmp_path / "second")]) == 1


@pytest.mark.parametrize("listener", ["SASL_SSL", "MTLS"])
def test_the_snapshot_job_reads_a_changelog_over_a_secured_listener(
    spark: Any,
    secured_kafka: LocalBroker,
    topic_name: TopicNamer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    listener: str,
) -> None:
    """The job's own clients (end offsets) and Spark's Kafka source both take the security options."""
    assert secured_kafka.security is not None
    certificates = secured_kafka.security.certificates
    changelog = topic_name("changelog")
    anyio.run(create_topic, secured_kafka.bootstrap_servers, changelog)
    pairs = [(msgpack.packb(f"k{n % 4}"), msgpack.packb(n)) for n in range(10)]
    anyio.run(produce, secured_kafka.bootstrap_servers, changelog, pairs)
    if listener == "SASL_SSL":
        monkeypatch.setenv("KAFKA_SASL_PASSWORD", secured_kafka.security.users["alice"])
        security = ["--security-protocol=SASL_SSL", "--sasl-mechanism=SCRAM-SHA-512", "--sasl-username=alice"]
    else:
        password = certificates.client_key_password
        monkeypatch.setenv("KAFKA_KEY_PASSWORD", password)
        java_key = tmp_path / "client-pbe-sha1-3des.key"  # Java 17 cannot decrypt OpenSSL 3's default PBES2
        subprocess.run(
            ["openssl", "pkcs8", "-topk8", "-v1", "PBE-SHA1-3DES", "-in", str(certificates.client_key_file),
             "-passin", f"pass:{password}", "-passout", f"pass:{password}", "-out", str(java_key)],
            check=True, capture_output=True,
        )  # fmt: skip
        security = ["--security-protocol=SSL", f"--cert-file={certificates.client_cert_file}", f"--key-file={java_key}"]
    out = tmp_path / "snapshot"
    code = main([
        "snapshot", f"--bootstrap-servers={secured_kafka.address(listener)}", f"--topic={changelog}",
        "--app=secured", "--store=counts", "--partitions=1", f"--out={out}", "--master=local[2]",
        f"--ca-file={certificates.ca_file}", *security,
    ])  # fmt: skip
    assert code == 0
    manifest = read_manifest(out)
    assert (manifest.changelog_offsets, sum(manifest.row_counts.values())) == ({0: 10}, 4)


def test_the_jobs_read_and_write_a_bucket_and_the_runtime_restores_from_it(
    spark: Any,
    kafka_bootstrap: str,
    topic_name: TopicNamer,
    tmp_path: Path,
    object_store: LocalS3,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Bootstrap reads JSON lines from the bucket through S3A and writes its snapshot there; repartition
    reads that one and writes another at 4 partitions, each task uploading its SST and the driver putting
    the manifest last; the runtime restores from the bucket at 4. A job failing half-way leaves no manifest,
    and the runtime passes over what it wrote."""
    for name, value in object_store.environment().items():
        monkeypatch.setenv(name, value)
    bucket = f"spark-{uuid.uuid4().hex[:12]}"
    object_store.create_bucket(bucket)
    client = object_store.client()
    balances = {f"account-{n}": n * 10 for n in range(40)}
    lines = "".join(json.dumps({"account": account, "balance": b}) + "\n" for account, b in balances.items())
    client.put_object(Bucket=bucket, Key="dumps/good/part-0.json", Body=lines.encode())
    repeated = lines + json.dumps({"account": "account-7", "balance": 1}) + "\n"
    client.put_object(Bucket=bucket, Key="dumps/repeated/part-0.json", Body=repeated.encode())
    app_id, source, sink = topic_name("app"), topic_name("in"), topic_name("out")
    snapshots = f"s3://{bucket}/snapshots"

    def load(dump: str, out: str) -> None:
        frame = read_source(spark, "json", f"s3://{bucket}/dumps/{dump}/*.json")
        bootstrap(spark, frame, key_columns=["account"], value_columns=["balance"], app=app_id, store=STORE,
                  partitions=2, key_serde="msgpack", value_serde="msgpack", out=out)  # fmt: skip

    with pytest.raises(Exception, match="repeated"):
        load("repeated", f"{snapshots}/{STORE}/failed")
    left = [entry["Key"] for entry in client.list_objects_v2(Bucket=bucket, Prefix="snapshots/").get("Contents", [])]
    assert not [key for key in left if key.endswith("manifest.json")], left

    load("good", f"s3://{bucket}/at-2/{STORE}/first")
    # The command line, in the same session: it says which store the environment names, without its secret.
    assert main(["repartition", "--master=local[2]", f"--snapshot=s3://{bucket}/at-2/{STORE}/first",
                 "--partitions=4", f"--out={snapshots}/{STORE}/at-4"]) == 0  # fmt: skip
    printed = capfd.readouterr()
    assert f"object store at {object_store.endpoint}" in printed.err
    assert object_store.secret_key not in printed.out + printed.err

    anyio.run(create_topic, kafka_bootstrap, source, 4)
    restored = anyio.run(restore_only, snapshot_app(app_id, source, sink, tmp_path / "state", snapshots, 4),
                         kafka_bootstrap)  # fmt: skip
    assert restored.counters.snapshot_rows == len(balances)
    expected: dict[int, list[tuple[bytes, bytes]]] = {partition: [] for partition in range(4)}
    for account, balance in balances.items():
        key = msgpack.packb(account)
        expected[partition_for(key, 4)].append((key, msgpack.packb(balance)))
    contents = store_contents(tmp_path / "state", app_id, 4)
    assert {partition: rows for partition, (rows, _) in contents.items()} == {
        partition: sorted(rows) for partition, rows in expected.items()
    }
