"""On a real broker: an outer stream-stream join whose window reaches further ahead than back, on the records
of Kafka Streams' `KStreamKStreamJoinTest.testAsymmetricWindowingAfter`; and session windows emitting
updates that announce a session sent before a restart removed once a record after it merges it
(`KStreamSessionWindowAggregateProcessorTest.shouldImmediatelyForwardRemovedSessionsWhenMerging`), the
state deleted between the two runs so that the second restores the session from the changelog."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from runtime.config import parse_app
from runtime.worker.worker import Worker
from tests.conftest import TopicNamer
from tests.support.kafka_helpers import create_topic, read_topic
from tests.unit.test_window_join_before_after import AFTER, KEYS

pytestmark = pytest.mark.anyio


async def produce(bootstrap: str, records: list[tuple[str, str, str, int]]) -> None:
    """(topic, key, value, timestamp) each, JSON values."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for topic, key, value, at in records:
            await producer.send(topic, json.dumps(value).encode(), key=key.encode(), timestamp_ms=at)
        await producer.flush()
    finally:
        await producer.stop()


def app(app_id: str, bootstrap: str, state_dir: Path, topics: list[str], processor: dict[str, Any]) -> Any:
    return parse_app({
        "app_id": app_id,
        "kafka": {"bootstrap_servers": bootstrap},
        "topics": {topic: {"partitions": 1, "key_serde": "str", "value_serde": "json"} for topic in topics},
        "processors": [processor],
        "state_dir": str(state_dir),
        "max_task_idle_ms": 2000,
    })  # fmt: skip


async def run(config: Any, bootstrap: str) -> None:
    await asyncio.wait_for(Worker(config, bootstrap, until_caught_up=True).run(), 60)


async def test_an_outer_join_after_100_joins_and_sends_alone_as_kafka_streams_scenario(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    left, right, out = topic_name("left"), topic_name("right"), topic_name("joined")
    for topic in (left, right, out):
        await create_topic(kafka_bootstrap, topic, 1)
    start = time.time_ns() // 1_000_000 - 3_600_000
    records = [({"L": left, "R": right}[step.side], key, f"{step.letter}{key}", start + at)
               for step in AFTER for key, at in zip(KEYS, step.times, strict=True)]  # fmt: skip
    await produce(kafka_bootstrap, [*records, (left, "z", "Z", start + 5000)])  # Z closes every window
    processor = {"name": "join", "class": "processors.joins:WindowJoin", "inputs": [left, right], "outputs": [out],
                 "params": {"left": left, "right": right, "time_difference_ms": 0, "after_ms": 100, "grace_ms": 10,
                            "join": "outer", "output": out}}  # fmt: skip
    config = app(topic_name("app"), kafka_bootstrap, tmp_path / "state", [left, right, out], processor)
    await run(config, kafka_bootstrap)

    found = Counter(
        (record.key.decode(), value["left"], value["right"], record.timestamp - start)
        for record in await read_topic(kafka_bootstrap, out)
        for value in [json.loads(record.value)]
    )
    joined = Counter(pair for step in AFTER for pair in step.joined)
    met = {right_value for _, _, right_value, _ in joined}
    alone = Counter(
        (key, None, value, at - start) for topic, key, value, at in records if topic == right and value not in met
    )
    assert len(alone) == 20  # a0-a3, b1-b3, c2-c3, d3, g0, h0-h1, i0-i2, j0-j3: in no left record's window
    assert found == joined + alone


async def test_a_session_sent_before_a_restart_is_announced_removed_when_merged_after_it(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    clicks, sessions = topic_name("clicks"), topic_name("sessions")
    for topic in (clicks, sessions):
        await create_topic(kafka_bootstrap, topic, 1)
    start = time.time_ns() // 1_000_000 - 3_600_000
    processor = {"name": "per-session", "class": "processors.windows:Aggregate", "inputs": [clicks],
                 "outputs": [sessions], "params": {"window": {"type": "session", "gap_ms": 300_000},
                                                   "aggregation": {"type": "count"}, "emit": "updates",
                                                   "output": sessions}}  # fmt: skip
    config = app(topic_name("app"), kafka_bootstrap, tmp_path / "state", [clicks, sessions], processor)
    await produce(kafka_bootstrap, [(clicks, "a", "/", start)])
    await run(config, kafka_bootstrap)
    shutil.rmtree(tmp_path / "state")
    await produce(kafka_bootstrap, [(clicks, "a", "/", start + 5)])
    await run(config, kafka_bootstrap)

    updates = [
        (record.key.decode(), value["start"] - start, value["end"] - start, value["value"], record.timestamp - start)
        for record in await read_topic(kafka_bootstrap, sessions)
        for value in [json.loads(record.value)]
    ]
    assert updates == [("a", 0, 0, 1, 0), ("a", 0, 0, None, 0), ("a", 0, 5, 2, 5)]
    removal = json.loads((await read_topic(kafka_bootstrap, sessions))[1].value)
    assert removal == {"start": start, "end": start, "value": None, "removed": True}
