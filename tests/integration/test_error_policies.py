"""Error policies against a real broker: dead letters keep everything, skip counts, fail stops cleanly."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from runtime.config import parse_app
from runtime.worker.worker import Worker, WorkerFailed
from tests.conftest import TopicNamer
from tests.support.kafka_helpers import create_topic, produce, read_topic

pytestmark = pytest.mark.anyio

UNDECODABLE = b"\xc1 not msgpack"  # 0xc1 is never used by msgpack


def picky_app(app_id: str, source: str, sink: str, policy: str, dead_letters: str | None = None) -> dict[str, Any]:
    return {
        "app_id": app_id,
        "topics": {source: {"key_serde": "str"}, sink: {"key_serde": "str"}},
        "processors": [
            {"name": "picky", "class": "tests.support.apps:Picky", "inputs": [source], "outputs": [sink],
             "params": {"output": sink}}
        ],
        "errors": {"deserialization": policy, "processing": policy, "dead_letter_topic": dead_letters},
    }  # fmt: skip


def mixed_input() -> list[tuple[bytes, bytes]]:
    return [
        (b"good-1", msgpack.packb({"n": 1})),
        (b"bad-2", msgpack.packb({"n": 2, "bad": True})),
        (b"garbled-3", UNDECODABLE),
        (b"good-4", msgpack.packb({"n": 4})),
    ]


async def test_dead_letters_keep_original_bytes_and_error_headers(kafka_bootstrap: str, topic_name: TopicNamer) -> None:
    source, sink, dead = topic_name("in"), topic_name("out"), topic_name("dlq")
    await create_topic(kafka_bootstrap, source)
    await produce(kafka_bootstrap, source, mixed_input())
    worker = Worker(parse_app(picky_app(topic_name("app"), source, sink, "dead_letter", dead)), kafka_bootstrap, True)
    await worker.run()

    assert [r.key for r in await read_topic(kafka_bootstrap, sink)] == [b"good-1", b"good-4"]
    letters = await read_topic(kafka_bootstrap, dead)
    assert [(r.key, r.value) for r in letters] == [(b"bad-2", mixed_input()[1][1]), (b"garbled-3", UNDECODABLE)]
    source_records = await read_topic(kafka_bootstrap, source)
    for letter, stage, error_type in [
        (letters[0], "processing", "builtins.ValueError"),
        (letters[1], "deserialization", "msgpack.exceptions.FormatError"),
    ]:
        headers = dict(letter.headers)
        original = next(r for r in source_records if r.key == letter.key)
        assert headers["error.stage"] == stage.encode()
        assert headers["error.type"].decode().endswith(error_type.rsplit(".", 1)[1])
        assert headers["error.message"]
        assert b"Traceback" in headers["error.stacktrace"]
        assert headers["source.topic"] == source.encode()
        assert headers["source.partition"] == str(original.partition).encode()
        assert headers["source.offset"] == str(original.offset).encode()
        assert headers["source.timestamp"] == str(original.timestamp).encode()
    assert b"bad record bad-2" in dict(letters[0].headers)["error.message"]
    assert worker.counters.dead_lettered == 2 and worker.counters.processed == 2


async def test_skip_counts_and_goes_on(kafka_bootstrap: str, topic_name: TopicNamer) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source)
    await produce(kafka_bootstrap, source, mixed_input())
    worker = Worker(parse_app(picky_app(topic_name("app"), source, sink, "skip")), kafka_bootstrap, True)
    await worker.run()
    # The partial output sent before the processor raised does not escape.
    assert [r.key for r in await read_topic(kafka_bootstrap, sink)] == [b"good-1", b"good-4"]
    assert worker.counters.skipped == 2


async def test_fail_stops_and_commits_only_what_came_before(kafka_bootstrap: str, topic_name: TopicNamer) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source)
    await produce(kafka_bootstrap, source, mixed_input())
    app = picky_app(topic_name("app"), source, sink, "fail")
    worker = Worker(parse_app(app), kafka_bootstrap, True)
    with pytest.raises(WorkerFailed, match=r"processing failed in processor 'picky' for record .*@1: ValueError"):
        await worker.run()
    assert [r.key for r in await read_topic(kafka_bootstrap, sink)] == [b"good-1"]
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=app["app_id"])
    await consumer.start()
    try:
        assert await consumer.committed(TopicPartition(source, 0)) == 1, "the failed record must be read again"
    finally:
        await consumer.stop()
