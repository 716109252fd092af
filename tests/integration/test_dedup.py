"""De-duplication under exactly-once against a real broker, its workers killed -9 again and again: each id
comes out once, whatever was delivered twice."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from runtime.config import parse_app
from runtime.worker.worker import Worker
from tests.conftest import TopicNamer
from tests.support.kafka_helpers import create_topic, read_topic
from tests.support.kills import FAST_FAILOVER, kill_and_replace
from tests.support.running import write_app


async def produce_twice(bootstrap: str, topic: str, ids: int) -> None:
    """Every id twice, the copy a few records later, as an at-least-once producer's retry would send it."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    await producer.start()
    start = time.time_ns() // 1_000_000 - 3_600_000
    try:
        order = [n for block in range(0, ids, 5) for n in [*range(block, block + 5)] * 2]
        sent = [await producer.send(topic, json.dumps({"id": n}).encode(), key=f"id-{n}".encode(),
                                    timestamp_ms=start + index) for index, n in enumerate(order)]  # fmt: skip
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


def test_each_id_comes_out_once_through_kills_under_exactly_once(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    ids = 10_000
    events, unique = topic_name("events"), topic_name("unique")
    asyncio.run(create_topic(kafka_bootstrap, events, 3))
    asyncio.run(produce_twice(kafka_bootstrap, events, ids))
    topic = {"partitions": 3, "key_serde": "str", "value_serde": "json"}
    group = topic_name("dedup")
    app: dict[str, Any] = {
        "app_id": group, "kafka": {"bootstrap_servers": kafka_bootstrap, "consumer": FAST_FAILOVER},
        "topics": {events: topic, unique: topic}, "guarantee": "exactly_once", "state_dir": str(tmp_path / "state"),
        "processors": [{"name": "dedup", "class": "tests.support.apps:SlowDeduplicate", "inputs": [events],
                        "outputs": [unique], "params": {"id": "value.id", "window_ms": 600_000, "output": unique}}],
    }  # fmt: skip
    committed = asyncio.run(kill_and_replace(write_app(tmp_path, app), kafka_bootstrap, group, tmp_path, 3))
    assert 0 < committed < 2 * ids  # the kills landed while it ran
    asyncio.run(Worker(parse_app(app), kafka_bootstrap, until_caught_up=True).run())
    found = [json.loads(r.value)["id"] for r in asyncio.run(read_topic(kafka_bootstrap, unique))]
    assert sorted(found) == list(range(ids))  # each once, none lost
