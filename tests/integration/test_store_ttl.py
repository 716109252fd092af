"""A key-value store with a TTL on a real broker, under exactly-once: restored from its changelog after a
restart, it has lost the keys stream time expired and kept the others. The app is Quix Streams' State TTL
cookbook example "Emit only on toggle or after TTL expiry" (tests/support/ttl_apps.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from runtime.config import parse_app
from runtime.worker.worker import Worker
from tests.conftest import TopicNamer
from tests.support.kafka_helpers import create_topic, read_topic

pytestmark = pytest.mark.anyio

TTL = 10_000
T0 = 1_790_000_000_000


async def produce_at(bootstrap: str, topic: str, readings: list[tuple[str, dict[str, Any], int]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for key, value, timestamp in readings:
            await producer.send_and_wait(topic, json.dumps(value).encode(), key.encode(), timestamp_ms=timestamp)
    finally:
        await producer.stop()


async def run_until_caught_up(app: dict[str, Any], bootstrap: str) -> Worker:
    worker = Worker(parse_app(app), bootstrap, until_caught_up=True)
    await asyncio.wait_for(worker.run(), 60)
    return worker


async def test_a_restored_store_has_lost_the_expired_keys_and_kept_the_live_ones_under_exactly_once(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    readings, changes, app_id = topic_name("readings"), topic_name("changes"), topic_name("app")
    await create_topic(kafka_bootstrap, readings)
    app = {
        "app_id": app_id,
        "topics": {readings: {"key_serde": "str", "value_serde": "json"},
                   changes: {"key_serde": "str", "value_serde": "json"}},
        "processors": [
            {"name": "toggle", "class": "tests.support.ttl_apps:EmitOnToggleOrExpiry", "inputs": [readings],
             "outputs": [changes], "params": {"output": changes},
             "stores": {"last-event": {"backend": "memory", "key_serde": "str", "ttl_ms": TTL}}}
        ],
        "guarantee": "exactly_once",
        "state_dir": str(tmp_path / "state"),
        "commit_interval_ms": 200,
    }  # fmt: skip
    await produce_at(
        kafka_bootstrap,
        readings,
        [
            ("expired", {"event": "ON"}, T0),
            ("kept-by-its-put", {"event": "ON", "ttl_ms": 10 * TTL}, T0),
            ("kept", {"event": "ON"}, T0 + TTL - 1),
            ("mover", {"event": "ON"}, T0 + TTL),  # stream time reaches the first key's expiry
        ],
    )
    await run_until_caught_up(app, kafka_bootstrap)
    changelog: dict[bytes, bytes | None] = {}
    for record in await read_topic(kafka_bootstrap, f"{app_id}-last-event-changelog"):  # read_committed
        changelog[record.key] = record.value
    live = {key[1:].decode() for key, value in changelog.items() if key[:1] == b"\x04" and value is not None}
    assert live == {"kept-by-its-put", "kept", "mover"}, "the expired key's tombstone was committed"

    # The memory store restarts empty and restores the whole changelog; the same reading again goes on only
    # for the key that expired.
    await produce_at(
        kafka_bootstrap, readings, [(key, {"event": "ON"}, T0 + TTL) for key in sorted(live | {"expired"})]
    )
    second = await run_until_caught_up(app, kafka_bootstrap)
    assert second.counters.restored > 0
    sent = [(record.key.decode(), record.timestamp) for record in await read_topic(kafka_bootstrap, changes)]
    assert sent == [
        ("expired", T0),
        ("kept-by-its-put", T0),
        ("kept", T0 + TTL - 1),
        ("mover", T0 + TTL),
        ("expired", T0 + TTL),
    ]
