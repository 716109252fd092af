"""Re-partition a store's snapshot: the same rows, each in the partition its key has at another count.

A task's state is the state of the keys its input partition brings it, and Kafka's partitioner
places an input record by its key's bytes: at M partitions, a key's state belongs in the partition
murmur2 of those bytes picks there. The store holds the key as its own key serde encodes it, which
need not be the input topic's (msgpack in the store, str on the topic): each key is then decoded with
the store's serde and encoded with the input's to be placed. Window and session stores are refused:
their keys are laid out with their windows, and their stream time is a partition's.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from stores.kafka_security import KafkaSecurity
from stores.partitioner import partition_for
from stores.serdes import resolve_serde
from stores.snapshot import Manifest, SnapshotError, snapshot_manifest
from stores.spark.changelog_seed import ChangelogSeed, empty_changelog, seed_changelog
from stores.spark.partitioning import KeyValue, PlacedKeyValue, sort_where_placed, write_ssts
from stores.spark.snapshot import PLAINTEXT
from stores.spark.snapshot_place import SnapshotPlace


@dataclass(frozen=True)
class RepartitionResult:
    rows_read: int
    rows_written: int
    manifest: Manifest


@dataclass(frozen=True)
class Placement:
    """Where a store's key goes at `partitions`: where the producer of its input records puts them."""

    partitions: int
    store_key_serde: str
    input_key_serde: str

    def check(self) -> None:
        """Both serdes resolve here, before any Spark task needs them."""
        for name in {self.store_key_serde, self.input_key_serde}:
            try:
                resolve_serde(name)
            except LookupError as exc:
                raise ValueError(f"key serde '{name}': {exc}") from exc

    def place(self, rows: Iterator[KeyValue]) -> Iterator[PlacedKeyValue]:
        if self.input_key_serde == self.store_key_serde:
            for key, value in rows:
                yield (partition_for(key, self.partitions), key), value
            return
        store, topic = resolve_serde(self.store_key_serde), resolve_serde(self.input_key_serde)
        for key, value in rows:
            yield (partition_for(topic.serialize(store.deserialize(key)), self.partitions), key), value


def repartition(
    spark: Any,
    *,
    snapshot_dir: str | os.PathLike[str],
    partitions: int,
    out: str | os.PathLike[str],
    input_key_serde: str | None = None,
    seed: ChangelogSeed | None = None,
    security: KafkaSecurity = PLAINTEXT,
) -> RepartitionResult:
    """The snapshot at `snapshot_dir` written at `partitions` into `out`, for the same app and store; each
    is a directory or `s3://bucket/prefix/name`.

    `input_key_serde` is the key serde of the topic the store's processor reads (default: the store's).
    The new manifest covers no changelog record: the old changelog's offsets mean nothing at the new
    count. With `seed` the rows also go into the new changelog (created at `partitions`, or empty),
    and the manifest covers them.
    """
    source = SnapshotPlace.of(snapshot_dir)
    manifest = source.read_manifest()
    if manifest.kind != "key_value":
        raise SnapshotError(
            f"snapshot {source.describe()} is of a {manifest.kind} store: only key-value stores are re-partitioned "
            "(a window or session store's keys hold their windows, and its stream time is a partition's)"
        )
    if partitions < 1:
        raise ValueError(f"--partitions must be at least 1, got {partitions}")
    place = SnapshotPlace.of(out)
    place.require_empty()
    source.require_files(manifest)
    placement = Placement(partitions, manifest.key_serde, input_key_serde or manifest.key_serde)
    placement.check()
    rows = spark.sparkContext.parallelize(range(manifest.partitions), manifest.partitions)
    rows = rows.flatMap(functools.partial(source.read_partition, manifest))
    placed = sort_where_placed(rows.mapPartitions(placement.place), partitions)
    changelog_topic: str | None = None
    changelog_offsets: dict[int, int] | None = None
    if seed is not None:
        empty_changelog(seed, partitions, security)
        placed = placed.cache()  # written twice: SSTs and changelog
    try:
        written = write_ssts(placed, place)
        if seed is not None:
            changelog_topic = seed.topic
            changelog_offsets = seed_changelog(spark, placed, seed.bootstrap_servers, seed.topic, security)
    except Exception:
        place.discard()
        raise
    new = snapshot_manifest(
        written,
        app=manifest.app,
        store=manifest.store,
        partitions=partitions,
        key_serde=manifest.key_serde,
        value_serde=manifest.value_serde,
        changelog_topic=changelog_topic,
        changelog_offsets=changelog_offsets,
    )
    place.commit(new)
    return RepartitionResult(
        rows_read=sum(manifest.row_counts.values()), rows_written=sum(new.row_counts.values()), manifest=new
    )
