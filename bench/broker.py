"""The Kafka a benchmark runs against: a given bootstrap address, or a LocalBroker in a temp dir."""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from runtime.devkafka import LocalBroker


@contextmanager
def kafka(bootstrap: str | None) -> Iterator[str]:
    """Yield `bootstrap` when given, else start a broker of our own and stop it afterwards."""
    # Clients retry on their own while a new topic's leaders settle, logging each retry; errors they
    # give up on still surface as exceptions.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    if bootstrap:
        yield bootstrap
        return
    with tempfile.TemporaryDirectory(prefix="bench-kafka-") as data_dir:
        broker = LocalBroker(data_dir=Path(data_dir))
        print("starting a local Kafka broker ...", flush=True)
        broker.start()
        try:
            yield broker.bootstrap_servers
        finally:
            broker.stop()


async def create_topics(
    bootstrap: str, topics: Mapping[str, int], replicas: int = 1, configs: Mapping[str, str] | None = None
) -> None:
    """Create each topic with its number of partitions, `replicas` replicas and `configs`, and wait for its
    leaders."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        configured = dict(configs or {})
        requests = [NewTopic(name, count, replicas, topic_configs=configured) for name, count in topics.items()]
        await admin.create_topics(requests)
    finally:
        await admin.close()
    for name, count in topics.items():
        await _wait_for_leaders(bootstrap, name, count)


async def _wait_for_leaders(bootstrap: str, topic: str, count: int, timeout: float = 30.0) -> None:
    """A new topic's partitions answer produce requests only once their leaders are elected."""
    deadline = time.monotonic() + timeout
    while len(await partitions_of(bootstrap, topic, with_leader=True)) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic} has no leader for all {count} partitions after {timeout:.0f}s")
        await asyncio.sleep(0.2)


async def delete_topics(bootstrap: str, topics: list[str]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics(topics)
    finally:
        await admin.close()


async def topic_names(bootstrap: str) -> list[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return sorted(await admin.list_topics())
    finally:
        await admin.close()


async def partitions_of(bootstrap: str, topic: str, with_leader: bool = False) -> list[int]:
    """The partitions of `topic` the metadata lists (only those with a leader, if `with_leader`)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (described,) = await admin.describe_topics([topic])
    finally:
        await admin.close()
    if described["error_code"] != 0:
        return []
    return sorted(
        int(partition["partition"])
        for partition in described["partitions"]
        if not with_leader or (partition["error_code"] == 0 and partition["leader"] >= 0)
    )


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """The end offset of every partition of `topic`."""
    partitions = await partitions_of(bootstrap, topic)
    if not partitions:
        raise LookupError(f"topic {topic} does not exist")
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        offsets = await consumer.end_offsets([TopicPartition(topic, p) for p in partitions])
    finally:
        await consumer.stop()
    return {tp.partition: int(offset) for tp, offset in offsets.items()}


async def topic_size(bootstrap: str, topic: str) -> int:
    """How many records `topic` holds (sum of end offsets; the topics here are never truncated)."""
    return sum((await end_offsets(bootstrap, topic)).values())
