"""Tables and the stream-table join on a real broker: a compacted topic co-partitioned with a stream,
materialized into the task's store with the topic itself as its changelog, and each stream record
joined with the table as of its own time, whichever was written to Kafka first."""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from runtime.config import parse_app
from runtime.worker.worker import Worker
from stores.partitioner import partition_for
from tests.conftest import TopicNamer
from tests.support.kafka_helpers import create_topic, read_topic

pytestmark = pytest.mark.anyio

PARTITIONS = 2
Event = tuple[str, str, int, Any]  # (topic role, key, timestamp, value)


def join_app(app_id: str, topics: dict[str, str], state_dir: Path, bootstrap: str, join: str) -> dict[str, Any]:
    json_topic = {"partitions": PARTITIONS, "key_serde": "str", "value_serde": "json"}
    return {
        "app_id": app_id,
        "kafka": {"bootstrap_servers": bootstrap},
        "topics": {
            topics["orders"]: json_topic,
            topics["customers"]: {**json_topic, "cleanup_policy": "compact"},
            topics["enriched"]: json_topic,
        },
        "processors": [{
            "name": "enrich",
            "class": "processors.joins:TableJoin",
            "inputs": [topics["orders"]],
            "tables": {"customers": {"topic": topics["customers"]}},
            "outputs": [topics["enriched"]],
            "params": {"table": "customers", "output": topics["enriched"], "join": join},
        }],
        "state_dir": str(state_dir),
        "max_task_idle_ms": 2000,  # a table partition not fetched yet is waited for, as Kafka Streams does
    }  # fmt: skip


def events(seed: int, count: int, start: int) -> list[Event]:
    """Orders of 6 customers and updates of those customers, interleaved in time; some customers first
    appear after their first orders, and some updates are deletions."""
    rng = random.Random(seed)
    now, out = start, []
    for n in range(count):
        now += rng.randint(1, 50)
        customer = f"c{rng.randrange(6)}"
        if rng.random() < 0.3:
            value = None if rng.random() < 0.1 else {"name": customer, "tier": rng.randrange(3), "version": n}
            out.append(("customers", customer, now, value))
        else:
            out.append(("orders", customer, now, {"order": n}))
    return out


async def produce_events(bootstrap: str, topics: dict[str, str], batch: list[Event], table_first: bool) -> None:
    """Each topic's events in time order; `table_first` writes every table update to Kafka before any order,
    else every order before any table update: the join's results must not depend on which."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        for role in ("customers", "orders") if table_first else ("orders", "customers"):
            for _, key, timestamp, value in (event for event in batch if event[0] == role):
                encoded = None if value is None else json.dumps(value).encode()
                await producer.send(topics[role], encoded, key=key.encode(), timestamp_ms=timestamp)
        await producer.flush()
    finally:
        await producer.stop()


def expected_joins(history: list[Event], join: str) -> list[tuple[str, Any]]:
    """The plain-Python join: each order with its customer's latest value no later than the order, per
    partition in the orders' order (a tie goes to the order, the processor's first input)."""
    table: dict[str, Any] = {}
    out = []
    for role, key, _, value in sorted(history, key=lambda event: (event[2], event[0] != "orders")):
        if role == "customers":
            table[key] = value
        elif table.get(key) is not None or join == "left":
            out.append((key, {"stream": value, "table": table.get(key)}))
    return out


async def joined(bootstrap: str, topic: str) -> dict[int, list[tuple[str, Any]]]:
    by_partition: dict[int, list[tuple[str, Any]]] = {p: [] for p in range(PARTITIONS)}
    for record in await read_topic(bootstrap, topic):
        by_partition[record.partition].append((record.key.decode(), json.loads(record.value)))
    return by_partition


def per_partition(results: list[tuple[str, Any]]) -> dict[int, list[tuple[str, Any]]]:
    by_partition: dict[int, list[tuple[str, Any]]] = {p: [] for p in range(PARTITIONS)}
    for key, value in results:
        by_partition[partition_for(key.encode(), PARTITIONS)].append((key, value))
    return by_partition


async def run(app: dict[str, Any], bootstrap: str) -> None:
    await asyncio.wait_for(Worker(parse_app(app), bootstrap, until_caught_up=True).run(), 120)


@pytest.mark.parametrize(("join", "table_first"), [("left", True), ("left", False), ("inner", False)])
async def test_each_record_joins_the_table_as_of_its_time_whichever_topic_kafka_got_first(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, join: str, table_first: bool
) -> None:
    topics = {role: topic_name(role) for role in ("orders", "customers", "enriched")}
    for role, topic in topics.items():
        await create_topic(kafka_bootstrap, topic, PARTITIONS,
                           {"cleanup.policy": "compact"} if role == "customers" else None)  # fmt: skip
    app = join_app(topic_name("app"), topics, tmp_path / "state", kafka_bootstrap, join)
    start = time.time_ns() // 1_000_000 - 3_600_000  # recent: the broker's retention keeps the records
    first = events(seed=1, count=300, start=start)
    await produce_events(kafka_bootstrap, topics, first, table_first)
    await run(app, kafka_bootstrap)
    assert await joined(kafka_bootstrap, topics["enriched"]) == per_partition(expected_joins(first, join))

    # Later events, after the local state was lost: the table comes back from its own topic, up to the
    # offset the group committed, and the task reads the rest of it as input, in time order.
    shutil.rmtree(tmp_path / "state")
    second = events(seed=2, count=300, start=first[-1][2] + 1)
    await produce_events(kafka_bootstrap, topics, second, not table_first)
    await run(app, kafka_bootstrap)
    assert await joined(kafka_bootstrap, topics["enriched"]) == per_partition(expected_joins(first + second, join))

    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        internal = [topic for topic in await admin.list_topics() if topic.startswith(app["app_id"])]
    finally:
        await admin.close()
    assert internal == [], "the table's store has no changelog of its own: its topic is one"


async def test_with_history_a_view_joins_the_profile_of_its_time_also_after_a_restore_from_the_topic(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    """A profile update produced to Kafka before views older than it: with `history_ms` the views join
    the profile before the update, and after the local state is lost the restore from the topic keeps
    each profile's timestamp, so the next views still join the profile of their time."""
    topics = {"orders": topic_name("views"), "customers": topic_name("profiles"), "enriched": topic_name("out")}
    for role, topic in topics.items():
        await create_topic(kafka_bootstrap, topic, PARTITIONS,
                           {"cleanup.policy": "compact"} if role == "customers" else None)  # fmt: skip
    app = join_app(topic_name("app"), topics, tmp_path / "state", kafka_bootstrap, "left")
    app["guarantee"] = "exactly_once"
    app["processors"][0]["tables"]["customers"]["history_ms"] = 3_600_000
    start = time.time_ns() // 1_000_000 - 600_000
    profiles: list[Event] = [
        ("customers", "u1", start, {"tier": "basic"}),
        ("customers", "u1", start + 200, {"tier": "gold"}),
    ]
    await produce_events(kafka_bootstrap, topics, profiles, table_first=True)
    await produce_events(kafka_bootstrap, topics, [("orders", "u1", start + 100, {"view": 1})], table_first=True)
    await run(app, kafka_bootstrap)

    shutil.rmtree(tmp_path / "state")  # the restart restores the table from its topic
    views: list[Event] = [("orders", "u1", start + 150, {"view": 2}), ("orders", "u1", start + 250, {"view": 3})]
    await produce_events(kafka_bootstrap, topics, views, table_first=True)
    await run(app, kafka_bootstrap)
    joins = (await joined(kafka_bootstrap, topics["enriched"]))[partition_for(b"u1", PARTITIONS)]
    assert [(value["stream"]["view"], value["table"]) for _, value in joins] == [
        (1, {"tier": "basic"}), (2, {"tier": "basic"}), (3, {"tier": "gold"}),
    ]  # fmt: skip
