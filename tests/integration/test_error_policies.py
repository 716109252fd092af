"""Error policies against a real broker: dead letters keep everything, skip counts, fail stops cleanly."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgpack
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from runtime.config import parse_app
from runtime.worker.worker import Worker, WorkerFailed
from tests.conftest import TopicNamer
from tests.integration.test_exactly_once import wait_exit
from tests.integration.test_flush_sink import final_error
from tests.support.kafka_helpers import create_topic, produce, read_topic
from tests.support.running import read_log, spawn_worker, write_app

pytestmark = pytest.mark.anyio

UNDECODABLE = b"\xc1 not msgpack"  # 0xc1 is never used by msgpack
EVERY = 20_000  # records, all failing (bench.dead_letter measures 200,000)


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


async def test_every_record_failing_is_dead_lettered_in_few_log_lines_without_a_rebalance(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, sink, dead = topic_name("in"), topic_name("out"), topic_name("dlq")
    await create_topic(kafka_bootstrap, source, 3)
    await produce(
        kafka_bootstrap, source, [(f"k{n}".encode(), msgpack.packb({"n": n, "bad": True})) for n in range(EVERY)]
    )
    app = {
        **picky_app(topic_name("app"), source, sink, "dead_letter", dead),
        "kafka": {"bootstrap_servers": kafka_bootstrap},
    }
    log = tmp_path / "worker.log"
    worker = spawn_worker(write_app(tmp_path, app), "--until-caught-up", log=log)
    assert await wait_exit(worker, 120) == 0, read_log(log)[-3000:]

    letters = await read_topic(kafka_bootstrap, dead)
    sources = {(r.partition, r.offset): r for r in await read_topic(kafka_bootstrap, source)}
    assert len(letters) == EVERY
    origins = set()
    for letter in letters:
        headers = dict(letter.headers)
        origin = (int(headers["source.partition"]), int(headers["source.offset"]))
        origins.add(origin)
        assert (headers["source.topic"], headers["error.stage"], headers["error.processor"]) == (
            source.encode(),
            b"processing",
            b"picky",
        )
        assert (letter.key, letter.value) == (sources[origin].key, sources[origin].value)
        assert headers["error.type"] == b"builtins.ValueError"
        assert headers["error.message"] == b"bad record " + letter.key
        assert headers["error.stacktrace"].endswith(b"ValueError: bad record " + letter.key + b"\n")
    assert origins == set(sources), "a record was dead-lettered twice, or not at all"

    lines = read_log(log).splitlines()
    assert len(lines) < 1_000
    assert not [line for line in lines if "revoked" in line], "the worker lost its group session"
    one_by_one = [line for line in lines if " dead-lettered record " in line]
    counted = [
        int(n.replace(",", "")) for n in re.findall(r"([\d,]+) failed records not logged one by one", "\n".join(lines))
    ]
    assert len(one_by_one) + sum(counted) == EVERY, (one_by_one, counted)
    assert all(
        "dead-lettered in 'picky' (processing failed: ValueError)" in line for line in lines if "one by one" in line
    )


@pytest.mark.parametrize("policy", ["fail", "skip", "dead_letter"])
async def test_a_send_to_a_topic_not_among_the_outputs_stops_the_worker_under_every_policy(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, policy: str
) -> None:
    source, sink, dead, elsewhere = topic_name("in"), topic_name("out"), topic_name("dlq"), topic_name("elsewhere")
    await create_topic(kafka_bootstrap, source)
    await produce(kafka_bootstrap, source, [(f"k{n}".encode(), msgpack.packb({"n": n})) for n in range(3)])
    app = picky_app(topic_name("app"), source, sink, policy, dead)
    app["kafka"] = {"bootstrap_servers": kafka_bootstrap}
    app["processors"][0]["params"]["output"] = elsewhere  # declared as a topic, not as the processor's output
    app["topics"][elsewhere] = {"key_serde": "str"}
    log = tmp_path / "worker.log"
    worker = spawn_worker(write_app(tmp_path, app), "--until-caught-up", log=log)
    assert await wait_exit(worker, 60) == 1, read_log(log)[-3000:]

    error = final_error(log)
    assert f"processor 'picky' sent to '{elsewhere}', which is not among its outputs ['{sink}']" in error, error
    assert "dead-lettered record" not in read_log(log) and "skipped record" not in read_log(log)
    if policy == "dead_letter":
        assert await read_topic(kafka_bootstrap, dead) == []
