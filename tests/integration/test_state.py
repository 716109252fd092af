"""State stores against a real broker: restarts, lost state dirs, moving tasks, crashes, damaged stores."""

from __future__ import annotations

import asyncio
import shutil
import signal
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
from tests.support.kafka_helpers import committed_offsets, create_topic, produce, read_topic
from tests.support.kills import FAST_FAILOVER
from tests.support.running import numbered, spawn_worker, until, write_app

pytestmark = pytest.mark.anyio

KEYS = 97  # numbered() keys records k0..k96


def counting_app(app_id: str, source: str, sink: str, partitions: int, state_dir: Path, backend: str) -> dict[str, Any]:
    return {
        "app_id": app_id,
        "topics": {source: {"partitions": partitions, "key_serde": "str"},
                   sink: {"partitions": partitions, "key_serde": "str"}},
        "processors": [
            {"name": "count", "class": "tests.support.apps:CountPerKey", "inputs": [source], "outputs": [sink],
             "params": {"output": sink}, "stores": {"counts": {"backend": backend}}}
        ],
        "state_dir": str(state_dir),
        "commit_interval_ms": 200,
    }  # fmt: skip


def true_counts(total: int) -> dict[str, int]:
    return dict(Counter(f"k{n % KEYS}" for n in range(total)))


async def final_counts(bootstrap: str, sink: str) -> dict[str, int]:
    latest: dict[str, int] = {}
    for record in await read_topic(bootstrap, sink):
        update = msgpack.unpackb(record.value)
        latest[update["key"]] = max(latest.get(update["key"], 0), update["count"])
    return latest


async def run_until_caught_up(app: dict[str, Any], bootstrap: str) -> Worker:
    worker = Worker(parse_app(app), bootstrap, until_caught_up=True)
    await asyncio.wait_for(worker.run(), 120)
    return worker


@pytest.mark.parametrize("backend", ["rocksdb", "memory"])
async def test_restart_replays_only_the_changelog_tail(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, backend: str
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 2)
    await produce(kafka_bootstrap, source, numbered(2000))
    app = counting_app(topic_name("app"), source, sink, 2, tmp_path / "state", backend)
    first = await run_until_caught_up(app, kafka_bootstrap)
    assert first.counters.restored == 0

    # Writes that reached the changelog after the store's last flush (as if the worker died just then).
    changelog = f"{app['app_id']}-counts-changelog"
    tail = {"k1": 1000, "k2": 2000}
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        for key, count in tail.items():  # into the changelog partition of the task that owns the key
            partition = partition_for(key.encode(), 2)
            await producer.send_and_wait(changelog, msgpack.packb(count), msgpack.packb(key), partition=partition)
    finally:
        await producer.stop()
    changelog_records = len(await read_topic(kafka_bootstrap, changelog, "read_uncommitted"))
    await produce(kafka_bootstrap, source, numbered(500, start=2000))
    second = await run_until_caught_up(app, kafka_bootstrap)
    if backend == "rocksdb":
        assert second.counters.restored == len(tail), "a kept RocksDB store replays only the tail"
    else:
        assert second.counters.restored == changelog_records, "a memory store restores the whole changelog"
    counts = await final_counts(kafka_bootstrap, sink)
    expected = true_counts(2500)
    # k1 and k2 continue from the values injected into the changelog; the others from their true counts.
    assert counts["k1"] == 1000 + expected["k1"] - true_counts(2000)["k1"]
    assert counts["k2"] == 2000 + expected["k2"] - true_counts(2000)["k2"]
    assert {k: v for k, v in counts.items() if k not in ("k1", "k2")} == {
        k: v for k, v in expected.items() if k not in ("k1", "k2")
    }


async def test_deleted_state_dir_is_restored_in_full(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 2)
    await produce(kafka_bootstrap, source, numbered(3000))
    app = counting_app(topic_name("app"), source, sink, 2, tmp_path / "state", "rocksdb")
    await run_until_caught_up(app, kafka_bootstrap)
    shutil.rmtree(tmp_path / "state")

    await produce(kafka_bootstrap, source, numbered(1000, start=3000))
    second = await run_until_caught_up(app, kafka_bootstrap)
    assert second.counters.restored >= KEYS, "every key came back from the changelog"
    assert await final_counts(kafka_bootstrap, sink) == true_counts(4000)


async def test_full_store_buffers_bring_the_commit_before_its_interval(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    """A store of many keys holds about 200 bytes a record until its commit: past `store_buffer_mb`, the
    commit comes early, though the interval is ten minutes away."""
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 2)
    total = 40_000  # about 7 MB of buffered writes: 1 MB is passed every 5,000 or so
    await produce(kafka_bootstrap, source, [(f"key-{n}".encode(), msgpack.packb({"n": n})) for n in range(total)])
    app = counting_app(topic_name("app"), source, sink, 2, tmp_path / "state", "rocksdb")
    # Batches of 500 records: the bound is checked after each.
    app |= {"commit_interval_ms": 600_000, "store_buffer_mb": 1, "kafka": {"consumer": {"max_poll_records": 500}}}
    worker = Worker(parse_app(app), kafka_bootstrap)
    running = asyncio.create_task(worker.run())
    try:
        await until(lambda: worker.counters.processed == total, "every record is processed")
        # Under at-least-once the tasks go on while a commit runs, so each commit takes in about 2 MB.
        await until(lambda: worker.counters.commits >= 2, "the full buffers brought commits")
        committed = sum((await committed_offsets(kafka_bootstrap, app["app_id"])).values())
        assert committed >= total // 2, "commits came as the buffers filled"
        changelog = await read_topic(kafka_bootstrap, f"{app['app_id']}-counts-changelog")
        assert len(changelog) >= committed, "what is committed is in the changelog"
    finally:
        worker.stop()
        await asyncio.wait_for(running, 60)


async def test_damaged_store_is_detected_and_rebuilt(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 1)
    await produce(kafka_bootstrap, source, numbered(1000))
    app = counting_app(topic_name("app"), source, sink, 1, tmp_path / "state", "rocksdb")
    await run_until_caught_up(app, kafka_bootstrap)

    store_dir = tmp_path / "state" / app["app_id"] / "counts" / "0"
    for file in store_dir.iterdir():
        if file.name.startswith(("MANIFEST", "CURRENT")) or file.suffix == ".sst":
            file.write_bytes(b"garbage")
    await produce(kafka_bootstrap, source, numbered(100, start=1000))
    second = await run_until_caught_up(app, kafka_bootstrap)
    assert "damaged" in caplog.text
    assert second.counters.restored >= KEYS
    assert await final_counts(kafka_bootstrap, sink) == true_counts(1100)


async def test_tasks_move_between_workers_and_totals_stay_exact(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 4)
    total = 8000
    app = counting_app(topic_name("app"), source, sink, 4, tmp_path / "state", "rocksdb")
    app["kafka"] = {"bootstrap_servers": kafka_bootstrap}
    # Each worker has its own state dir, as on separate machines: moved tasks restore from changelogs.
    first_app = write_app(tmp_path, {**app, "state_dir": str(tmp_path / "a")}, "a.yaml")
    second_app = write_app(tmp_path, {**app, "state_dir": str(tmp_path / "b")}, "b.yaml")

    first = spawn_worker(first_app, log=tmp_path / "a.log")
    second = None
    for batch in range(8):  # input keeps flowing while the second worker comes and goes
        await produce(kafka_bootstrap, source, numbered(total // 8, start=batch * total // 8))
        if batch in (2, 6):  # joins: half the tasks move to it and restore there
            second = spawn_worker(second_app, log=tmp_path / "b.log")
        if batch == 4 and second is not None:  # leaves: its tasks move back and restore the tail it wrote
            second.send_signal(signal.SIGTERM)
            assert second.wait(timeout=60) == 0
        await asyncio.sleep(1.5)
    assert second is not None
    deadline = asyncio.get_running_loop().time() + 90
    while await final_counts(kafka_bootstrap, sink) != true_counts(total):
        assert asyncio.get_running_loop().time() < deadline, "totals never became exact"
        await asyncio.sleep(1)
    # On a loaded machine the second worker may join after the first caught up alone: stopped then, it
    # would take its partitions while stopping and restore nothing.
    while "restored store counts" not in (tmp_path / "b.log").read_text():
        assert asyncio.get_running_loop().time() < deadline, "the second worker never took tasks over"
        await asyncio.sleep(0.5)
    for worker in (first, second):
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
    # The second worker starts with an empty state dir each time: the tasks it takes restore there.
    assert "restored store counts" in (tmp_path / "b.log").read_text()
    assert "revoked 2 partitions" in (tmp_path / "a.log").read_text(), "tasks moved back when it left"
    assert await final_counts(kafka_bootstrap, sink) == true_counts(total)


async def test_kill_9_loses_no_update(kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 2)
    total = 20000
    await produce(kafka_bootstrap, source, numbered(total))
    app = counting_app(topic_name("app"), source, sink, 2, tmp_path / "state", "rocksdb")
    app["kafka"] = {"bootstrap_servers": kafka_bootstrap, "consumer": FAST_FAILOVER}
    app["processors"][0]["class"] = "tests.support.apps:SlowCountPerKey"
    path = write_app(tmp_path, app)
    for round_ in range(3):
        victim = spawn_worker(path, log=tmp_path / f"victim{round_}.log")
        await asyncio.sleep(3)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
    last = spawn_worker(path, "--until-caught-up", log=tmp_path / "last.log")
    assert last.wait(timeout=180) == 0
    counts = await final_counts(kafka_bootstrap, sink)
    expected = true_counts(total)
    assert set(counts) == set(expected)
    short = {key: (counts[key], expected[key]) for key in expected if counts[key] < expected[key]}
    assert not short, f"updates were lost: {short}"
