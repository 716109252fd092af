"""Standby replicas against a real broker: a worker killed -9, and its task taken over from a warm standby."""

from __future__ import annotations

import asyncio
import re
import signal
from collections import Counter, defaultdict
from pathlib import Path

import msgpack
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from runtime.commands.cluster import Cluster
from runtime.commands.standby_lags import standby_lags
from runtime.config import load_app
from runtime.worker.transactional_ids import TransactionalId
from stores.rocksdb import stored_offset
from tests.conftest import TopicNamer
from tests.integration.test_state import KEYS, counting_app
from tests.support.kafka_helpers import create_topic, produce, read_topic
from tests.support.kills import FAST_FAILOVER
from tests.support.running import numbered, read_log, running_tasks, spawn_worker, until, write_app

pytestmark = pytest.mark.anyio


async def changelog_ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
        return {tp.partition: end for tp, end in ends.items()}
    finally:
        await consumer.stop()


async def updates_by_key(bootstrap: str, sink: str) -> dict[str, list[int]]:
    counts: dict[str, list[int]] = defaultdict(list)
    for record in await read_topic(bootstrap, sink):
        update = msgpack.unpackb(record.value)
        counts[update["key"]].append(update["count"])
    return counts


def exact(updates: dict[str, list[int]], total: int) -> bool:
    """Every key's counts 1..n, each once: nothing lost, nothing counted twice."""
    expected = Counter(f"k{n % KEYS}" for n in range(total))
    return {key: sorted(counts) for key, counts in updates.items()} == {
        key: list(range(1, n + 1)) for key, n in expected.items()
    }


def running(log: Path) -> set[int]:
    """The partitions of the worker's tasks: a cooperative rebalance stops only the tasks that move."""
    return {int(p) for task in running_tasks(log) for p in re.findall(r"count\[(\d+)\]", task)}


async def counts_exact(bootstrap: str, sink: str, total: int) -> None:
    deadline = asyncio.get_running_loop().time() + 30
    while not exact(await updates_by_key(bootstrap, sink), total):
        assert asyncio.get_running_loop().time() < deadline, f"the counts of {total} records never became exact"
        await asyncio.sleep(0.3)


async def caught_up(bootstrap: str, changelog: TopicPartition, store: Path) -> int:
    """The standby's position in a worker's state dir, once it reaches the changelog's end."""
    deadline = asyncio.get_running_loop().time() + 30
    while (position := stored_offset(store)) != (await changelog_ends(bootstrap, changelog.topic, 2))[
        changelog.partition
    ]:
        assert asyncio.get_running_loop().time() < deadline, f"the standby stayed at {position}"
        await asyncio.sleep(0.2)
    assert position is not None
    return position


def restore_reported(log: str, partition: int, warm: int, end: int) -> None:
    """The restore of the task taken over (the last of the partition's in the log) began where the standby was,
    and replayed only what it lacked."""
    up_to_date_or_replayed = r"(?:is up to date \(changelog offset (\d+)\)|from its changelog: offsets (\d+)\.\.)"
    began = re.findall(rf"store counts partition {partition} {up_to_date_or_replayed}", log)
    assert began, log
    up_to_date, replay_from = began[-1]
    if up_to_date:  # the standby had all of it
        assert int(up_to_date) >= warm, log
        return
    replayed = int(re.findall(rf"restored store counts partition {partition}: (\d+) records", log)[-1])
    assert int(replay_from) >= warm, "the restore starts where the standby was, not from the beginning"
    assert replayed <= end - warm, "only what the standby had not applied yet is replayed"
    assert replayed < warm, "far less than the whole store's changelog"


async def end_open_transaction(bootstrap: str, killed: Path) -> None:
    """What the killed worker's restart would do first: end the transaction it left open, which otherwise holds
    back its task's next owner until the broker times it out (up to its cleanup interval, 10 s, later)."""
    transactional_id = TransactionalId(load_app(killed))
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id.value)
    try:
        await producer.start()
        await producer.stop()
    finally:
        transactional_id.close()


async def test_a_killed_workers_task_resumes_from_the_standby_replaying_only_its_lag(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 2)
    app = counting_app(topic_name("app"), source, sink, 2, tmp_path / "state", "rocksdb")
    app |= {"standby_replicas": 1, "guarantee": "exactly_once"}
    app["processors"][0]["class"] = "tests.support.apps:SlowCountPerKey"
    app["kafka"] = {"bootstrap_servers": kafka_bootstrap, "consumer": FAST_FAILOVER}
    # Each worker has its own state dir, as on separate machines.
    paths = {name: write_app(tmp_path, {**app, "state_dir": str(tmp_path / name)}, f"{name}.yaml") for name in "ab"}
    logs = {name: tmp_path / f"{name}.log" for name in "ab"}
    first, second = (spawn_worker(paths[name], log=logs[name]) for name in "ab")
    await produce(kafka_bootstrap, source, numbered(2000))
    tasks: dict[str, set[int]] = {}

    def one_task_each() -> bool:
        tasks.update({name: running(log) for name, log in logs.items()})
        return len(tasks["a"]) == len(tasks["b"]) == 1 and tasks["a"] != tasks["b"]

    await until(one_task_each, "each worker runs one task", 30)
    (victim,) = tasks["a"]
    await counts_exact(kafka_bootstrap, sink, 2000)
    changelog = TopicPartition(f"{app['app_id']}-counts-changelog", victim)
    warm = await caught_up(kafka_bootstrap, changelog, tmp_path / "b" / app["app_id"] / "counts" / str(victim))
    assert warm > 0
    # describe --standbys beside the second worker: its standby read where it is, the other's as it joined
    config = load_app(paths["b"])
    lags = {lag.task: lag for lag in await standby_lags(Cluster(kafka_bootstrap, config.kafka, config, None), config)}
    assert sorted(lags) == ["count[0]", "count[1]"]
    assert lags[f"count[{victim}]"].live and lags[f"count[{victim}]"].lag == 0
    assert not lags[f"count[{1 - victim}]"].live
    await produce(kafka_bootstrap, source, numbered(600, start=2000))
    await asyncio.sleep(0.2)  # the first worker is mid-stream when it dies
    before_the_kill = len(read_log(logs["b"]))  # the second worker may have run the task once, before the first joined
    first.send_signal(signal.SIGKILL)
    first.wait()
    await end_open_transaction(kafka_bootstrap, paths["a"])

    def since_the_kill() -> str:
        return read_log(logs["b"])[before_the_kill:]

    took_over = re.compile(rf"store counts partition {victim} (is up to date|from its changelog)")
    await until(lambda: took_over.search(since_the_kill()) is not None, "the second worker took the task over", 30)
    await counts_exact(kafka_bootstrap, sink, 2600)
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=30) == 0
    end = (await changelog_ends(kafka_bootstrap, changelog.topic, 2))[victim]
    restore_reported(since_the_kill(), victim, warm, end)


async def test_a_joining_worker_warms_up_before_it_takes_its_task_and_the_probe_hands_it_over(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 2)
    app = counting_app(topic_name("app"), source, sink, 2, tmp_path / "state", "rocksdb")
    app |= {"standby_replicas": 1, "acceptable_recovery_lag": 20, "probing_rebalance_interval_ms": 1000}
    app["kafka"] = {"bootstrap_servers": kafka_bootstrap, "consumer": FAST_FAILOVER}
    paths = {name: write_app(tmp_path, {**app, "state_dir": str(tmp_path / name)}, f"{name}.yaml") for name in "ab"}
    logs = {name: tmp_path / f"{name}.log" for name in "ab"}
    first = spawn_worker(paths["a"], log=logs["a"])
    await produce(kafka_bootstrap, source, numbered(300))
    await counts_exact(kafka_bootstrap, sink, 300)
    second = spawn_worker(paths["b"], log=logs["b"])
    await until(lambda: any("warm-ups under way" in read_log(log) for log in logs.values()), "a warm-up", 20)
    assert running(logs["b"]) == set(), "the joining worker runs nothing while it lags"
    await until(lambda: len(running(logs["a"])) == len(running(logs["b"])) == 1, "the probe moved a task", 20)
    (moved,) = running(logs["b"])
    restored = re.compile(
        rf"store counts partition {moved} is up to date|restored store counts partition {moved}: (\d+)"
    )
    await until(lambda: restored.search(read_log(logs["b"])) is not None, "the moved task's store opened", 20)
    match = restored.search(read_log(logs["b"]))
    assert match is not None and int(match.group(1) or 0) <= 20, "the warm-up left at most the acceptable lag"
    await produce(kafka_bootstrap, source, numbered(100, start=300))
    await counts_exact(kafka_bootstrap, sink, 400)
    for worker in (first, second):
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
