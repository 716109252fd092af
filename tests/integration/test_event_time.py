"""Event time against a real broker: co-partitioned inputs merged in timestamp order (also waiting for
records that arrive later), a timestamp field missing from a record under each error policy, and
stream-time punctuation driven by event time rather than the wall clock."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable
from typing import Any

import msgpack
import pytest
from aiokafka import AIOKafkaProducer

from runtime.config import parse_app
from runtime.worker.worker import Worker, WorkerFailed
from tests.conftest import TopicNamer
from tests.support.kafka_helpers import create_topic, read_topic

pytestmark = pytest.mark.anyio

Timed = tuple[int, int | None, dict[str, Any]]  # partition, timestamp (ms; None: the producer's clock), value
# Kafka timestamps an hour back: far older ones would let the broker roll and delete the topics' segments.
BASE = int(time.time() * 1000) - 3_600_000


async def produce_timed(bootstrap: str, topic: str, records: Iterable[Timed], **options: Any) -> None:
    """Each record to its partition with its own timestamp, in order."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **options)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, msgpack.packb(value), key=b"k", partition=partition, timestamp_ms=timestamp)
            for partition, timestamp, value in records
        ]
        for future in futures:
            await future
    finally:
        await producer.stop()


def merging_app(app_id: str, inputs: list[str], sink: str, partitions: int, **extra: Any) -> dict[str, Any]:
    topics = {topic: {"partitions": partitions, "key_serde": "str"} for topic in [*inputs, sink]}
    return {
        "app_id": app_id,
        "topics": topics,
        "processors": [
            {"name": "merge", "class": "tests.support.event_time_apps:Stamp", "inputs": inputs, "outputs": [sink],
             "params": {"output": sink}}
        ],
        "commit_interval_ms": 200,
        **extra,
    }  # fmt: skip


async def stamps(bootstrap: str, sink: str) -> list[dict[str, Any]]:
    """What the processor sent, per output partition in the order it was sent."""
    return [msgpack.unpackb(record.value) for record in await read_topic(bootstrap, sink)]


def processing_order(sent: list[dict[str, Any]], partition: int) -> list[tuple[int, str]]:
    return [(stamp["t"], stamp["topic"]) for stamp in sent if "t" in stamp and stamp["src"][0] == partition]


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
async def test_co_partitioned_inputs_are_processed_in_timestamp_order(
    kafka_bootstrap: str, topic_name: TopicNamer, guarantee: str
) -> None:
    left, right, sink = topic_name("left"), topic_name("right"), topic_name("out")
    for topic in (left, right):
        await create_topic(kafka_bootstrap, topic, 2)
    count = 300
    # Interleaved: left at 10 i, right at 10 i + 5, except every tenth, which ties with left's.
    left_records = [(p, BASE + 10 * i, {"i": i}) for p in (0, 1) for i in range(count)]
    right_records = [(p, BASE + 10 * i + (0 if i % 10 == 0 else 5), {"i": i}) for p in (0, 1) for i in range(count)]
    # Left wholly, then right; small batches, so each partition comes in many fetches.
    await produce_timed(kafka_bootstrap, left, left_records, max_batch_size=1024)
    await produce_timed(kafka_bootstrap, right, right_records, max_batch_size=1024)
    app = merging_app(topic_name("app"), [left, right], sink, 2, guarantee=guarantee, max_task_idle_ms=5000,
                      kafka={"consumer": {"max_partition_fetch_bytes": 1024}})  # fmt: skip

    worker = Worker(parse_app(app), kafka_bootstrap, until_caught_up=True)
    await asyncio.wait_for(worker.run(), 120)

    sent = await stamps(kafka_bootstrap, sink)
    rank = {left: 0, right: 1}  # a tie goes to the input listed first
    for partition in (0, 1):
        order = processing_order(sent, partition)
        expected = sorted([(t, left) for p, t, _ in left_records if p == partition]
                          + [(t, right) for p, t, _ in right_records if p == partition],
                          key=lambda stamp: (stamp[0], rank[stamp[1]]))  # fmt: skip
        assert order == expected, f"partition {partition} was not processed in timestamp order"
    assert all(stamp["stream_time"] == stamp["t"] for stamp in sent)


async def test_an_input_whose_records_come_later_is_waited_for_and_merged_in_order(
    kafka_bootstrap: str, topic_name: TopicNamer
) -> None:
    left, right, sink = topic_name("left"), topic_name("right"), topic_name("out")
    for topic in (left, right):
        await create_topic(kafka_bootstrap, topic, 1)
    await produce_timed(kafka_bootstrap, left, [(0, BASE + 10 * i, {"i": i}) for i in range(50)])
    # Right's records are written but readable only once their transaction commits, a while after
    # the app started: until then the task has left's records and none of right's.
    late = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=f"late-{uuid.uuid4().hex}")
    await late.start()
    try:
        await late.begin_transaction()
        for i in range(50):
            await late.send(right, msgpack.packb({"i": i}), key=b"k", partition=0, timestamp_ms=BASE + 10 * i + 5)
        await late.flush()
        app = merging_app(topic_name("app"), [left, right], sink, 1, max_task_idle_ms=30_000)
        worker = Worker(parse_app(app), kafka_bootstrap)
        running = asyncio.create_task(worker.run())
        await asyncio.wait_for(worker.ready.wait(), 30)
        await asyncio.sleep(2)
        assert worker.counters.processed == 0, "the task went on without the input it should wait for"
        await late.commit_transaction()
    finally:
        await late.stop()
    deadline = time.monotonic() + 30
    while worker.counters.processed < 100:
        assert time.monotonic() < deadline, f"stuck at {worker.counters.snapshot()}"
        assert not running.done(), "the worker stopped"
        await asyncio.sleep(0.1)
    worker.stop()
    await running

    order = processing_order(await stamps(kafka_bootstrap, sink), 0)
    assert [t - BASE for t, _ in order] == sorted([10 * i for i in range(50)] + [10 * i + 5 for i in range(50)])


def field_app(app_id: str, source: str, sink: str, policy: str, dead_letters: str) -> dict[str, Any]:
    return {
        "app_id": app_id,
        "topics": {source: {"key_serde": "str", "timestamp": {"field": "event.at"}}, sink: {"key_serde": "str"}},
        "processors": [
            {"name": "stamp", "class": "tests.support.event_time_apps:Stamp", "inputs": [source],
             "outputs": [sink], "params": {"output": sink}}
        ],
        "errors": {"deserialization": policy, "processing": "fail", "dead_letter_topic": dead_letters},
    }  # fmt: skip


@pytest.mark.parametrize("policy", ["skip", "dead_letter", "fail"])
async def test_a_record_missing_its_timestamp_field_follows_the_deserialization_policy(
    kafka_bootstrap: str, topic_name: TopicNamer, policy: str
) -> None:
    source, sink, dead = topic_name("in"), topic_name("out"), topic_name("dlq")
    await create_topic(kafka_bootstrap, source, 1)
    missing = {"n": 1, "event": {"kind": "click"}}
    await produce_timed(kafka_bootstrap, source, [
        (0, None, {"n": 0, "event": {"at": BASE + 100}}),
        (0, None, missing),
        (0, None, {"n": 2, "event": {"at": BASE + 300.7}}),
    ])  # fmt: skip
    worker = Worker(parse_app(field_app(topic_name("app"), source, sink, policy, dead)), kafka_bootstrap, True)

    if policy == "fail":
        failure = r"deserialization failed in processor 'stamp' for record .*\[0\]@1: TimestampError: field 'event\.at'"
        with pytest.raises(WorkerFailed, match=failure + r" of the value is missing"):
            await asyncio.wait_for(worker.run(), 60)
        assert [stamp["t"] for stamp in await stamps(kafka_bootstrap, sink)] == [BASE + 100]
        return
    await asyncio.wait_for(worker.run(), 60)

    assert [stamp["t"] for stamp in await stamps(kafka_bootstrap, sink)] == [BASE + 100, BASE + 300]
    if policy == "skip":
        assert (worker.counters.skipped, worker.counters.dead_lettered) == (1, 0)
        return
    [letter] = await read_topic(kafka_bootstrap, dead)
    headers = dict(letter.headers)
    assert msgpack.unpackb(letter.value) == missing
    assert headers["error.stage"] == b"deserialization"
    assert headers["error.message"] == b"field 'event.at' of the value is missing"
    assert headers["source.offset"] == b"1"


def stream_time_ticks(event_times: list[int], every_ms: int) -> list[dict[str, int]]:
    """The ticks the punctuation must send: after the record that brings stream time to a multiple of
    `every_ms` (0 first), once however many multiples it passed."""
    ticks, stream_time, due = [], -1, 0
    for seen, at in enumerate(event_times, start=1):
        stream_time = max(stream_time, at)
        if stream_time >= due:
            ticks.append({"tick": stream_time, "seen": seen})
            due = (stream_time // every_ms + 1) * every_ms
    return ticks


async def test_a_stream_time_punctuation_follows_event_time_not_the_wall_clock(
    kafka_bootstrap: str, topic_name: TopicNamer
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 1)
    # An hour of event time, every 10 s; every 7th record 35 s late. Produced in well under a second.
    # From a whole minute an hour back: outputs carry these times, and the broker's retention keeps them.
    start = BASE // 60_000 * 60_000
    event_times = [start + 10_000 * i - (35_000 if i % 7 == 6 else 0) for i in range(360)]
    await produce_timed(kafka_bootstrap, source, [(0, None, {"at": at}) for at in event_times])
    app = {
        "app_id": topic_name("app"),
        "topics": {source: {"key_serde": "str", "timestamp": {"extractor": "tests.support.event_time_apps:event_time"}},
                   sink: {"key_serde": "str"}},
        "processors": [
            {"name": "ticks", "class": "tests.support.event_time_apps:Ticks", "inputs": [source], "outputs": [sink],
             "params": {"output": sink, "every_ms": 60_000}}
        ],
        "commit_interval_ms": 200,
    }  # fmt: skip
    expected = stream_time_ticks(event_times, 60_000)
    assert len(expected) == 60

    worker = Worker(parse_app(app), kafka_bootstrap)
    running = asyncio.create_task(worker.run())
    deadline = time.monotonic() + 60
    while worker.counters.processed < len(event_times):
        assert time.monotonic() < deadline, f"stuck at {worker.counters.snapshot()}"
        assert not running.done(), "the worker stopped"
        await asyncio.sleep(0.1)
    await asyncio.sleep(2.5)  # wall-clock time passes, stream time stands still: no more ticks
    worker.stop()
    await running

    sent = await stamps(kafka_bootstrap, sink)
    assert [stamp for stamp in sent if "tick" in stamp] == expected
    streamed = [stamp["stream_time"] for stamp in sent if "t" in stamp]
    assert streamed == [max(event_times[: i + 1]) for i in range(len(event_times))]
