"""Replay by key and time against a real broker: only the key's partition, exactly its records in the range,
the partition its producer chose (Java's partitioner or librdkafka's), and a range that retention deleted
said so plainly."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from confluent_kafka import Producer

from runtime.replay.partitioners import PARTITIONERS
from runtime.replay.scan import RangeGone, Replay, replay
from tests.conftest import TopicNamer
from tests.support.kafka_helpers import create_topic
from tests.support.running import REPO

KEYS = [f"acc-{n:04d}" for n in range(20)]


async def replayed(bootstrap: str, what: Replay, partitions: int) -> list[Any]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    await consumer.start()
    try:
        return [record async for record in replay(consumer, what, partitions)]
    finally:
        await consumer.stop()


async def activity(bootstrap: str, topic: str, start: int) -> list[tuple[str, int]]:
    """Each key's events a second apart in turn, 30 rounds: (key, timestamp) in the order produced."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    written = []
    try:
        sent = []
        for n in range(30 * len(KEYS)):
            key, timestamp = KEYS[n % len(KEYS)], start + n * 1000
            value = json.dumps({"n": n}).encode()
            sent.append(await producer.send(topic, value, key=key.encode(), timestamp_ms=timestamp))
            written.append((key, timestamp))
        await asyncio.gather(*sent)
    finally:
        await producer.stop()
    return written


def test_the_partition_of_a_key_is_the_one_its_producer_chose(kafka_bootstrap: str, topic_name: TopicNamer) -> None:
    topic = topic_name("keys")
    asyncio.run(create_topic(kafka_bootstrap, topic, 6))
    rng = random.Random(7)
    keys = [rng.randbytes(rng.randint(1, 40)) for _ in range(10_000)]

    async def chosen() -> list[tuple[bytes, int]]:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=20)
        await producer.start()
        try:
            sent = [await producer.send(topic, b"", key=key) for key in keys]
            return [(key, (await acked).partition) for key, acked in zip(keys, sent, strict=True)]
        finally:
            await producer.stop()

    assert all(Replay(topic, key).partition_of(6) == partition for key, partition in asyncio.run(chosen()))


def librdkafka_placed(bootstrap: str, topic: str, keys: list[bytes], partitioner: str | None = None) -> list[int]:
    """Each key sent by librdkafka (confluent-kafka), with `partitioner` (default: its own default): the
    partition it chose for each."""
    producer = Producer({"bootstrap.servers": bootstrap, **({"partitioner": partitioner} if partitioner else {})})
    placed: dict[bytes, set[int]] = {}

    def delivered(error: Any, message: Any) -> None:
        assert error is None, error
        placed.setdefault(message.key(), set()).add(message.partition())

    for index, key in enumerate(keys):
        producer.produce(topic, value=json.dumps({"n": index}).encode(), key=key, on_delivery=delivered)
    assert producer.flush(30) == 0
    assert all(len(partitions) == 1 for partitions in placed.values())  # a key's records, in one partition
    return [min(placed[key]) for key in keys]


def test_librdkafkas_partitioners_put_each_key_where_replay_looks(kafka_bootstrap: str, topic_name: TopicNamer) -> None:
    topic = topic_name("librdkafka")
    asyncio.run(create_topic(kafka_bootstrap, topic, 7))
    rng = random.Random(11)
    keys = [rng.randbytes(rng.randint(1, 40)) for _ in range(300)]
    for name, partitioner in PARTITIONERS.items():
        placed = librdkafka_placed(kafka_bootstrap, topic, keys, name)
        assert [partitioner.partition(key, 7) for key in keys] == placed, name


def test_a_key_librdkafka_placed_is_found_with_its_partitioner_and_its_absence_told(
    kafka_bootstrap: str, topic_name: TopicNamer
) -> None:
    topic = topic_name("crc32")
    asyncio.run(create_topic(kafka_bootstrap, topic, 6))
    keys = [f"acc-{n:04d}".encode() for n in range(40)] * 3
    placed = librdkafka_placed(kafka_bootstrap, topic, keys)  # librdkafka's default: consistent_random
    key = next(k for k in keys if PARTITIONERS["consistent_random"].partition(k, 6) != Replay(topic, k).partition_of(6))
    crc32 = PARTITIONERS["consistent_random"].partition(key, 6)
    assert {partition for k, partition in zip(keys, placed, strict=True) if k == key} == {crc32}

    def replay_command(*options: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "runtime", "replay", topic, "--key", key.decode(), "--no-progress", *options]
        return subprocess.run(command, cwd=REPO, env=_env(kafka_bootstrap), capture_output=True, text=True, check=False)

    missed = replay_command()
    assert missed.returncode == 0 and missed.stdout == "", missed.stderr
    told = missed.stderr.strip().splitlines()
    assert len(told) == 1 and told[0].startswith(f"no record of key '{key.decode()}' in {topic}["), missed.stderr
    assert f"--partitioner consistent_random or --partitioner consistent reads partition {crc32}" in told[0]
    found = replay_command("--partitioner", "consistent_random")
    assert found.returncode == 0, found.stderr
    lines = [json.loads(line) for line in found.stdout.splitlines()]
    assert [(line["key"], line["partition"]) for line in lines] == [(key.decode(), crc32)] * 3
    assert f"3 records from {topic}[{crc32}]" in found.stderr


def test_a_replay_is_exactly_the_keys_records_in_the_range_in_offset_order(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    topic = topic_name("activity")
    asyncio.run(create_topic(kafka_bootstrap, topic, 3))
    start = time.time_ns() // 1_000_000 - 3_600_000
    written = asyncio.run(activity(kafka_bootstrap, topic, start))
    key = KEYS[3]
    begin, end = start + 103_000, start + 403_000  # the key's events fall on these two times exactly
    expected = [t for k, t in written if k == key and begin <= t < end]
    assert expected[0] == begin and end in [t for k, t in written if k == key]  # both bounds are on the key's events
    found = asyncio.run(replayed(kafka_bootstrap, Replay(topic, key.encode(), start_ms=begin, end_ms=end), 3))
    assert [r.timestamp for r in found] == expected  # the start included, the end not, nothing else
    assert [r.offset for r in found] == sorted(r.offset for r in found)
    assert {r.partition for r in found} == {Replay(topic, key.encode()).partition_of(3)}
    assert asyncio.run(replayed(kafka_bootstrap, Replay(topic, b"acc-9999", start_ms=begin, end_ms=end), 3)) == []
    assert asyncio.run(replayed(kafka_bootstrap, Replay(topic, key.encode(), start_ms=begin, end_ms=begin + 1), 3))
    empty = Replay(topic, key.encode(), start_ms=begin + 1, end_ms=begin + 1000)  # between two of its events
    assert asyncio.run(replayed(kafka_bootstrap, empty, 3)) == []
    # The same from the command line, as JSON lines in a file.
    output = tmp_path / "replay.jsonl"
    command = [sys.executable, "-m", "runtime", "replay", topic, "--key", key, "--from", _iso(begin), "--to",
               _iso(end), "--output", str(output), "--no-progress"]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, env=_env(kafka_bootstrap), capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert [(line["key"], line["timestamp"]) for line in lines] == [(key, t) for t in expected]
    assert f"{len(expected)} records from {topic}" in done.stderr


def test_a_range_that_retention_deleted_is_said_so(kafka_bootstrap: str, topic_name: TopicNamer) -> None:
    topic = topic_name("old")
    asyncio.run(create_topic(kafka_bootstrap, topic, 1))
    start = time.time_ns() // 1_000_000 - 3_600_000
    asyncio.run(activity(kafka_bootstrap, topic, start))

    async def delete_first(count: int) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        await admin.start()
        try:
            await admin.delete_records({TopicPartition(topic, 0): RecordsToDelete(count)})
        finally:
            await admin.close()

    asyncio.run(delete_first(100))  # as retention would: the first 100 seconds are gone
    gone = Replay(topic, partition=0, start_ms=start, end_ms=start + 50_000)
    with pytest.raises(RangeGone, match=r"the range ends before the oldest record .*\[0\] still holds \(offset 100"):
        asyncio.run(replayed(kafka_bootstrap, gone, 1))
    partly = Replay(topic, partition=0, start_ms=start, end_ms=start + 150_000)  # what is left of it
    assert len(asyncio.run(replayed(kafka_bootstrap, partly, 1))) == 50
    command = [sys.executable, "-m", "runtime", "replay", topic, "--partition", "0", "--from", _iso(start), "--to",
               _iso(start + 50_000), "--no-progress"]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, env=_env(kafka_bootstrap), capture_output=True, text=True, check=False)
    assert done.returncode == 1 and "retention deleted what it covered" in done.stderr


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _env(bootstrap: str) -> dict[str, str]:
    return {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "PYTHONPATH": str(REPO)}
