"""Bootstrap a store from bulk data: read with Spark, encode with the store's serdes, write SSTs + manifest.

The changelog is not seeded, so the manifest records no changelog offsets: a runtime ingesting the
snapshot replays its (empty) changelog from the start. For a global store whose topic is fed from
the same database, the topic's end offsets taken before the read go into the manifest instead.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from stores.kafka_security import KafkaSecurity
from stores.serdes import resolve_serde
from stores.snapshot import Manifest, snapshot_manifest
from stores.spark.changelog_seed import ChangelogSeed, empty_changelog, seed_changelog
from stores.spark.partitioning import KeyValue, place_and_sort, write_ssts
from stores.spark.s3a import spark_path
from stores.spark.snapshot import PLAINTEXT
from stores.spark.snapshot_place import SnapshotPlace

SOURCES = ("parquet", "csv", "json", "jdbc")


@dataclass(frozen=True)
class BootstrapResult:
    rows_read: int
    rows_written: int
    manifest: Manifest


def read_source(spark: Any, source: str, path: str, options: dict[str, str] | None = None) -> Any:
    """A DataFrame of `source`; for jdbc `path` is the URL and `options` hold dbtable, user, password.
    Files in a bucket (`s3://bucket/prefix`) are read through Hadoop's S3A connector, as `s3a://`."""
    reader = spark.read
    if source == "csv":
        reader = reader.option("header", "true").option("inferSchema", "true")
    for name, value in (options or {}).items():
        reader = reader.option(name, value)
    if source == "jdbc":
        return reader.format("jdbc").option("url", path).load()
    if source not in SOURCES:
        raise ValueError(f"unknown source '{source}'; one of {', '.join(SOURCES)}")
    return reader.format(source).load(spark_path(path))


def encode_rows(
    rows: Iterator[Any], key_columns: Sequence[str], value_columns: Sequence[str], key_serde: str, value_serde: str
) -> Iterator[KeyValue]:
    """One column is stored as its value; several as a list (keys) or a dict by column name (values)."""
    keys, values = resolve_serde(key_serde), resolve_serde(value_serde)
    for row in rows:
        key = row[key_columns[0]] if len(key_columns) == 1 else [row[name] for name in key_columns]
        if key is None or (isinstance(key, list) and None in key):
            raise ValueError(f"row has a null key in {list(key_columns)}: {row!r}")
        value = row[value_columns[0]] if len(value_columns) == 1 else {name: row[name] for name in value_columns}
        yield keys.serialize(key), values.serialize(value)


def bootstrap(
    spark: Any,
    frame: Any,
    *,
    key_columns: Sequence[str],
    value_columns: Sequence[str] | None,
    app: str,
    store: str,
    partitions: int,
    key_serde: str,
    value_serde: str,
    out: str | os.PathLike[str],
    topic_offsets: tuple[str, dict[int, int]] | None = None,
    seed: ChangelogSeed | None = None,
    security: KafkaSecurity = PLAINTEXT,
) -> BootstrapResult:
    """`value_columns=None` stores every non-key column, as a dict. A repeated key fails the job.

    `topic_offsets`, a topic and its end offsets taken before the source was read, says the data
    holds everything that topic held then (a global store's topic, fed from the same database):
    the manifest records them, so the runtime reads only the topic's records after them.

    `seed`, a changelog and its cluster, also writes the rows into the store's changelog,
    which must be empty, so the changelog stays the full truth (a later changelog snapshot, or a
    restore without snapshots, then has every bootstrapped key); the manifest covers those records.
    `security` is how the job reaches that cluster. `out` is a directory or `s3://bucket/prefix/name`.
    """
    place = SnapshotPlace.of(out)
    place.require_empty()
    missing = [name for name in (*key_columns, *(value_columns or ())) if name not in frame.columns]
    if missing:
        raise ValueError(f"columns {missing} are not in the source; it has {frame.columns}")
    values = list(value_columns) if value_columns else [name for name in frame.columns if name not in key_columns]
    if not values:
        raise ValueError("no value columns: every column is a key column")
    rows_read = spark.sparkContext.accumulator(0)

    def counted(rows: Iterator[Any]) -> Iterator[Any]:
        for row in rows:
            rows_read.add(1)
            yield row

    encode = functools.partial(
        encode_rows, key_columns=list(key_columns), value_columns=values, key_serde=key_serde, value_serde=value_serde
    )
    pairs = frame.select(*key_columns, *values).rdd.mapPartitions(counted).mapPartitions(encode)
    placed = place_and_sort(pairs, partitions)
    if seed is not None:
        empty_changelog(seed, partitions, security)
        placed = placed.cache()  # written twice: SSTs and changelog
    try:
        written = write_ssts(placed, place)
        if seed is not None:
            topic_offsets = (seed.topic, seed_changelog(spark, placed, seed.bootstrap_servers, seed.topic, security))
    except Exception:
        place.discard()
        raise
    manifest = snapshot_manifest(
        written,
        app=app,
        store=store,
        partitions=partitions,
        key_serde=key_serde,
        value_serde=value_serde,
        changelog_topic=topic_offsets[0] if topic_offsets else None,
        changelog_offsets=topic_offsets[1] if topic_offsets else None,
    )
    place.commit(manifest)
    return BootstrapResult(rows_read=rows_read.value, rows_written=sum(manifest.row_counts.values()), manifest=manifest)
