"""Windowed aggregations against a real broker: random out-of-order input, some of it late, and results
compared with the plain-Python reference of tests/support/window_reference.py, computed per partition
from the input as the topic holds it (each task has its own stream time)."""

from __future__ import annotations

import asyncio
import random
import shutil
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import msgpack
import pytest
from aiokafka import AIOKafkaProducer

from processors.windows.late import LATE_REASON
from runtime.config import parse_app
from runtime.worker.worker import Worker
from tests.conftest import TopicNamer
from tests.integration.test_exactly_once import wait_exit
from tests.support.kafka_helpers import create_topic, read_topic
from tests.support.kills import FAST_FAILOVER, kill_and_replace
from tests.support.running import spawn_worker, write_app
from tests.support.window_reference import Arrival, expected_for, frozen, results

pytestmark = pytest.mark.anyio

PARTITIONS = 2
# A window definition and an aggregation for each window type, sized for the input of `out_of_order`.
CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "tumbling": ({"type": "tumbling", "size_ms": 1000, "grace_ms": 200}, {"type": "sum", "field": "n"}),
    "hopping": ({"type": "hopping", "size_ms": 1000, "advance_ms": 250, "grace_ms": 200}, {"type": "count"}),
    "sliding": ({"type": "sliding", "time_difference_ms": 400, "grace_ms": 200}, {"type": "max", "field": "n"}),
    "session": ({"type": "session", "gap_ms": 300, "grace_ms": 200}, {"type": "list", "field": "n", "max_items": 5}),
}


def window_app(app_id: str, topics: dict[str, str], state_dir: Path, window: dict[str, Any],
               aggregation: dict[str, Any], **params: Any) -> dict[str, Any]:  # fmt: skip
    """`topics` names the input (`in`), the results (`out`) and the late records (`late`)."""
    return {
        "app_id": app_id,
        "topics": {topic: {"partitions": PARTITIONS, "key_serde": "str"} for topic in topics.values()},
        "processors": [
            {
                "name": "windows",
                "class": "processors.windows:Aggregate",
                "inputs": [topics["in"]],
                "outputs": [topics["out"], topics["late"]],
                "params": {"window": window, "aggregation": aggregation, "output": topics["out"],
                           "late_topic": topics["late"], **params},
            }
        ],
        "state_dir": str(state_dir),
        "commit_interval_ms": 200,
    }  # fmt: skip


def out_of_order(seed: int, count: int, keys: int = 6) -> list[Arrival]:
    """Records about 20 ms apart in time, a few of them out of order by up to 3 s (late, past the grace)."""
    rng = random.Random(seed)
    now = int(time.time() * 1000) - 600_000  # recent enough for any broker's timestamp checks
    records = []
    for _ in range(count):
        now += rng.randint(0, 40)
        timestamp = now - rng.choice([0, 0, 0, 0, 0, 30, 150, 600, 3000])
        records.append((f"user-{rng.randrange(keys)}", timestamp, rng.randint(1, 100)))
    return records


async def produce_timed(bootstrap: str, topic: str, records: list[Arrival]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        sent = [await producer.send(topic, msgpack.packb({"n": value}), key=key.encode(), timestamp_ms=timestamp)
                for key, timestamp, value in records]  # fmt: skip
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


async def reference(bootstrap: str, source: str, window: dict[str, Any], aggregation: dict[str, Any],
                    closed_only: bool = True) -> tuple[Counter[Any], set[tuple[int, int]]]:  # fmt: skip
    """The results and the late records ((partition, offset)) the input topic's records must give."""
    by_partition: dict[int, list[Any]] = defaultdict(list)
    for record in await read_topic(bootstrap, source):
        by_partition[record.partition].append(record)
    expected: Counter[Any] = Counter()
    late: set[tuple[int, int]] = set()
    for partition, records in by_partition.items():
        arrivals = [(record.key.decode(), record.timestamp, msgpack.unpackb(record.value)["n"]) for record in records]
        found = expected_for(window, arrivals)
        expected += results(found.closed() if closed_only else found.windows, aggregation)
        late |= {(partition, records[arrival].offset) for arrival in found.late}
    return expected, late


async def emitted(bootstrap: str, topic: str) -> list[tuple[str, int, int, Any]]:
    """(key, start, end, result) of every record of `topic`, read_committed, in each partition's order."""
    emitted = []
    for record in await read_topic(bootstrap, topic, "read_committed"):
        value = msgpack.unpackb(record.value)
        emitted.append((record.key.decode(), value["start"], value["end"], frozen(value["value"])))
    return emitted


async def run_until_caught_up(app: dict[str, Any], bootstrap: str) -> Worker:
    worker = Worker(parse_app(app), bootstrap, until_caught_up=True)
    await asyncio.wait_for(worker.run(), 120)
    return worker


@pytest.mark.parametrize("kind", list(CASES))
async def test_final_results_equal_the_reference_also_after_the_state_was_deleted(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, kind: str
) -> None:
    """The input comes in two halves; between them the app's state directory is deleted, so the second
    run restores the windows, and their stream time, from the changelog."""
    topics = {role: topic_name(role) for role in ("in", "out", "late")}
    for topic in topics.values():
        await create_topic(kafka_bootstrap, topic, PARTITIONS)
    window, aggregation = CASES[kind]
    app = window_app(topic_name("app"), topics, tmp_path / "state", window, aggregation)
    records = out_of_order(seed=len(kind), count=1200)
    await produce_timed(kafka_bootstrap, topics["in"], records[:600])
    first = await run_until_caught_up(app, kafka_bootstrap)
    shutil.rmtree(tmp_path / "state")
    await produce_timed(kafka_bootstrap, topics["in"], records[600:])
    second = await run_until_caught_up(app, kafka_bootstrap)
    assert second.counters.restored > 0, "the second run did not restore the deleted windows"

    expected, late = await reference(kafka_bootstrap, topics["in"], window, aggregation)
    results_out = await emitted(kafka_bootstrap, topics["out"])
    assert Counter(results_out) == expected
    assert len(set(results_out)) == len(results_out), "a window's final result was emitted twice"
    assert 20 < len(late) < len(records) / 3, f"{len(late)} late records of {len(records)}: not what the test is for"
    late_records = await read_topic(kafka_bootstrap, topics["late"])
    assert {
        (int(dict(r.headers)["source.partition"]), int(dict(r.headers)["source.offset"])) for r in late_records
    } == late
    assert all(dict(record.headers)[LATE_REASON] for record in late_records)
    inputs = {(r.partition, r.offset): r for r in await read_topic(kafka_bootstrap, topics["in"])}
    for record in late_records:  # as they came: same key and value bytes, the original timestamp in a header
        source = inputs[(int(dict(record.headers)["source.partition"]), int(dict(record.headers)["source.offset"]))]
        assert (record.key, record.value) == (source.key, source.value)
        assert dict(record.headers)["source.timestamp"] == str(source.timestamp).encode()
    counted = [worker.counters.by_processor.get("windows", {}).get("late_records", 0) for worker in (first, second)]
    assert sum(counted) == len(late)


async def test_updates_come_at_most_once_per_window_and_commit_and_end_at_the_results(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    topics = {role: topic_name(role) for role in ("in", "out", "late")}
    for topic in topics.values():
        await create_topic(kafka_bootstrap, topic, PARTITIONS)
    window, aggregation = CASES["tumbling"]
    app = window_app(topic_name("app"), topics, tmp_path / "state", window, aggregation, emit="updates")
    app["commit_interval_ms"] = 50
    app["processors"][0]["class"] = "tests.support.window_apps:SlowAggregate"  # several commits per window
    records = out_of_order(seed=7, count=2000, keys=3)
    await produce_timed(kafka_bootstrap, topics["in"], records)
    worker = await run_until_caught_up(app, kafka_bootstrap)

    updates = await emitted(kafka_bootstrap, topics["out"])
    per_window = Counter((key, start, end) for key, start, end, _ in updates)
    assert max(per_window.values()) <= worker.counters.commits
    assert len(updates) < len(records) / 4, "updates were not held back until the commits"
    latest = {(key, start, end): value for key, start, end, value in updates}  # each partition's last
    expected, _ = await reference(kafka_bootstrap, topics["in"], window, aggregation, closed_only=False)
    assert Counter((*where, value) for where, value in latest.items()) == expected


@pytest.mark.parametrize("kind", ["hopping", "session"])
async def test_final_results_come_exactly_once_through_kills_and_rebalances(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, kind: str
) -> None:
    """Under exactly-once, two workers share the partitions; one of them, at random, is killed at a random
    moment (after the group committed something more, so mid-stream) five times over, and a new one joins
    in its place: each kill and each join moves partitions, and with them open windows (sessions, which
    merge and delete entries, too), between workers. Read_committed, every window's result is there
    once, with its value."""
    topics = {role: topic_name(role) for role in ("in", "out", "late")}
    for topic in topics.values():
        await create_topic(kafka_bootstrap, topic, PARTITIONS)
    window, aggregation = CASES[kind]
    app = window_app(topic_name("app"), topics, tmp_path / "state", window, aggregation)
    app.update(guarantee="exactly_once", commit_interval_ms=100, kafka={"bootstrap_servers": kafka_bootstrap,
                                                                        "consumer": FAST_FAILOVER})  # fmt: skip
    app["processors"][0]["class"] = "tests.support.window_apps:SlowAggregate"
    records = out_of_order(seed=5, count=5000)
    await produce_timed(kafka_bootstrap, topics["in"], records)
    path = write_app(tmp_path, app)
    committed = await kill_and_replace(path, kafka_bootstrap, app["app_id"], tmp_path, seed=5)
    assert committed < len(records), "the kills did not land mid-stream"
    finisher = spawn_worker(path, "--until-caught-up", log=tmp_path / "finisher.log")
    assert await wait_exit(finisher, 120) == 0

    expected, _ = await reference(kafka_bootstrap, topics["in"], window, aggregation)
    results_out = await emitted(kafka_bootstrap, topics["out"])
    assert len(set(results_out)) == len(results_out), "a window's final result was committed twice"
    assert Counter(results_out) == expected
