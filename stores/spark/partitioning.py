"""Placing rows as Kafka would, and writing one SST per store partition from Spark tasks.

Spark's own `hash()` is Murmur3, so rows are placed by an RDD partition function that calls
Kafka's murmur2: store partition p then holds exactly the keys a producer sends to partition p.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from processors.partitioner import partition_for
from stores.snapshot import SST_NAME, Manifest, partition_dir, sha256_file, write_manifest, write_partition_sst

KeyValue = tuple[bytes, bytes]


@dataclass(frozen=True)
class PartitionWritten:
    """What a Spark task wrote for one store partition; `checksums` maps snapshot-relative names."""

    partition: int
    rows: int
    checksums: dict[str, str]


def kafka_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for `key`; runs inside Spark tasks."""
    return partition_for(bytes(key), partitions)


def place_and_sort(pairs: Any, partitions: int) -> Any:
    """An RDD of (key, value) bytes, in `partitions` Spark partitions laid out as Kafka's, sorted by key.

    Spark partition i is store partition i, and bytes sort as RocksDB's bytewise comparator does.
    """
    place = functools.partial(kafka_partition, partitions=partitions)
    return pairs.repartitionAndSortWithinPartitions(partitions, partitionFunc=place, ascending=True)


def write_ssts(sorted_pairs: Any, snapshot_dir: str | os.PathLike[str]) -> list[PartitionWritten]:
    """Each Spark task writes its partition's SST into `snapshot_dir` (a path every executor shares)."""
    task = functools.partial(_write_partition, snapshot_dir=str(Path(snapshot_dir).resolve()))
    written: list[PartitionWritten] = sorted_pairs.mapPartitionsWithIndex(task).collect()
    return sorted(written, key=lambda result: result.partition)


def finish_snapshot(
    snapshot_dir: str | os.PathLike[str],
    written: list[PartitionWritten],
    *,
    app: str,
    store: str,
    partitions: int,
    key_serde: str,
    value_serde: str,
    changelog_topic: str | None = None,
    changelog_offsets: dict[int, int] | None = None,
) -> Manifest:
    """The manifest of what the Spark tasks wrote, written last: its presence marks the snapshot complete."""
    manifest = Manifest(
        app=app,
        store=store,
        partitions=partitions,
        key_serde=key_serde,
        value_serde=value_serde,
        changelog_topic=changelog_topic,
        changelog_offsets=changelog_offsets or {},
        row_counts={result.partition: result.rows for result in written},
        checksums={name: digest for result in written for name, digest in result.checksums.items()},
    )
    write_manifest(snapshot_dir, manifest)
    return manifest


def _write_partition(index: int, rows: Iterator[KeyValue], snapshot_dir: str) -> Iterator[PartitionWritten]:
    directory = partition_dir(snapshot_dir, index)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / SST_NAME
    count = write_partition_sst(((bytes(key), bytes(value)) for key, value in rows), path)
    checksums = {path.relative_to(snapshot_dir).as_posix(): sha256_file(path)} if count else {}
    yield PartitionWritten(index, count, checksums)
