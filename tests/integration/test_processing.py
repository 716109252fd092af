"""Runtime core against a real broker: order, rebalances, shutdown, guarantees, until-caught-up."""

from __future__ import annotations

import asyncio
import signal
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

import msgpack
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from runtime.config import parse_app
from runtime.worker.worker import Worker
from tests.conftest import TopicNamer
from tests.support.kafka_helpers import create_topic, produce, read_topic
from tests.support.kills import FAST_FAILOVER
from tests.support.running import numbered, spawn_worker, write_app

pytestmark = pytest.mark.anyio


def echo_app(app_id: str, source: str, sink: str, partitions: int, **extra: Any) -> dict[str, Any]:
    params = {"output": sink, **extra.pop("params", {})}
    return {
        "app_id": app_id,
        "topics": {source: {"partitions": partitions, "key_serde": "str"},
                   sink: {"partitions": partitions, "key_serde": "str"}},
        "processors": [
            {"name": "echo", "class": "tests.support.apps:Echo", "inputs": [source], "outputs": [sink],
             "params": params}
        ],
        "commit_interval_ms": 200,
        **extra,
    }  # fmt: skip


async def wait_for_count(bootstrap: str, topic: str, count: int, timeout: float = 90.0) -> list[Any]:
    deadline = time.monotonic() + timeout
    while True:
        records = await read_topic(bootstrap, topic)
        if len({msgpack.unpackb(r.value)["value"]["n"] for r in records}) >= count:
            return records
        assert time.monotonic() < deadline, f"only {len(records)} of {count} records reached {topic}"
        await asyncio.sleep(0.5)


def first_seen_in_order(records: list[Any]) -> dict[int, list[int]]:
    """Source offsets per source partition in the order first seen; replays after a rebalance repeat."""
    seen: set[tuple[int, int]] = set()
    order: dict[int, list[int]] = {}
    for record in records:
        partition, offset = msgpack.unpackb(record.value)["src"]
        if (partition, offset) not in seen:
            seen.add((partition, offset))
            order.setdefault(partition, []).append(offset)
    return order


async def test_order_and_completeness_across_rebalances(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 4)
    total = 6000
    await produce(kafka_bootstrap, source, numbered(total))
    # About 7 s of processing per partition, so both the join and the leave happen mid-stream.
    app = echo_app(topic_name("app"), source, sink, 4, params={"sleep_ms": 5})
    app["kafka"] = {"bootstrap_servers": kafka_bootstrap}
    path = write_app(tmp_path, app)

    first = spawn_worker(path, log=tmp_path / "first.log")
    await asyncio.sleep(2)
    second = spawn_worker(path, log=tmp_path / "second.log")  # joins: partitions move
    await asyncio.sleep(3)
    first.send_signal(signal.SIGTERM)  # leaves: its partitions move back
    assert first.wait(timeout=60) == 0
    records = await wait_for_count(kafka_bootstrap, sink, total)
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=60) == 0

    # Cooperative: the join moves two of the first worker's partitions, its leave the other two.
    assert "revoked 2 partitions" in (tmp_path / "first.log").read_text()
    assert (tmp_path / "second.log").read_text().count("assigned 2 partitions") == 2
    values = {msgpack.unpackb(r.value)["value"]["n"] for r in records}
    assert values == set(range(total))
    for partition, offsets in first_seen_in_order(records).items():
        assert offsets == sorted(offsets), f"partition {partition} processed out of order"
    # Each output landed where Kafka's partitioner puts its key, like the input did.
    source_records = await read_topic(kafka_bootstrap, source)
    partition_of_key = {r.key: r.partition for r in source_records}
    assert all(partition_of_key[r.key] == r.partition for r in records)


async def test_backpressure_pauses_without_rebalance(kafka_bootstrap: str, topic_name: TopicNamer) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 1)
    await produce(kafka_bootstrap, source, numbered(300), max_batch_size=512)  # small batches: small fetches
    app = echo_app(topic_name("app"), source, sink, 1, params={"sleep_ms": 30})
    app["queue"] = {"pause_at": 40, "resume_at": 10}
    # Fetches of ~1 KiB (about 50 small records) and a poll interval shorter than processing one fetch.
    app["kafka"] = {"consumer": {"max_partition_fetch_bytes": 1024, "max_poll_interval_ms": 1000,
                                 "session_timeout_ms": 6000, "heartbeat_interval_ms": 500}}  # fmt: skip
    worker = Worker(parse_app(app), kafka_bootstrap)
    running = asyncio.create_task(worker.run())
    saw_paused = False
    deadline = time.monotonic() + 60
    while worker.counters.processed < 300:
        assert time.monotonic() < deadline, f"stuck at {worker.counters.snapshot()}"
        assert not running.done(), "worker exited early"
        saw_paused = saw_paused or bool(worker.paused_partitions)
        await asyncio.sleep(0.05)
    worker.stop()
    await running
    counters = worker.counters
    assert saw_paused
    assert counters.pauses >= 2 and counters.resumes >= 2
    assert counters.assignments == 1 and counters.revocations == 0, "a rebalance happened"
    assert counters.max_queued < 40 + 100, "the queue grew past its bound plus one fetch"
    assert len(await read_topic(kafka_bootstrap, sink)) == 300


async def test_graceful_shutdown_commits_everything(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 3)
    await produce(kafka_bootstrap, source, numbered(3000))
    app = echo_app(topic_name("app"), source, sink, 3)
    app["kafka"] = {"bootstrap_servers": kafka_bootstrap}
    path = write_app(tmp_path, app)

    worker = spawn_worker(path)
    await wait_for_count(kafka_bootstrap, sink, 3000)
    started = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
    assert time.monotonic() - started < 15

    again = spawn_worker(path, "--until-caught-up")
    assert again.wait(timeout=60) == 0
    assert len(await read_topic(kafka_bootstrap, sink)) == 3000, "records were processed twice"


async def test_at_most_once_crash_loses_but_never_duplicates(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 1)
    await produce(kafka_bootstrap, source, numbered(2000))
    app = {
        "app_id": topic_name("app"),
        "kafka": {"bootstrap_servers": kafka_bootstrap, "consumer": {"max_poll_records": 100, **FAST_FAILOVER}},
        "topics": {source: {"partitions": 1, "key_serde": "str"}, sink: {"partitions": 1, "key_serde": "str"}},
        "processors": [
            {"name": "crashy", "class": "tests.support.apps:KillOnce", "inputs": [source], "outputs": [sink],
             "params": {"output": sink, "crash_at": 1000, "marker": str(tmp_path / "crashed")}}
        ],
        "guarantee": "at_most_once",
    }  # fmt: skip
    path = write_app(tmp_path, app)
    crashed = spawn_worker(path, "--until-caught-up")
    assert crashed.wait(timeout=60) == -signal.SIGKILL
    resumed = spawn_worker(path, "--until-caught-up")
    assert resumed.wait(timeout=60) == 0

    numbers = [msgpack.unpackb(r.value)["n"] for r in await read_topic(kafka_bootstrap, sink)]
    assert len(numbers) == len(set(numbers)), "at-most-once produced a duplicate"
    lost = sorted(set(range(2000)) - set(numbers))
    assert 1000 in lost, "the record being processed at the crash was committed first, so it is lost"
    # What is lost is the batch in flight (committed before processing) and outputs not yet acknowledged
    # before it: one contiguous run, after which the restarted worker carries on.
    assert lost == list(range(lost[0], lost[-1] + 1)), lost
    assert 1999 in numbers, "the restarted worker goes on after the lost batch"


async def test_until_caught_up_processes_exactly_what_was_there(kafka_bootstrap: str, topic_name: TopicNamer) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 3)
    await produce(kafka_bootstrap, source, numbered(900))
    app = echo_app(topic_name("app"), source, sink, 3, params={"sleep_ms": 2})
    worker = Worker(parse_app(app), kafka_bootstrap, until_caught_up=True)
    running = asyncio.create_task(worker.run())
    await asyncio.wait_for(worker.ready.wait(), 30)
    await produce(kafka_bootstrap, source, numbered(500, start=900))  # after start: not processed
    await asyncio.wait_for(running, 60)
    assert worker.counters.processed == 900
    numbers = sorted(msgpack.unpackb(r.value)["value"]["n"] for r in await read_topic(kafka_bootstrap, sink))
    assert numbers == list(range(900))
    # The commit covers exactly what was processed: the next run starts at the new records.
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=app["app_id"])
    await consumer.start()
    try:
        committed = [await consumer.committed(TopicPartition(source, p)) for p in range(3)]
    finally:
        await consumer.stop()
    source_records = await read_topic(kafka_bootstrap, source)
    expected = [1 + max(r.offset for r in source_records if r.partition == p and msgpack.unpackb(r.value)["n"] < 900)
                for p in range(3)]  # fmt: skip
    assert committed == expected


async def test_workers_option_runs_one_group_of_processes(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 4)
    await produce(kafka_bootstrap, source, numbered(4000))
    app = echo_app(topic_name("app"), source, sink, 4, params={"sleep_ms": 1})
    app["kafka"] = {"bootstrap_servers": kafka_bootstrap}
    log = tmp_path / "workers.log"
    supervisor = spawn_worker(write_app(tmp_path, app), "--workers", "2", "--until-caught-up", log=log)
    assert supervisor.wait(timeout=120) == 0
    pids = {line.split("[")[1].split("]")[0] for line in log.read_text().splitlines() if "assigned" in line}
    assert len(pids) == 2, "two worker processes took part in the group"
    numbers = {msgpack.unpackb(r.value)["value"]["n"] for r in await read_topic(kafka_bootstrap, sink)}
    assert numbers == set(range(4000))


async def test_workers_serve_prometheus_metrics_each_on_a_port_of_its_own(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 2)
    await produce(kafka_bootstrap, source, numbered(2000))
    port = free_port_pair()
    app = echo_app(topic_name("app"), source, sink, 2, params={"sleep_ms": 2})
    app["kafka"] = {"bootstrap_servers": kafka_bootstrap}
    app["telemetry"] = {"metrics": {"exporter": "prometheus", "host": "127.0.0.1", "port": port}}
    log = tmp_path / "workers.log"
    supervisor = spawn_worker(write_app(tmp_path, app), "--workers", "2", "--until-caught-up", log=log)
    scraped: set[int] = set()
    while supervisor.poll() is None and scraped != {port, port + 1}:
        scraped |= {candidate for candidate in (port, port + 1) if serves_runtime_metrics(candidate)}
        await asyncio.sleep(0.1)
    assert supervisor.wait(timeout=120) == 0, log.read_text()
    assert scraped == {port, port + 1}, "each worker served its metrics on its own port while it ran"
    served = {line.rsplit(" at ", 1)[1] for line in log.read_text().splitlines() if "serving Prometheus" in line}
    assert served == {f"http://127.0.0.1:{port}/metrics", f"http://127.0.0.1:{port + 1}/metrics"}


def free_port_pair() -> int:
    """A port such that it and the next one are free on 127.0.0.1 (now)."""
    for _ in range(50):
        with socket.socket() as first, socket.socket() as second:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            try:
                second.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return int(port)
    raise RuntimeError("no two free neighbouring ports")


def serves_runtime_metrics(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as response:
            return "kafka_actor_records_consumed_total" in response.read().decode()
    except OSError:
        return False
