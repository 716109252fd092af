"""One app, the same input records, two runs: on the test kit's driver and on a real broker, for tests
that both give the same outputs."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from runtime.config import AppConfig, load_app
from runtime.kafka.topic_serdes import topic_serdes
from runtime.kafka.topics import ensure_topics
from runtime.testkit import AppDriver
from runtime.worker.worker import Worker
from stores.partitioner import partition_for
from tests.support.kafka_helpers import read_topic

Outputs = dict[str, list[tuple[Any, Any]]]
"""Each output topic's records, (key, value) decoded, in a canonical order (not the order written)."""


@dataclass(frozen=True)
class Produced:
    """An input record as a producer writes it: to its key's partition, with its timestamp."""

    topic: str
    key: bytes | None
    value: bytes | None
    timestamp: int


def output_topics(config: AppConfig) -> list[str]:
    """What the processors write (a topic another reads among them), and the dead letters; not the app's
    repartition topics, whose records the app deletes once it has read them."""
    written = {topic for processor in config.processors for topic in processor.outputs}
    if config.dead_letter_topic in config.topics:
        written.add(config.dead_letter_topic)
    return sorted(written - set(config.repartition_topics()))


def on_driver(app_yaml: Path, records: Iterable[Produced], state_dir: Path) -> Outputs:
    """Each record piped in turn, as a producer would write them one after another."""
    with AppDriver.from_yaml(app_yaml, state_dir=state_dir) as driver:
        for record in records:
            driver.pipe_bytes(record.topic, record.value, record.key, timestamp=record.timestamp)
        return {
            topic: canonical((r.key, r.value) for r in driver.records(topic)) for topic in output_topics(driver.config)
        }


async def on_broker(app_yaml: Path, records: Iterable[Produced], bootstrap: str) -> Outputs:
    """The records produced first, then the app run as `--until-caught-up` runs it, its outputs read back."""
    config = load_app(app_yaml)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        partitions = await ensure_topics(admin, config)
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
    await producer.start()
    try:
        sent = [
            await producer.send(record.topic, record.value, key=record.key, timestamp_ms=record.timestamp,
                                partition=partition_for(record.key, partitions[record.topic]) if record.key else 0)
            for record in records
        ]  # fmt: skip
        await asyncio.gather(*sent)
    finally:
        await producer.stop()
    await Worker(config, bootstrap, until_caught_up=True).run()
    serdes = topic_serdes(config)
    outputs: Outputs = {}
    for topic in output_topics(config):
        decode_key, decode_value = serdes[topic][0].deserialize, serdes[topic][1].deserialize
        read = await read_topic(bootstrap, topic)
        outputs[topic] = canonical(
            (None if r.key is None else decode_key(r.key), None if r.value is None else decode_value(r.value))
            for r in read
        )
    return outputs


def canonical(records: Iterable[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    return sorted(records, key=repr)
