"""Snapshot a store from its changelog: the latest value per key up to end offsets fixed at job start.

The end offsets are read once from the broker (read_committed, so they are the last stable offsets)
and passed to Spark as `endingOffsets`: the manifest then names exactly the offsets the SSTs cover,
and the runtime replays only what came after them.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from stores.kafka_security import KafkaSecurity, aiokafka_options
from stores.layout import StoreKind
from stores.snapshot import Manifest, SnapshotError, SnapshotMismatch, snapshot_manifest
from stores.spark.kafka_options import spark_kafka_options
from stores.spark.partitioning import sort_where_placed, write_ssts
from stores.spark.snapshot_place import SnapshotPlace

PLAINTEXT = KafkaSecurity()


@dataclass(frozen=True)
class SnapshotResult:
    records_read: int
    rows_written: int
    manifest: Manifest


async def _partition_count(bootstrap_servers: str, topic: str, security: KafkaSecurity) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers, **aiokafka_options(security))
    await admin.start()
    try:
        described: list[dict[str, Any]] = await admin.describe_topics([topic])
    finally:
        await admin.close()
    for entry in described:
        if entry["topic"] == topic and entry["error_code"] == 0 and entry["partitions"]:
            return len(entry["partitions"])
    raise SnapshotError(f"changelog topic {topic} does not exist or has no partitions")


async def _end_offsets(bootstrap_servers: str, topic: str, security: KafkaSecurity) -> dict[int, int]:
    partitions = await _partition_count(bootstrap_servers, topic, security)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        isolation_level="read_committed",
        enable_auto_commit=False,
        **aiokafka_options(security),
    )
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        await consumer.stop()


def changelog_end_offsets(bootstrap_servers: str, topic: str, security: KafkaSecurity = PLAINTEXT) -> dict[int, int]:
    """The next offset of each partition a read_committed consumer would stop at now."""
    return asyncio.run(_end_offsets(bootstrap_servers, topic, security))


def read_changelog(
    spark: Any, bootstrap_servers: str, topic: str, end_offsets: dict[int, int], security: KafkaSecurity = PLAINTEXT
) -> Any:
    """The committed records of every partition from the earliest offset up to `end_offsets`."""
    return (
        spark.read.format("kafka")
        .options(**spark_kafka_options(security))
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", json.dumps({topic: {str(p): offset for p, offset in end_offsets.items()}}))
        .option("kafka.isolation.level", "read_committed")
        .load()
    )


def latest_values(records: Any) -> Any:
    """An RDD of ((partition, key), value) for each live key: its value at its highest offset."""
    from pyspark.sql import functions as F  # noqa: N812

    latest = (
        records.where(F.col("key").isNotNull())
        .groupBy("partition", "key")
        .agg(F.max(F.struct("offset", "value")).alias("last"))
        .where(F.col("last.value").isNotNull())  # a tombstone last: the key is deleted
        .select("partition", "key", F.col("last.value").alias("value"))
    )
    return latest.rdd.map(_pair)


def _pair(row: Any) -> tuple[tuple[int, bytes], bytes]:
    return (row["partition"], bytes(row["key"])), bytes(row["value"])


def snapshot(
    spark: Any,
    *,
    bootstrap_servers: str,
    topic: str,
    app: str,
    store: str,
    partitions: int,
    key_serde: str,
    value_serde: str,
    out: str | os.PathLike[str],
    kind: StoreKind = "key_value",
    security: KafkaSecurity = PLAINTEXT,
) -> SnapshotResult:
    """`out` is a directory or `s3://bucket/prefix/name`. The records are copied as they are: a window or
    session store's keys keep their layout, and `kind` goes into the manifest, so the runtime ingests the
    snapshot only into a store of that kind."""
    place = SnapshotPlace.of(out)
    place.require_empty()
    end_offsets = changelog_end_offsets(bootstrap_servers, topic, security)
    if len(end_offsets) != partitions:
        raise SnapshotMismatch(f"changelog {topic} has {len(end_offsets)} partitions, expected partitions={partitions}")
    records = read_changelog(spark, bootstrap_servers, topic, end_offsets, security).cache()
    records_read = records.count()
    # A changelog record's partition is its store partition: no rehashing.
    placed = sort_where_placed(latest_values(records), partitions)
    try:
        written = write_ssts(placed, place)
    except Exception:
        place.discard()
        raise
    finally:
        records.unpersist()
    manifest = snapshot_manifest(
        written,
        app=app,
        store=store,
        partitions=partitions,
        key_serde=key_serde,
        value_serde=value_serde,
        changelog_topic=topic,
        changelog_offsets=end_offsets,
        kind=kind,
    )
    place.commit(manifest)
    return SnapshotResult(records_read=records_read, rows_written=sum(manifest.row_counts.values()), manifest=manifest)
