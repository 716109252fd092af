"""A record the Kafka client cannot parse (a header key that is not UTF-8) in the middle of a partition:
the deserialization policy applies to it, every valid record around it is processed, and a second run
neither loops nor handles it twice."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from runtime.config import parse_app
from runtime.worker.worker import Worker, WorkerFailed
from tests.conftest import TopicNamer
from tests.support.kafka_helpers import create_topic, read_topic
from tests.support.raw_records import RawHeaders, produce_raw

pytestmark = pytest.mark.anyio

BAD_KEY = b"\xff\xfe-origin"
BAD_HEADERS: RawHeaders = [(b"kept", b"1"), (BAD_KEY, b"sender-7")]
BAD_OFFSET = 4  # partition 0: 0-2 in a first batch, then 3, the bad one and 5 in one batch, then 6-7


def record(n: int, headers: RawHeaders | None = None) -> tuple[bytes, bytes, RawHeaders]:
    return f"k{n}".encode(), msgpack.packb({"n": n}), headers or []


async def produce_input(bootstrap: str, source: str) -> None:
    await create_topic(bootstrap, source, partitions=2)
    await produce_raw(bootstrap, source, 0, [record(0), record(1), record(2)])
    await produce_raw(bootstrap, source, 0, [record(3), record(4, BAD_HEADERS), record(5)])
    await produce_raw(bootstrap, source, 0, [record(6), record(7)])
    await produce_raw(bootstrap, source, 1, [record(100), record(101), record(102)])


def echo_app(
    app_id: str, source: str, sink: str, policy: str, dead_letters: str | None = None, guarantee: str = "at_least_once"
) -> dict[str, Any]:
    return {
        "app_id": app_id,
        "guarantee": guarantee,
        "topics": {source: {"partitions": 2, "key_serde": "str"}, sink: {"key_serde": "str"}},
        "processors": [
            {"name": "echo", "class": "tests.support.apps:Echo", "inputs": [source], "outputs": [sink],
             "params": {"output": sink}}
        ],
        "errors": {"deserialization": policy, "processing": "fail", "dead_letter_topic": dead_letters},
    }  # fmt: skip


async def processed(bootstrap: str, sink: str) -> list[tuple[int, int, int]]:
    """(partition, offset, n) of every input record the sink has an output for."""
    outputs = [msgpack.unpackb(r.value) for r in await read_topic(bootstrap, sink)]
    return sorted((value["src"][0], value["src"][1], value["value"]["n"]) for value in outputs)


VALID = [(0, n, n) for n in range(8) if n != BAD_OFFSET] + [(1, n - 100, n) for n in (100, 101, 102)]


async def committed(bootstrap: str, group: str, tp: TopicPartition) -> int | None:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        offset: int | None = await consumer.committed(tp)
        return offset
    finally:
        await consumer.stop()


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
async def test_dead_letter_keeps_what_can_be_read_and_every_record_around_it(
    kafka_bootstrap: str, topic_name: TopicNamer, guarantee: str
) -> None:
    source, sink, dead = topic_name("in"), topic_name("out"), topic_name("dlq")
    await produce_input(kafka_bootstrap, source)
    config = parse_app(echo_app(topic_name("app"), source, sink, "dead_letter", dead, guarantee))
    worker = Worker(config, kafka_bootstrap, until_caught_up=True)
    await worker.run()

    assert await processed(kafka_bootstrap, sink) == VALID
    [letter] = await read_topic(kafka_bootstrap, dead)
    assert (letter.key, msgpack.unpackb(letter.value)) == (b"k4", {"n": 4})
    headers = dict(letter.headers)
    assert headers["kept"] == b"1"
    assert headers["\\xff\\xfe-origin"] == b"sender-7", "a key that is not UTF-8 keeps its bytes, escaped"
    assert headers["error.stage"] == b"deserialization"
    assert headers["error.type"] == b"runtime.kafka.unparseable.UnparseableRecordError"
    assert b"header key" in headers["error.message"] and b"UTF-8" in headers["error.message"]
    assert headers["source.topic"] == source.encode()
    assert (headers["source.partition"], headers["source.offset"]) == (b"0", str(BAD_OFFSET).encode())
    assert worker.counters.dead_lettered == 1

    again = Worker(config, kafka_bootstrap, until_caught_up=True)
    await again.run()
    assert again.counters.dead_lettered == 0 and again.counters.processed == 0
    assert len(await read_topic(kafka_bootstrap, dead)) == 1


async def test_skip_counts_it_and_processes_the_rest(kafka_bootstrap: str, topic_name: TopicNamer) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await produce_input(kafka_bootstrap, source)
    config = parse_app(echo_app(topic_name("app"), source, sink, "skip"))
    worker = Worker(config, kafka_bootstrap, until_caught_up=True)
    await worker.run()

    assert await processed(kafka_bootstrap, sink) == VALID
    assert worker.counters.skipped == 1
    again = Worker(config, kafka_bootstrap, until_caught_up=True)
    await again.run()
    assert again.counters.skipped == 0 and again.counters.processed == 0


async def test_fail_names_the_record_and_commits_what_came_before(kafka_bootstrap: str, topic_name: TopicNamer) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await produce_input(kafka_bootstrap, source)
    app = echo_app(topic_name("app"), source, sink, "fail")
    where = rf"record {source}\[0\]@{BAD_OFFSET}: UnparseableRecordError: .*header key"
    for _run in range(2):  # the same record stops every run, right away: no loop, no hang
        with pytest.raises(WorkerFailed, match=where):
            await Worker(parse_app(app), kafka_bootstrap, until_caught_up=True).run()
    before = [(0, n, n) for n in range(BAD_OFFSET)]
    assert [output for output in await processed(kafka_bootstrap, sink) if output[0] == 0] == before
    assert await committed(kafka_bootstrap, app["app_id"], TopicPartition(source, 0)) == BAD_OFFSET
