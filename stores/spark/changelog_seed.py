"""Writing a snapshot's rows into the store's changelog too, so the changelog stays the full truth.

A snapshot built from elsewhere (bulk data, another partition count) covers no changelog record: a
later snapshot of the changelog, or a restore without the snapshot, would lack its keys. Seeded, the
changelog holds every row, each in its store partition, and the manifest covers those records.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from stores.kafka_security import KafkaSecurity, aiokafka_options
from stores.replication import BROKER_DEFAULT, ReplicationFactors
from stores.snapshot import SnapshotError
from stores.spark.kafka_options import spark_kafka_options
from stores.spark.partitioning import KeyValue
from stores.spark.snapshot import PLAINTEXT, changelog_end_offsets


@dataclass(frozen=True)
class ChangelogSeed:
    """The changelog the rows also go into, created as the app's `internal_topics` would create it."""

    bootstrap_servers: str
    topic: str
    replication_factor: int = BROKER_DEFAULT
    configs: dict[str, str] = field(default_factory=dict)


def empty_changelog(seed: ChangelogSeed, partitions: int, security: KafkaSecurity = PLAINTEXT) -> None:
    """Creates the changelog (compacted) if missing; refuses one with records: the snapshot's offsets
    would claim them, and their keys are not in the snapshot."""
    asyncio.run(_ensure_topic(seed, partitions, security))
    ends = changelog_end_offsets(seed.bootstrap_servers, seed.topic, security)
    if len(ends) != partitions:
        raise SnapshotError(f"changelog {seed.topic} has {len(ends)} partitions, expected {partitions}")
    if any(ends.values()):
        raise SnapshotError(f"changelog {seed.topic} already has records (end offsets {ends}): seed only an empty one")


def seed_changelog(
    spark: Any, placed: Any, bootstrap_servers: str, topic: str, security: KafkaSecurity = PLAINTEXT
) -> dict[int, int]:
    """Each row into its partition of the changelog (Spark's Kafka sink); the end offsets after them."""
    rows = placed.mapPartitionsWithIndex(_with_partition)
    frame = spark.createDataFrame(rows, "partition INT, key BINARY, value BINARY")
    writer = frame.write.format("kafka").options(**spark_kafka_options(security))
    writer.option("kafka.bootstrap.servers", bootstrap_servers).option("topic", topic).save()
    return changelog_end_offsets(bootstrap_servers, topic, security)


def _with_partition(index: int, pairs: Iterator[KeyValue]) -> Iterator[tuple[int, bytes, bytes]]:
    for key, value in pairs:
        yield index, bytes(key), bytes(value)


async def _ensure_topic(seed: ChangelogSeed, partitions: int, security: KafkaSecurity) -> None:
    topic = seed.topic
    admin = AIOKafkaAdminClient(bootstrap_servers=seed.bootstrap_servers, **aiokafka_options(security))
    await admin.start()
    try:
        described: list[dict[str, Any]] = await admin.describe_topics([topic])
        if any(entry["topic"] == topic and entry["error_code"] == 0 for entry in described):
            return
        replicas = await ReplicationFactors(admin).resolve(seed.replication_factor)
        configs = {**seed.configs, "cleanup.policy": "compact"}
        response = await admin.create_topics([NewTopic(topic, partitions, replicas, topic_configs=configs)])
        for _, code, message in response.topic_errors:
            if code != 0:
                raise SnapshotError(f"changelog {topic} could not be created with {replicas} replicas: {message}")
        for _ in range(100):  # until its partitions have leaders
            described = await admin.describe_topics([topic])
            if any(entry["error_code"] == 0 and len(entry["partitions"]) == partitions for entry in described):
                return
            await asyncio.sleep(0.1)
    finally:
        await admin.close()
