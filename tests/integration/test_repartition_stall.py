"""Event time across a repartition topic on a real broker: page views counted per region and second after a
re-key, fed live to two workers under exactly-once, one of them killed -9 mid-feed. The surviving upstream task
writes the repartition topic on while the killed one's partition waits for the failover; the reading tasks hold
their stream time at the stalled task's last stamp (runtime/task/upstream_progress.py), so its views are on
time when it comes back: every window holds what a run without the kill counts, and no view is late."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from stores.partitioner import partition_for
from tests.conftest import TopicNamer
from tests.support.kafka_helpers import read_topic
from tests.support.running import read_log, spawn_worker, until, write_app

pytestmark = pytest.mark.anyio

REGIONS = ("eu", "us", "asia")
# The reading tasks hold a stalled task's time within a second of its last stamp (3 commit intervals, at
# least 1 s), so a grace of 2 s covers the views it sent before: without the stamps, the survivor's stream
# time runs as far ahead as the failover takes, about the 6 s of the session.
WINDOW_MS, GRACE_MS = 1000, 2000
SESSION = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}
PARTITIONS = 2
FEED_S, KILL_AFTER_S, PER_TICK, TICK_S = 10.0, 2.5, 20, 0.05


def app(topic_name: TopicNamer, tmp_path: Path, bootstrap: str, views: str, totals: str, late: str) -> dict[str, Any]:
    topic = {"partitions": PARTITIONS, "key_serde": "str", "value_serde": "json"}
    return {
        "app_id": topic_name("app"),
        "kafka": {"bootstrap_servers": bootstrap, "consumer": SESSION},
        "topics": {views: topic, totals: topic, late: topic},
        "processors": [{
            "name": "count",
            "class": "processors.windows:Aggregate",
            "inputs": [views],
            "repartition": {"key": "region", "key_serde": "str"},
            "outputs": [totals, late],
            "params": {"window": {"type": "tumbling", "size_ms": WINDOW_MS, "grace_ms": GRACE_MS},
                       "aggregation": {"type": "count"}, "output": totals, "late_topic": late},
        }],
        "guarantee": "exactly_once",
        "commit_interval_ms": 100,
        "state_dir": str(tmp_path / "state"),
    }  # fmt: skip


def ends_of_every_partition() -> list[str]:
    """Regions that reach each partition of the repartition topic: records of them past the feed close every
    window of every reading task."""
    ends: dict[int, str] = {}
    for n in range(100):
        ends.setdefault(partition_for(f"end-{n}".encode(), PARTITIONS), f"end-{n}")
    return [ends[p] for p in range(PARTITIONS)]


async def feed(bootstrap: str, topic: str, kill: Any) -> Counter[tuple[str, int]]:
    """Views timestamped by the wall clock as they are produced, for FEED_S, calling `kill` on the way; then the
    end records, from every upstream partition to every reading one. What a correct run counts per window."""
    expected: Counter[tuple[str, int]] = Counter()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        started, n, killed = time.monotonic(), 0, False
        while time.monotonic() - started < FEED_S:
            if not killed and time.monotonic() - started > KILL_AFTER_S:
                kill()
                killed = True
            now = time.time_ns() // 1_000_000
            for _ in range(PER_TICK):
                region = REGIONS[n % len(REGIONS)]
                view = json.dumps({"region": region, "n": n}).encode()
                await producer.send(topic, view, key=f"view-{n}".encode(), timestamp_ms=now)
                expected[(region, now - now % WINDOW_MS)] += 1
                n += 1
            await asyncio.sleep(TICK_S)
        past = time.time_ns() // 1_000_000 + 60_000
        for partition in range(PARTITIONS):
            for region in ends_of_every_partition():
                end = json.dumps({"region": region, "n": -1}).encode()
                await producer.send(topic, end, key=b"end", partition=partition, timestamp_ms=past)
        await producer.flush()
    finally:
        await producer.stop()
    return expected


async def test_a_worker_killed_mid_feed_makes_no_view_late_after_a_re_key(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    views, totals, late = topic_name("views"), topic_name("per-region"), topic_name("late")
    path = write_app(tmp_path, app(topic_name, tmp_path, kafka_bootstrap, views, totals, late))
    logs = [tmp_path / "w0.log", tmp_path / "w1.log"]
    workers = [spawn_worker(path, log=log) for log in logs]
    await until(lambda: all("assigned" in read_log(log) for log in logs), "both workers have tasks", timeout=90)
    await asyncio.sleep(2)  # the group settles
    victim, survivor = workers

    def kill() -> None:
        victim.send_signal(signal.SIGKILL)
        victim.wait()

    expected = await feed(kafka_bootstrap, views, kill)

    async def counted() -> dict[tuple[str, int], int]:
        records = await read_topic(kafka_bootstrap, totals)
        return {(r.key.decode(), json.loads(r.value)["start"]): json.loads(r.value)["value"] for r in records}

    deadline = time.monotonic() + 120
    for _ in range(120):  # the survivor takes the killed worker's tasks over and catches up
        if set(await counted()) >= set(expected) or time.monotonic() > deadline:
            break
        await asyncio.sleep(1)
    survivor.send_signal(signal.SIGTERM)
    survivor.wait(60)
    assert await read_topic(kafka_bootstrap, late) == [], "a view of the stalled task came after its window closed"
    assert await counted() == dict(expected), "every window counts every view once"
