"""A slow synchronous processor keeps its group membership: a batch of hundreds of records at 100 ms
each blocks the event loop for longer than the session timeout unless the batch yields, and the
consumer's heartbeat runs on that loop."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import msgpack
import pytest

from tests.conftest import TopicNamer
from tests.integration.test_exactly_once import wait_exit
from tests.support.kafka_helpers import create_topic, produce, read_topic
from tests.support.running import numbered, read_log, spawn_worker, write_app

pytestmark = pytest.mark.anyio

RECORDS = 90  # one fetch, one batch: 9 s of processing, three times the 3 s session
SESSION_TIMEOUT_MS = 3000


async def test_a_slow_synchronous_processor_keeps_its_partitions(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 1)
    await produce(kafka_bootstrap, source, numbered(RECORDS))
    app = {
        "app_id": topic_name("app"),
        "kafka": {
            "bootstrap_servers": kafka_bootstrap,
            "consumer": {
                "session_timeout_ms": SESSION_TIMEOUT_MS,
                "heartbeat_interval_ms": 500,
                "max_poll_records": 1000,
            },
        },
        "topics": {source: {"partitions": 1, "key_serde": "str"}, sink: {"partitions": 1, "key_serde": "str"}},
        "processors": [
            {
                "name": "slow",
                "class": "tests.support.apps:SlowSyncEcho",
                "inputs": [source],
                "outputs": [sink],
                "params": {"output": sink, "sleep_ms": 100},
            }
        ],
        "queue": {"pause_at": 5000, "resume_at": 1000},
    }
    log = tmp_path / "worker.log"
    worker = spawn_worker(write_app(tmp_path, app), "--until-caught-up", log=log)
    assert await wait_exit(worker, 120) == 0, read_log(log)[-3000:]

    lines = read_log(log).splitlines()
    assert not [line for line in lines if "revoked" in line or "rebalanc" in line.lower()], read_log(log)[-3000:]
    assert len([line for line in lines if "assigned" in line]) == 1
    seen = Counter(msgpack.unpackb(record.value)["n"] for record in await read_topic(kafka_bootstrap, sink))
    assert set(seen) == set(range(RECORDS)) and max(seen.values()) == 1, "a record is missing or came out twice"
