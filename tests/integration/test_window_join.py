"""The stream-stream join on a real broker: two co-partitioned topics written to Kafka one after the other,
taken in timestamp order by each task, joined within the time difference, and the result equal to the
plain-Python join of each partition's records; and an outer join of records out of order, restored from
its changelogs between two runs, that loses no pair and sends no joined record alone."""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgpack
import pytest
from aiokafka import AIOKafkaProducer

from runtime.config import parse_app
from runtime.worker.worker import Worker
from stores.partitioner import partition_for
from tests.conftest import TopicNamer
from tests.support.kafka_helpers import create_topic, read_topic
from tests.unit.test_window_join import Event, reference

pytestmark = pytest.mark.anyio

PARTITIONS = 2
DIFFERENCE, GRACE = 40, 10


def events(count: int, start: int) -> list[Event]:
    rng = random.Random(9)
    out, now = [], start
    for number in range(count):
        now += rng.randint(0, 15)
        out.append((rng.choice("LR"), f"user-{rng.randrange(5)}", now, number))
    return out


@pytest.mark.parametrize("join", ["inner", "left", "outer"])
async def test_each_partitions_pairs_within_the_difference_are_joined(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, join: str
) -> None:
    topics = {"L": topic_name("views"), "R": topic_name("clicks"), "out": topic_name("joined")}
    for topic in topics.values():
        await create_topic(kafka_bootstrap, topic, PARTITIONS)
    start = time.time_ns() // 1_000_000 - 3_600_000  # recent: the broker's retention keeps the records
    given = events(400, start)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=5)
    await producer.start()
    try:
        for side in ("R", "L"):  # the right side to Kafka first: the task's timestamp order decides
            for _, key, timestamp, number in (event for event in given if event[0] == side):
                await producer.send(
                    topics[side], msgpack.packb({"n": number}), key=key.encode(), timestamp_ms=timestamp
                )
        await producer.flush()
    finally:
        await producer.stop()
    app: dict[str, Any] = {
        "app_id": topic_name("app"),
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "topics": {topic: {"partitions": PARTITIONS, "key_serde": "str"} for topic in topics.values()},
        "processors": [{
            "name": "join",
            "class": "processors.joins:WindowJoin",
            "inputs": [topics["L"], topics["R"]],
            "outputs": [topics["out"]],
            "params": {"left": topics["L"], "right": topics["R"], "time_difference_ms": DIFFERENCE,
                       "grace_ms": GRACE, "join": join, "output": topics["out"]},
        }],
        "state_dir": str(tmp_path / "state"),
        "max_task_idle_ms": 2000,
    }  # fmt: skip
    await asyncio.wait_for(Worker(parse_app(app), kafka_bootstrap, until_caught_up=True).run(), 120)

    found: Counter[Any] = Counter()
    for record in await read_topic(kafka_bootstrap, topics["out"]):
        value = msgpack.unpackb(record.value)
        left, right = (None if side is None else side["n"] for side in (value["left"], value["right"]))
        found[(record.key.decode(), left, right, record.timestamp)] += 1
    expected: Counter[Any] = Counter()
    for partition in range(PARTITIONS):
        mine = [event for event in given if partition_for(event[1].encode(), PARTITIONS) == partition]
        expected += reference(mine, DIFFERENCE, GRACE, join)
    assert found == expected


async def test_an_outer_join_restored_between_records_out_of_order_loses_no_pair(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    """Exactly-once, and the state deleted between the two runs, so the second restores both stores from
    their changelogs: the records that met one before the restart are still there for on-time records
    out of order, and only the record that met none is sent alone."""
    topics = {"L": topic_name("left"), "R": topic_name("right"), "out": topic_name("joined")}
    for topic in topics.values():
        await create_topic(kafka_bootstrap, topic, 1)
    start = time.time_ns() // 1_000_000 - 3_600_000
    app = parse_app({
        "app_id": topic_name("app"),
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "guarantee": "exactly_once",
        "topics": {topic: {"partitions": 1, "key_serde": "str", "value_serde": "json"} for topic in topics.values()},
        "processors": [{
            "name": "join",
            "class": "processors.joins:WindowJoin",
            "inputs": [topics["L"], topics["R"]],
            "outputs": [topics["out"]],
            "params": {"left": topics["L"], "right": topics["R"], "time_difference_ms": 10, "join": "outer",
                       "output": topics["out"]},
        }],
        "state_dir": str(tmp_path / "state"),
        "max_task_idle_ms": 2000,
    })  # fmt: skip

    async def run(records: list[tuple[str, str, str, int]]) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await producer.start()
        try:
            for side, key, value, at in records:
                await producer.send(topics[side], json.dumps(value).encode(), key=key.encode(), timestamp_ms=start + at)
            await producer.flush()
        finally:
            await producer.stop()
        await asyncio.wait_for(Worker(app, kafka_bootstrap, until_caught_up=True).run(), 120)

    await run([("L", "k", "A", 0), ("R", "k", "a", 5), ("L", "z", "Z", 16)])
    shutil.rmtree(tmp_path / "state")
    await run([("L", "k", "B", 6), ("R", "k", "b", 6), ("L", "y", "Y", 100)])  # B and b: 6 + 10 is not before 16

    found = Counter(
        (record.key.decode(), value["left"], value["right"], record.timestamp - start)
        for record in await read_topic(kafka_bootstrap, topics["out"])
        for value in [json.loads(record.value)]
    )
    pairs = [("k", "A", "a", 5), ("k", "B", "a", 6), ("k", "A", "b", 6), ("k", "B", "b", 6), ("z", "Z", None, 16)]
    assert found == Counter(pairs)
