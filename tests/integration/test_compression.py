"""Compressed input in, compressed output out, for every codec Kafka has, through an in-process worker."""

from __future__ import annotations

from typing import Any

import anyio
import msgpack
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from runtime.config import parse_app
from runtime.worker.worker import Worker
from tests.conftest import TopicNamer
from tests.support.compression import stored_batches
from tests.support.kafka_helpers import create_topic, produce, read_topic

pytestmark = pytest.mark.anyio

CODECS = ["gzip", "snappy", "lz4", "zstd"]
COUNT = 600
PARTITIONS = 3
RUN_TIMEOUT_S = 120


def text_for(n: int) -> str:
    return f"record {n}: " + "a compressible payload " * 8


def transform_app(app_id: str, source: str, sink: str, codec: str) -> dict[str, Any]:
    return {
        "app_id": app_id,
        "kafka": {"producer": {"compression_type": codec}},
        "topics": {
            source: {"partitions": PARTITIONS, "key_serde": "str"},
            sink: {"partitions": PARTITIONS, "key_serde": "str"},
        },
        "processors": [
            {
                "name": "transform",
                "class": "tests.support.processors_for_tests:Transform",
                "inputs": [source],
                "outputs": [sink],
                "params": {"output": sink},
            }
        ],
        "commit_interval_ms": 200,
    }


async def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int | None]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        return {p: await consumer.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)}
    finally:
        await consumer.stop()


@pytest.mark.parametrize("codec", CODECS)
async def test_every_record_transformed_through_compressed_topics(
    codec: str, kafka_bootstrap: str, topic_name: TopicNamer
) -> None:
    source, sink, app_id = topic_name("in"), topic_name("out"), topic_name("app")
    await create_topic(kafka_bootstrap, source, PARTITIONS)
    keys = {n: f"k{n % 37}".encode() for n in range(COUNT)}
    inputs = [(keys[n], msgpack.packb({"n": n, "text": text_for(n)})) for n in range(COUNT)]
    await produce(kafka_bootstrap, source, inputs, compression_type=codec)

    input_batches = await stored_batches(kafka_bootstrap, source)
    assert sum(batch.records for batch in input_batches) == COUNT
    assert {batch.codec for batch in input_batches} == {codec}, input_batches

    worker = Worker(parse_app(transform_app(app_id, source, sink, codec)), kafka_bootstrap, until_caught_up=True)
    with anyio.fail_after(RUN_TIMEOUT_S):
        await worker.run()

    outputs = await read_topic(kafka_bootstrap, sink)
    by_n: dict[int, dict[str, Any]] = {}
    for record in outputs:
        value = msgpack.unpackb(record.value)
        assert value["n"] not in by_n, f"record {value['n']} arrived twice"
        by_n[value["n"]] = value
        assert record.key == keys[value["n"]]
        assert value["doubled"] == 2 * value["n"]
        assert value["text"] == text_for(value["n"]).upper()
        # The runtime's partitioner and the input producer's (aiokafka's murmur2) agree, so keys stay put.
        assert record.partition == value["src"][0]
    assert sorted(by_n) == list(range(COUNT)), f"{COUNT - len(by_n)} records missing"
    assert worker.counters.produced == COUNT

    output_batches = await stored_batches(kafka_bootstrap, sink)
    assert sum(batch.records for batch in output_batches) == COUNT
    assert {batch.codec for batch in output_batches} == {codec}, output_batches

    ends = {record.partition: record.offset + 1 for record in await read_topic(kafka_bootstrap, source)}
    assert await committed_offsets(kafka_bootstrap, app_id, source) == {p: ends.get(p, 0) for p in range(PARTITIONS)}


DEAD_LETTER_HEADERS = [
    "error.stage",
    "error.type",
    "error.message",
    "error.stacktrace",
    "error.app",
    "error.processor",
    "source.topic",
    "source.partition",
    "source.offset",
    "source.timestamp",
]


@pytest.mark.parametrize("codec", CODECS)
async def test_dead_letters_go_out_compressed_in_transactions(
    codec: str, kafka_bootstrap: str, topic_name: TopicNamer
) -> None:
    """Dead letters are in batches the runtime encodes itself (runtime/kafka/encoded_batch.py): compressed with the
    producer's codec, in its transactions, as its own batches are."""
    source, sink, dead, app_id = topic_name("in"), topic_name("out"), topic_name("dlq"), topic_name("app")
    await create_topic(kafka_bootstrap, source, PARTITIONS)
    inputs = [(f"k{n}".encode(), msgpack.packb({"n": n, "bad": True})) for n in range(COUNT)]
    await produce(kafka_bootstrap, source, inputs)
    app = {
        "app_id": app_id,
        "guarantee": "exactly_once",
        "kafka": {"producer": {"compression_type": codec}},
        "topics": {source: {"partitions": PARTITIONS, "key_serde": "str"}, sink: {"key_serde": "str"}},
        "processors": [
            {"name": "picky", "class": "tests.support.apps:Picky", "inputs": [source], "outputs": [sink],
             "params": {"output": sink}}
        ],
        "errors": {"processing": "dead_letter", "dead_letter_topic": dead},
        "commit_interval_ms": 200,
    }  # fmt: skip
    worker = Worker(parse_app(app), kafka_bootstrap, until_caught_up=True)
    with anyio.fail_after(RUN_TIMEOUT_S):
        await worker.run()

    letters = await read_topic(kafka_bootstrap, dead)
    sources = {(record.partition, record.offset): record for record in await read_topic(kafka_bootstrap, source)}
    assert len(letters) == COUNT == len(sources)
    for letter in letters:
        headers = dict(letter.headers)
        assert [name for name, _ in letter.headers] == DEAD_LETTER_HEADERS
        original = sources.pop((int(headers["source.partition"]), int(headers["source.offset"])))
        assert (letter.key, letter.value, letter.timestamp) == (original.key, original.value, original.timestamp)
        assert headers["error.message"] == f"bad record {original.key.decode()}".encode()
        assert headers["error.stacktrace"].endswith(b"ValueError: " + headers["error.message"] + b"\n")
        assert headers["source.timestamp"] == str(original.timestamp).encode()
    assert sources == {} and await read_topic(kafka_bootstrap, sink) == []

    dead_batches = await stored_batches(kafka_bootstrap, dead)
    assert sum(batch.records for batch in dead_batches) == COUNT
    assert {batch.codec for batch in dead_batches} == {codec}, dead_batches
