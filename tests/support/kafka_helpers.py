"""Helpers for integration tests: create topics, produce, and read whole topics back."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from runtime.kafka.topics import describe_partitions

# For topics given records with fixed, old timestamps: under the default 7 days of retention they would
# go at the broker's next retention check (every 5 minutes), in the middle of a test.
KEPT = {"retention.ms": "-1"}


async def create_topic(bootstrap: str, topic: str, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs or {})])
    finally:
        await admin.close()


async def produce(
    bootstrap: str, topic: str, records: Iterable[tuple[bytes | None, bytes | None]], **options: object
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **options)
    await producer.start()
    try:
        futures = [await producer.send(topic, value, key=key) for key, value in records]
        for future in futures:
            await future
    finally:
        await producer.stop()


async def read_topic(
    bootstrap: str, topic: str, isolation_level: str = "read_committed"
) -> list[ConsumerRecord[bytes, bytes]]:
    """Every record of every partition up to the end offsets at call time, in partition order."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation_level, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(await _partitions(bootstrap, topic))]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        records: list[ConsumerRecord[bytes, bytes]] = []
        while True:
            positions = {tp: await consumer.position(tp) for tp in tps}
            if all(positions[tp] >= ends[tp] for tp in tps):
                break
            batches = await consumer.getmany(timeout_ms=500)
            for tp, batch in batches.items():
                records.extend(m for m in batch if m.offset < ends[tp])
        records.sort(key=lambda m: (m.partition, m.offset))
        return records
    finally:
        await consumer.stop()


async def _partitions(bootstrap: str, topic: str) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        for _ in range(100):  # a topic created a moment ago may not be in the metadata yet
            counts = await describe_partitions(admin, [topic])
            if counts.get(topic):
                return counts[topic]
            await asyncio.sleep(0.1)
    finally:
        await admin.close()
    raise LookupError(f"topic {topic} has no partitions")


async def committed_offsets(bootstrap: str, group_id: str) -> dict[tuple[str, int], int]:
    """The offsets a consumer group has committed, by (topic, partition)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group_id)
    finally:
        await admin.close()
    return {(tp.topic, tp.partition): meta.offset for tp, meta in offsets.items() if meta.offset >= 0}
