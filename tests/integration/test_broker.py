"""The local broker is a real Kafka, and aiokafka can do everything the runtime relies on with it."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from runtime.devkafka import LocalBroker
from tests.conftest import TopicNamer
from tests.support.kafka_helpers import create_topic, produce, read_topic
from tests.support.running import numbered, spawn_worker, write_app

pytestmark = pytest.mark.anyio


async def test_aiokafka_transactions_against_real_broker(kafka_bootstrap: str, topic_name: TopicNamer) -> None:
    topic = topic_name("compacted")
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"cleanup.policy": "compact"})])
        for _ in range(50):  # a topic created a moment ago can be unknown to the broker's metadata for a while
            described = await admin.describe_configs([_topic_resource(topic)])
            if _config_pairs(described):
                break
            await asyncio.sleep(0.1)
        assert ("cleanup.policy", "compact") in _config_pairs(described)
    finally:
        await admin.close()

    idempotent = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, enable_idempotence=True)
    await idempotent.start()
    try:
        await idempotent.send_and_wait(topic, b"idempotent", key=b"a")
    finally:
        await idempotent.stop()

    group = topic_name("group")
    transactional = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=topic_name("txn"))
    await transactional.start()
    try:
        async with transactional.transaction():
            await transactional.send(topic, b"committed", key=b"b")
            await transactional.send_offsets_to_transaction({TopicPartition(topic, 0): 42}, group)
        await transactional.begin_transaction()
        await transactional.send(topic, b"aborted", key=b"c")
        await transactional.abort_transaction()
    finally:
        await transactional.stop()

    committed_view = await read_topic(kafka_bootstrap, topic, "read_committed")
    assert [(m.key, m.value) for m in committed_view] == [(b"a", b"idempotent"), (b"b", b"committed")]
    uncommitted_view = await read_topic(kafka_bootstrap, topic, "read_uncommitted")
    assert (b"c", b"aborted") in [(m.key, m.value) for m in uncommitted_view]

    reader = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=group, enable_auto_commit=False)
    await reader.start()
    try:
        assert await reader.committed(TopicPartition(topic, 0)) == 42
    finally:
        await reader.stop()


async def test_compaction_is_observable(kafka_bootstrap: str, topic_name: TopicNamer) -> None:
    topic = topic_name("compaction")
    configs = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01"}
    await create_topic(kafka_bootstrap, topic, configs=configs)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        for round_ in range(20):
            await producer.send_and_wait(topic, str(round_).encode(), key=b"same-key")
            await asyncio.sleep(0.05)
        deadline = asyncio.get_running_loop().time() + 60
        while True:
            # A new segment must roll for the cleaner to compact the old ones.
            await producer.send_and_wait(topic, b"last", key=b"same-key")
            values = [(m.key, m.value) for m in await read_topic(kafka_bootstrap, topic)]
            if len(values) < 10:
                break
            assert asyncio.get_running_loop().time() < deadline, f"not compacted: {len(values)} records"
            await asyncio.sleep(1)
    finally:
        await producer.stop()
    assert values[-1] == (b"same-key", b"last")


async def test_a_first_run_on_a_new_broker_is_quiet(private_broker: LocalBroker, tmp_path: Path) -> None:
    """The app is the broker's first group member, transactional producer and changelog writer, and
    neither its output nor the broker's log has a warning (replicas, coordinators, leaders)."""
    bootstrap = private_broker.bootstrap_servers
    await create_topic(bootstrap, "in", 3)
    await produce(bootstrap, "in", numbered(3000))
    app = write_app(tmp_path, {
        "app_id": "first-run",
        "kafka": {"bootstrap_servers": bootstrap},
        "guarantee": "exactly_once",
        "state_dir": str(tmp_path / "state"),
        "topics": {"in": {"partitions": 3, "key_serde": "str"}, "out": {"partitions": 3, "key_serde": "str"}},
        "processors": [{"name": "count", "class": "tests.support.apps:CountPerKey", "inputs": ["in"],
                        "outputs": ["out"], "params": {"output": "out"}, "stores": {"counts": {"key_serde": "str"}}}],
    })  # fmt: skip
    output = tmp_path / "app.log"
    worker = spawn_worker(app, "--until-caught-up", log=output)
    assert await asyncio.to_thread(worker.wait, 120) == 0, output.read_text()

    assert len({record.key for record in await read_topic(bootstrap, "first-run-counts-changelog")}) == 97
    app_warnings = [line for line in output.read_text().splitlines() if re.search(r" (WARNING|ERROR) ", line)]
    assert app_warnings == []
    broker_warnings = [
        line
        for line in private_broker.log_file.read_text().splitlines()
        if re.search(r"\] (WARN|ERROR) ", line) and "Performing controller activation" not in line
    ]
    assert broker_warnings == []


def _topic_resource(topic: str) -> object:
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    return ConfigResource(ConfigResourceType.TOPIC, topic)


def _config_pairs(responses: list[object]) -> set[tuple[str, str]]:
    pairs: set[tuple[str, str]] = set()
    for response in responses:
        for resource in response.resources:  # type: ignore[attr-defined]
            for entry in resource[4]:
                pairs.add((entry[0], entry[1]))
    return pairs
