"""Repartitioning on a real broker: a processor with `repartition:` reads its input re-keyed through the app's
topic `<app>-<processor>-repartition`, each record on the partition Kafka's producer picks for its new key,
and the topic is purged below the committed offsets once read."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import msgpack
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from runtime.config import parse_app
from runtime.worker.worker import Worker
from stores.partitioner import partition_for
from tests.conftest import TopicNamer
from tests.support.kafka_helpers import create_topic, produce, read_topic

pytestmark = pytest.mark.anyio

MERCHANTS = 7


def payments(count: int) -> list[tuple[bytes, bytes]]:
    """Keyed by account; the merchant is a field of the value."""
    return [(f"acc-{n % 13}".encode(), msgpack.packb({"n": n, "merchant": f"m{n % MERCHANTS}"})) for n in range(count)]


def app(topic_name: TopicNamer, tmp_path: Path, bootstrap: str, key: str) -> dict[str, Any]:
    source, sink = topic_name("payments"), topic_name("by-merchant")
    return {
        "app_id": topic_name("app"),
        "kafka": {"bootstrap_servers": bootstrap},
        "topics": {source: {"partitions": 3, "key_serde": "str"}, sink: {"partitions": 4, "key_serde": "str"}},
        "processors": [{
            "name": "per-merchant",
            "class": "tests.support.apps:Echo",
            "inputs": [source],
            "repartition": {"key": key, "partitions": 4, "key_serde": "str"},
            "outputs": [sink],
            "params": {"output": sink},
        }],
        "state_dir": str(tmp_path / "state"),
        "commit_interval_ms": 200,
    }  # fmt: skip


async def ends_and_starts(bootstrap: str, topic: str, partitions: int) -> tuple[dict[int, int], dict[int, int]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends, starts = await consumer.end_offsets(tps), await consumer.beginning_offsets(tps)
        return {tp.partition: ends[tp] for tp in tps}, {tp.partition: starts[tp] for tp in tps}
    finally:
        await consumer.stop()


@pytest.mark.parametrize(("key", "merchant"), [("merchant", str), ("tests.support.apps:merchant_of", str.upper)])
async def test_records_reach_the_task_of_their_new_key_and_the_topic_is_purged_once_read(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, key: str, merchant: Any
) -> None:
    spec = app(topic_name, tmp_path, kafka_bootstrap, key)
    source, sink = spec["processors"][0]["inputs"][0], spec["processors"][0]["outputs"][0]
    await create_topic(kafka_bootstrap, source, 3)
    await produce(kafka_bootstrap, source, payments(3_000))
    config = parse_app(spec)
    [repartition] = config.repartition_topics()
    assert repartition == f"{spec['app_id']}-per-merchant-repartition"
    await asyncio.wait_for(Worker(config, kafka_bootstrap, until_caught_up=True).run(), 120)

    outputs = await read_topic(kafka_bootstrap, sink)
    got = Counter(record.key.decode() for record in outputs)
    assert got == Counter(merchant(f"m{n % MERCHANTS}") for n in range(3_000)), "each payment once, by merchant"
    for record in outputs:
        partition, _ = msgpack.unpackb(record.value)["src"]
        assert partition == partition_for(record.key, 4), "on the repartition partition of its new key"
    assert len({msgpack.unpackb(record.value)["src"][0] for record in outputs}) > 1, "several tasks took part"

    ends, starts = await ends_and_starts(kafka_bootstrap, repartition, 4)
    assert sum(ends.values()) > 3_000, "every payment re-keyed, and the progress the stage stamped"
    assert starts == ends, "everything the group committed past was deleted from the repartition topic"
