"""The Spark bootstrap and repartition jobs (local[2]): Kafka's placement of keys, a Parquet file turned
into a store, a snapshot written at another partition count."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from stores.layout import StoreKind
from stores.partitioner import partition_for
from stores.rocksdb import RocksDBBackend
from stores.serdes import resolve_serde
from stores.snapshot import SnapshotError, ingest_partition, read_manifest, validate, verify_checksums
from stores.spark.__main__ import main
from stores.spark.bootstrap import bootstrap, read_source
from stores.spark.partitioning import place_and_sort
from stores.spark.repartition import repartition
from stores.spark.session import spark_session
from stores.store import BufferedKeyValueStore
from tests.support.snapshots import write_snapshot


@pytest.fixture(scope="module")
def _stop_spark_after_module() -> Iterator[None]:
    yield
    spark_session("stores-spark-unit-tests", "local[2]").stop()


@pytest.fixture
def spark(_stop_spark_after_module: None) -> Any:
    """The active session, made again if a test stopped it (the CLI stops the session it used)."""
    session = spark_session("stores-spark-unit-tests", "local[2]")
    session.sparkContext.setLogLevel("ERROR")
    return session


def _placed(index: int, rows: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[int, bytes]]:
    for key, _ in rows:
        yield index, key


def test_spark_places_keys_as_kafka_does(spark: Any) -> None:
    generator = random.Random(7)
    keys = {generator.randbytes(generator.randrange(0, 40)) for _ in range(5000)}
    partitions = 12
    pairs = spark.sparkContext.parallelize([(key, b"") for key in keys], 3)
    placed = place_and_sort(pairs, partitions).mapPartitionsWithIndex(_placed).collect()
    assert len(placed) == len(keys)
    for index, key in placed:
        assert index == partition_for(key, partitions), key
    by_partition: dict[int, list[bytes]] = {}
    for index, key in placed:
        by_partition.setdefault(index, []).append(key)
    for index, in_order in by_partition.items():
        assert in_order == sorted(in_order), f"partition {index} is not sorted by key bytes"


def _write_parquet(spark: Any, path: Path, count: int) -> dict[str, dict[str, object]]:
    rows = [(f"customer-{i}", i * 10, f"name {i}") for i in range(count)]
    spark.createDataFrame(rows, ["id", "balance", "name"]).write.parquet(str(path))
    return {key: {"balance": balance, "name": name} for key, balance, name in rows}


def test_bootstrap_from_parquet_serves_every_key(spark: Any, tmp_path: Path) -> None:
    expected = _write_parquet(spark, tmp_path / "customers.parquet", 2000)
    frame = read_source(spark, "parquet", str(tmp_path / "customers.parquet"))
    result = bootstrap(
        spark,
        frame,
        key_columns=["id"],
        value_columns=None,
        app="shop",
        store="customers",
        partitions=4,
        key_serde="str",
        value_serde="msgpack",
        out=tmp_path / "snap",
    )
    assert (result.rows_read, result.rows_written) == (2000, 2000)
    manifest = read_manifest(tmp_path / "snap")
    validate(manifest, "shop", "customers", 4, "str", "msgpack")
    verify_checksums(tmp_path / "snap", manifest)
    assert manifest.changelog_offsets == {}
    keys = resolve_serde("str")
    found: dict[str, object] = {}
    for partition in range(4):
        backend = RocksDBBackend(tmp_path / f"db-{partition}")
        try:
            assert ingest_partition(backend, tmp_path / "snap", read_manifest(tmp_path / "snap"), partition) == 0
            store = BufferedKeyValueStore(backend, keys, resolve_serde("msgpack"))
            assert len(list(store.range())) == manifest.row_counts[partition]
            for key in expected:
                if partition_for(keys.serialize(key), 4) == partition:
                    found[key] = store.get(key)
                else:
                    assert store.get(key) is None
        finally:
            backend.close()
    assert found == expected


def test_cli_bootstrap_with_one_value_column(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expected = _write_parquet(spark, tmp_path / "in.parquet", 300)
    code = main(
        [
            "bootstrap",
            "--source=parquet",
            f"--path={tmp_path / 'in.parquet'}",
            "--key-column=id",
            "--value-column=balance",
            "--app=shop",
            "--store=balances",
            "--partitions=3",
            "--key-serde=str",
            "--value-serde=json",
            f"--out={tmp_path / 'snap'}",
        ]
    )
    assert code == 0
    assert "300 rows read, 300 rows written" in capsys.readouterr().out
    values = {}
    for partition in range(3):
        backend = RocksDBBackend(tmp_path / f"db-{partition}")
        try:
            ingest_partition(backend, tmp_path / "snap", read_manifest(tmp_path / "snap"), partition)
            values.update({key.decode(): int(value) for key, value in backend.items()})
        finally:
            backend.close()
    assert values == {key: row["balance"] for key, row in expected.items()}


def test_repeated_key_fails_and_leaves_no_snapshot(spark: Any, tmp_path: Path) -> None:
    frame = spark.createDataFrame([("a", 1), ("b", 2), ("a", 3)], ["id", "v"])
    with pytest.raises(Exception, match="repeated"):
        bootstrap(
            spark,
            frame,
            key_columns=["id"],
            value_columns=["v"],
            app="x",
            store="y",
            partitions=1,
            key_serde="str",
            value_serde="msgpack",
            out=tmp_path / "snap",
        )
    assert not (tmp_path / "snap").exists()


def test_bootstrap_refuses_a_non_empty_output(spark: Any, tmp_path: Path) -> None:
    (tmp_path / "snap").mkdir()
    (tmp_path / "snap" / "other").write_text("x")
    frame = spark.createDataFrame([("a", 1)], ["id", "v"])
    with pytest.raises(SnapshotError, match="not empty"):
        bootstrap(
            spark,
            frame,
            key_columns=["id"],
            value_columns=["v"],
            app="x",
            store="y",
            partitions=1,
            key_serde="str",
            value_serde="msgpack",
            out=tmp_path / "snap",
        )


def _snapshot_at(directory: Path, partitions: int, rows: dict[str, int], kind: StoreKind = "key_value") -> None:
    """A snapshot of msgpack keys, each where its str bytes (the input topic's) place it."""
    placed: dict[int, dict[bytes, bytes]] = {partition: {} for partition in range(partitions)}
    for key, count in rows.items():
        placed[partition_for(key.encode(), partitions)][msgpack.packb(key)] = msgpack.packb(count)
    identity = {"app": "counter", "store": "counts", "partitions": partitions, "kind": kind}
    write_snapshot(directory, {**identity, "key_serde": "msgpack", "value_serde": "msgpack"}, placed)


def _snapshot_rows(directory: Path, scratch: Path) -> dict[int, list[tuple[bytes, bytes]]]:
    manifest = read_manifest(directory)
    rows = {}
    for partition in range(manifest.partitions):
        backend = RocksDBBackend(scratch / str(partition))
        try:
            ingest_partition(backend, directory, manifest, partition)
            rows[partition] = list(backend.items())
        finally:
            backend.close()
    return rows


def test_repartition_refuses_a_window_store(spark: Any, tmp_path: Path) -> None:
    _snapshot_at(tmp_path / "windows", 2, {"a": 1}, kind="window")
    with pytest.raises(SnapshotError, match="is of a window store: only key-value stores are re-partitioned"):
        repartition(spark, snapshot_dir=tmp_path / "windows", partitions=4, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_repartition_places_each_key_where_its_input_records_go(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The store's keys are msgpack, the input topic's str: placed by the msgpack bytes, most keys
    would land in a partition whose task never sees their records. (Last: the command stops the session.)"""
    counts = {f"key-{n}": n for n in range(200)}
    _snapshot_at(tmp_path / "at-3", 3, counts)

    code = main(["repartition", f"--snapshot={tmp_path / 'at-3'}", "--partitions=5", "--input-key-serde=str",
                 f"--out={tmp_path / 'at-5'}", "--master=local[2]"])  # fmt: skip

    assert code == 0
    assert "repartition counter/counts: 200 rows read, 200 rows written" in capsys.readouterr().out
    _snapshot_at(tmp_path / "expected", 5, counts)
    assert _snapshot_rows(tmp_path / "at-5", tmp_path / "db") == _snapshot_rows(tmp_path / "expected", tmp_path / "e")
    manifest = read_manifest(tmp_path / "at-5")
    validate(manifest, "counter", "counts", 5, "msgpack", "msgpack")
    assert (manifest.changelog_topic, manifest.changelog_offsets, manifest.input_offsets) == (None, {}, {})
    placed_by_store_bytes = sum(
        partition_for(msgpack.packb(key), 5) != partition_for(key.encode(), 5) for key in counts
    )
    assert placed_by_store_bytes > 100  # the serdes' difference matters for these keys
