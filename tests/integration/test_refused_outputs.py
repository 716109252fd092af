"""Outputs and dead letters a topic refuses (too large): the error policy handles the record that made
them, and every other record's output is written exactly once, under every guarantee."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import msgpack
import pytest

from runtime.config import parse_app
from runtime.worker.worker import Worker, WorkerFailed
from tests.conftest import TopicNamer
from tests.integration.test_exactly_once import wait_exit
from tests.support.kafka_helpers import create_topic, produce, read_topic
from tests.support.running import spawn_worker, write_app

pytestmark = pytest.mark.anyio

TOTAL = 50
BIG = 17  # the input whose output the sink refuses
SINK_MAX_BYTES = 20_000
PAD = 30_000
RUN_TIMEOUT_S = 90


def inputs() -> list[tuple[bytes, bytes]]:
    return [(f"k{n}".encode(), msgpack.packb({"n": n, "big": n == BIG})) for n in range(TOTAL)]


def inflate_app(
    app_id: str, source: str, sink: str, guarantee: str, bootstrap: str, policy: str = "dead_letter"
) -> dict[str, Any]:
    return {
        "app_id": app_id,
        "kafka": {"bootstrap_servers": bootstrap},
        "topics": {
            source: {"partitions": 2, "key_serde": "str"},
            sink: {"partitions": 2, "key_serde": "str", "config": {"max.message.bytes": str(SINK_MAX_BYTES)}},
        },
        "processors": [
            {"name": "inflate", "class": "tests.support.apps:Inflate", "inputs": [source], "outputs": [sink],
             "params": {"output": sink, "pad": PAD}}
        ],
        "guarantee": guarantee,
        "commit_interval_ms": 100,
        "errors": {"deserialization": "fail", "processing": policy},
    }  # fmt: skip


async def prepare(bootstrap: str, source: str) -> None:
    await create_topic(bootstrap, source, 2)
    await produce(bootstrap, source, inputs())


async def assert_big_one_dead_lettered(
    bootstrap: str, app: dict[str, Any], source: str, sink: str, trace: bytes = b"Traceback"
) -> None:
    seen = Counter(msgpack.unpackb(record.value)["n"] for record in await read_topic(bootstrap, sink))
    assert set(seen) == set(range(TOTAL)) - {BIG}, f"missing outputs: {set(range(TOTAL)) - {BIG} - set(seen)}"
    assert {n: times for n, times in seen.items() if times > 1} == {}, "outputs written twice"
    letters = await read_topic(bootstrap, f"{app['app_id']}-dead-letters")
    assert len(letters) == 1
    letter = letters[0]
    original = next(r for r in await read_topic(bootstrap, source) if r.key == f"k{BIG}".encode())
    assert (letter.key, letter.value) == (original.key, original.value)
    headers = dict(letter.headers)
    assert headers["error.stage"] == b"processing"
    assert headers["error.type"] == b"runtime.kafka.record_limits.RecordRefused"
    assert sink.encode() in headers["error.message"] and b"bytes" in headers["error.message"]
    assert trace in headers["error.stacktrace"]
    assert headers["error.processor"] == b"inflate"
    assert headers["source.topic"] == source.encode()
    assert headers["source.partition"] == str(original.partition).encode()
    assert headers["source.offset"] == str(original.offset).encode()


async def run_in_process(app: dict[str, Any], bootstrap: str) -> Worker:
    worker = Worker(parse_app(app), bootstrap, until_caught_up=True)
    await asyncio.wait_for(worker.run(), RUN_TIMEOUT_S)
    return worker


async def test_oversized_output_is_dead_lettered_under_exactly_once(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await prepare(kafka_bootstrap, source)
    app = inflate_app(topic_name("app"), source, sink, "exactly_once", kafka_bootstrap)
    worker = spawn_worker(write_app(tmp_path, app), "--until-caught-up", log=tmp_path / "worker.log")
    assert await wait_exit(worker, RUN_TIMEOUT_S) == 0, (tmp_path / "worker.log").read_text()[-3000:]
    await assert_big_one_dead_lettered(kafka_bootstrap, app, source, sink)


async def test_oversized_output_is_dead_lettered_under_at_least_once(
    kafka_bootstrap: str, topic_name: TopicNamer
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await prepare(kafka_bootstrap, source)
    app = inflate_app(topic_name("app"), source, sink, "at_least_once", kafka_bootstrap)
    worker = await run_in_process(app, kafka_bootstrap)
    assert worker.counters.dead_lettered == 1
    await assert_big_one_dead_lettered(kafka_bootstrap, app, source, sink)


async def test_oversized_output_under_fail_names_its_input(kafka_bootstrap: str, topic_name: TopicNamer) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await prepare(kafka_bootstrap, source)
    app = inflate_app(topic_name("app"), source, sink, "at_least_once", kafka_bootstrap, policy="fail")
    big = next(r for r in await read_topic(kafka_bootstrap, source) if r.key == f"k{BIG}".encode())
    with pytest.raises(WorkerFailed) as failed:
        await run_in_process(app, kafka_bootstrap)
    message = str(failed.value)
    assert f"for record {source}[{big.partition}]@{big.offset}: RecordRefused" in message
    assert f"topic '{sink}' is" in message and f"{SINK_MAX_BYTES:,} bytes" in message


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
async def test_output_the_broker_refuses_is_dead_lettered(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, guarantee: str
) -> None:
    """Compressed, an output is only checked against the producer's limit: the broker refuses it, and
    the batch it was in with it, after it was sent."""
    source, sink = topic_name("in"), topic_name("out")
    await prepare(kafka_bootstrap, source)
    app = inflate_app(topic_name("app"), source, sink, guarantee, kafka_bootstrap)
    app["kafka"]["producer"] = {"compression_type": "gzip"}
    worker = spawn_worker(write_app(tmp_path, app), "--until-caught-up", log=tmp_path / "worker.log")
    assert await wait_exit(worker, RUN_TIMEOUT_S) == 0, (tmp_path / "worker.log").read_text()[-3000:]
    await assert_big_one_dead_lettered(kafka_bootstrap, app, source, sink, trace=b"MessageSizeTooLargeError")


async def test_dead_letter_too_large_for_its_topic_is_truncated(kafka_bootstrap: str, topic_name: TopicNamer) -> None:
    source, sink, dead = topic_name("in"), topic_name("out"), topic_name("dlq")
    garbage = b"\xc1" * 30_000  # not msgpack, and with its error headers more than the dead-letter topic takes
    await create_topic(kafka_bootstrap, source)
    await produce(kafka_bootstrap, source, [(b"k0", msgpack.packb({"n": 0})), (b"k1", garbage)])
    app = inflate_app(topic_name("app"), source, sink, "at_least_once", kafka_bootstrap)
    app["topics"][source]["partitions"] = 1
    app["topics"][dead] = {"key_serde": "bytes", "value_serde": "bytes", "config": {"max.message.bytes": "20000"}}
    app["errors"] = {"deserialization": "dead_letter", "processing": "fail", "dead_letter_topic": dead}
    worker = await run_in_process(app, kafka_bootstrap)
    assert worker.counters.dead_lettered == 1
    assert [msgpack.unpackb(r.value)["n"] for r in await read_topic(kafka_bootstrap, sink)] == [0]
    [letter] = await read_topic(kafka_bootstrap, dead)
    headers = dict(letter.headers)
    assert headers["error.truncated"] == b"key=2,value=30000,headers=0"
    assert letter.key == b"k1" and 0 < len(letter.value) < 20_000 and garbage.startswith(letter.value)
    assert headers["error.stage"] == b"deserialization" and headers["source.offset"] == b"1"
    assert b"Traceback" in headers["error.stacktrace"]


async def test_batches_stay_within_a_topic_smaller_than_the_producers_batches(
    kafka_bootstrap: str, topic_name: TopicNamer, caplog: pytest.LogCaptureFixture
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 2)
    await produce(
        kafka_bootstrap, source, [(f"k{n}".encode(), msgpack.packb({"n": n, "big": True})) for n in range(TOTAL)]
    )
    app = inflate_app(topic_name("app"), source, sink, "at_least_once", kafka_bootstrap)
    app["processors"][0]["params"]["pad"] = 1_000  # 25 of them fill more than the topic takes in one batch
    app["commit_interval_ms"] = 60_000  # every output in the batch of its partition
    await run_in_process(app, kafka_bootstrap)
    assert sorted(msgpack.unpackb(r.value)["n"] for r in await read_topic(kafka_bootstrap, sink)) == list(range(TOTAL))
    assert "refused" not in caplog.text
