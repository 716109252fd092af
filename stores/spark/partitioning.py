"""Placing rows as Kafka would, and writing one SST per store partition from Spark tasks.

Spark's own `hash()` is Murmur3, so rows are placed by an RDD partition function that calls
Kafka's murmur2: store partition p then holds exactly the keys a producer sends to partition p.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from stores.partitioner import partition_for
from stores.snapshot import PartitionWritten
from stores.spark.snapshot_place import SnapshotPlace

KeyValue = tuple[bytes, bytes]
PlacedKeyValue = tuple[tuple[int, bytes], bytes]
"""((store partition, key), value): a row whose partition is already known."""


def kafka_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for `key`; runs inside Spark tasks."""
    return partition_for(bytes(key), partitions)


def place_and_sort(pairs: Any, partitions: int) -> Any:
    """An RDD of (key, value) bytes, in `partitions` Spark partitions laid out as Kafka's, sorted by key.

    Spark partition i is store partition i, and bytes sort as RocksDB's bytewise comparator does.
    """
    place = functools.partial(kafka_partition, partitions=partitions)
    return pairs.repartitionAndSortWithinPartitions(partitions, partitionFunc=place, ascending=True)


def sort_where_placed(placed: Any, partitions: int) -> Any:
    """An RDD of `PlacedKeyValue` as `place_and_sort` lays its pairs out: Spark partition i holds the
    rows placed in store partition i, sorted by key, without their partition."""
    in_place = placed.repartitionAndSortWithinPartitions(partitions, partitionFunc=_placed_partition, ascending=True)
    return in_place.map(_without_partition, preservesPartitioning=True)


def _placed_partition(partition_and_key: tuple[int, bytes]) -> int:
    return partition_and_key[0]


def _without_partition(row: PlacedKeyValue) -> KeyValue:
    (_, key), value = row
    return key, value


def write_ssts(sorted_pairs: Any, place: SnapshotPlace) -> list[PartitionWritten]:
    """Each Spark task writes its partition's SST into `place` (a directory every executor shares, or a bucket)."""
    task = functools.partial(_write_partition, place=place)
    written: list[PartitionWritten] = sorted_pairs.mapPartitionsWithIndex(task).collect()
    return sorted(written, key=lambda result: result.partition)


def _write_partition(index: int, rows: Iterator[KeyValue], place: SnapshotPlace) -> Iterator[PartitionWritten]:
    yield place.write_partition(index, ((bytes(key), bytes(value)) for key, value in rows))
