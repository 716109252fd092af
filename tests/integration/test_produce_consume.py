"""`produce` and `consume` against a real broker: records round-trip through the topics' serdes."""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
from aiokafka import AIOKafkaProducer

from stores.partitioner import partition_for
from tests.conftest import TopicNamer
from tests.support.commands import command_env, json_lines, run_command, spawn_command
from tests.support.kafka_helpers import KEPT, create_topic, produce, read_topic
from tests.support.running import REPO, write_app

pytestmark = pytest.mark.anyio

JANUARY = 1767225660000  # 2026-01-01T00:01:00Z

COMMON_LINES: list[dict[str, Any]] = [
    {"key": "a", "value": {"n": 1, "nested": [1, 2.5, None, "x", True]}, "headers": {"source": "test"},
     "timestamp": JANUARY},
    {"key": "b", "value": [1, 2], "headers": [["h", "1"], ["h", {"$base64": "/w=="}]], "partition": 2,
     "timestamp": JANUARY + 1000},
    {"key": "c", "value": None, "timestamp": JANUARY + 2000},
    {"value": "no key", "partition": 0, "timestamp": JANUARY + 3000},
]  # fmt: skip
ONLY_JSON = {"key": "d", "value": {"beyond 64 bits": 2**70}, "timestamp": JANUARY + 4000}
ONLY_MSGPACK = {"key": "d", "value": {"bytes": {"$base64": "AAE="}, "7": "seven"}, "timestamp": JANUARY + 4000}


def serde_app(tmp_path: Path, topic_name: TopicNamer, bootstrap: str, topics: dict[str, str]) -> Path:
    """An app YAML declaring each topic with str keys and the value serde given."""
    declared = {
        topic: {"partitions": 3, "key_serde": "str", "value_serde": serde, "config": KEPT}
        for topic, serde in topics.items()
    }
    first = next(iter(topics))
    processor = {"name": "echo", "class": "tests.support.apps:Echo", "inputs": [first], "params": {"output": first}}
    return write_app(
        tmp_path, {"app_id": topic_name("app"), "kafka": {"bootstrap_servers": bootstrap}, "topics": declared,
                   "processors": [processor]}
    )  # fmt: skip


def lines_text(lines: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(line) + "\n" for line in lines)


async def test_produce_then_consume_round_trips_json_and_msgpack_values_headers_and_timestamps(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    json_topic, msgpack_topic = topic_name("json"), topic_name("msgpack")
    app = serde_app(tmp_path, topic_name, kafka_bootstrap, {json_topic: "json", msgpack_topic: "msgpack"})
    created = run_command(kafka_bootstrap, "topics", "create", "--app", str(app))
    assert created.returncode == 0, created.stderr
    assert f"created {json_topic} (3 partitions)" in created.stdout

    cases: list[tuple[str, list[dict[str, Any]], Callable[[bytes], Any]]] = [
        (json_topic, [*COMMON_LINES, ONLY_JSON], json.loads),
        (msgpack_topic, [*COMMON_LINES, ONLY_MSGPACK], lambda data: msgpack.unpackb(data, strict_map_key=False)),
    ]
    for topic, lines, decode in cases:
        produced = run_command(kafka_bootstrap, "produce", topic, "--app", str(app), stdin=lines_text(lines))
        assert produced.returncode == 0, produced.stderr
        assert f"produced 5 records to {topic}" in produced.stderr

        consumed = run_command(kafka_bootstrap, "consume", topic, "--app", str(app))
        assert consumed.returncode == 0, consumed.stderr
        assert "5 records from" in consumed.stderr
        records = sorted(json_lines(consumed.stdout), key=lambda record: record["timestamp"])
        assert [{field: record[field] for field in ("key", "value", "timestamp")} for record in records] == [
            {"key": line.get("key"), "value": line["value"], "timestamp": line["timestamp"]} for line in lines
        ]
        assert records[0]["headers"] == [["source", "test"]]
        assert records[1]["headers"] == [["h", "1"], ["h", {"$base64": "/w=="}]]
        assert [record["partition"] for record in records[1:4:2]] == [2, 0], "the partitions the lines named"
        assert records[0]["partition"] == partition_for(b"a", 3), "a key's partition, as Kafka's producer picks it"

        raw = {record.timestamp: record for record in await read_topic(kafka_bootstrap, topic)}
        assert raw[JANUARY].key == b"a"  # the topic's key serde (str) wrote it
        assert decode(raw[JANUARY].value) == COMMON_LINES[0]["value"]  # and its value serde
        assert raw[JANUARY + 2000].value is None, "a null value is a tombstone"
    assert msgpack.unpackb(raw[JANUARY + 4000].value, strict_map_key=False)["bytes"] == b"\x00\x01"


async def test_a_topic_no_yaml_declares_is_bytes_shown_as_text_or_base64(
    kafka_bootstrap: str, topic_name: TopicNamer
) -> None:
    topic = topic_name("raw")
    await create_topic(kafka_bootstrap, topic)
    lines: list[dict[str, Any]] = [
        {"key": "k", "value": "plain text"},
        {"key": {"$base64": "/w=="}, "value": {"$base64": "AP8="}},
    ]
    produced = run_command(kafka_bootstrap, "produce", topic, stdin=lines_text(lines))
    assert produced.returncode == 0, produced.stderr
    assert [(record.key, record.value) for record in await read_topic(kafka_bootstrap, topic)] == [
        (b"k", b"plain text"),
        (b"\xff", b"\x00\xff"),
    ]
    consumed = run_command(kafka_bootstrap, "consume", topic)
    assert [(record["key"], record["value"]) for record in json_lines(consumed.stdout)] == [
        (line["key"], line["value"]) for line in lines
    ]
    as_json = run_command(kafka_bootstrap, "consume", topic, "--value-serde", "json")
    not_json = json_lines(as_json.stdout)[0]
    assert not_json["value"] == "plain text" and not_json["value_error"].startswith("DecodeError: JSON is malformed")
    assert "(2 not decoded)" in as_json.stderr


async def test_consume_starts_at_the_beginning_an_offset_a_time_or_the_end(
    kafka_bootstrap: str, topic_name: TopicNamer
) -> None:
    topic = topic_name("positions")
    await create_topic(kafka_bootstrap, topic, 2, KEPT)
    lines = [{"value": f"r{n}", "partition": n % 2, "timestamp": JANUARY + n * 1000} for n in range(10)]
    assert run_command(kafka_bootstrap, "produce", topic, stdin=lines_text(lines)).returncode == 0

    def values(*options: str) -> list[str]:
        consumed = run_command(kafka_bootstrap, "consume", topic, *options)
        assert consumed.returncode == 0, consumed.stderr
        return sorted(record["value"] for record in json_lines(consumed.stdout))

    assert values() == sorted(f"r{n}" for n in range(10))
    assert values("--from", "3") == ["r6", "r7", "r8", "r9"]  # offset 3 of each partition
    assert values("--from", "-1") == ["r8", "r9"]  # the last of each partition
    assert values("--from", "2026-01-01T00:01:07Z") == ["r7", "r8", "r9"]
    assert values("--from", "2026-01-01T02:01:07+02:00") == ["r7", "r8", "r9"]
    assert values("--from", "end") == []
    assert values("--partition", "1", "--from", "-2") == ["r7", "r9"]
    assert len(values("--max-records", "3")) == 3

    wrong = run_command(kafka_bootstrap, "consume", topic, "--partition", "2")
    assert (wrong.returncode, wrong.stderr.strip()) == (
        1,
        f"error: topic '{topic}' has no partition 2 (it has 2: 0 to 1)",
    )
    usage = run_command(kafka_bootstrap, "consume", topic, "--from", "yesterday")
    assert (
        usage.returncode == 2 and "'yesterday' is not 'beginning', 'end', an offset or an ISO 8601 time" in usage.stderr
    )


async def test_consume_reads_committed_records_unless_told_otherwise(
    kafka_bootstrap: str, topic_name: TopicNamer
) -> None:
    topic = topic_name("transactions")
    await create_topic(kafka_bootstrap, topic)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=topic_name("txn"))
    await producer.start()
    try:
        async with producer.transaction():
            await producer.send(topic, b"committed")
        await producer.begin_transaction()
        await producer.send_and_wait(topic, b"aborted")
        await producer.abort_transaction()
    finally:
        await producer.stop()
    committed = run_command(kafka_bootstrap, "consume", topic)
    assert [record["value"] for record in json_lines(committed.stdout)] == ["committed"]
    everything = run_command(kafka_bootstrap, "consume", topic, "--read-uncommitted")
    assert [record["value"] for record in json_lines(everything.stdout)] == ["committed", "aborted"]


async def test_consume_follows_new_records_until_interrupted(kafka_bootstrap: str, topic_name: TopicNamer) -> None:
    topic = topic_name("follow")
    await create_topic(kafka_bootstrap, topic)
    await produce(kafka_bootstrap, topic, [(None, b"before")])
    follower = spawn_command(kafka_bootstrap, "consume", topic, "--follow")
    assert follower.stdout is not None
    first = await asyncio.to_thread(follower.stdout.readline)
    assert json.loads(first)["value"] == "before"
    await produce(kafka_bootstrap, topic, [(None, b"after")])
    second = await asyncio.to_thread(follower.stdout.readline)
    assert json.loads(second)["value"] == "after"
    follower.send_signal(signal.SIGINT)
    assert await asyncio.to_thread(follower.wait, 30) == 0
    assert follower.stderr is not None and "2 records from" in follower.stderr.read()


async def test_produce_names_the_line_it_cannot_take_after_producing_those_before(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    topic = topic_name("bad-lines")
    app = serde_app(tmp_path, topic_name, kafka_bootstrap, {topic: "msgpack"})
    await create_topic(kafka_bootstrap, topic, 3)
    source = tmp_path / "records.jsonl"
    source.write_text('{"key": "a", "value": 1}\n\n{"key": "b", "valu": 2}\n{"key": "c", "value": 3}\n')
    failed = run_command(kafka_bootstrap, "produce", topic, "--app", str(app), "--file", str(source))
    assert failed.returncode == 1
    assert failed.stderr.strip() == (
        f"error: {source}, line 3: unknown field 'valu' (a line holds any of key, value, headers, timestamp, "
        "partition); the record before it was produced"
    )
    assert [record.key for record in await read_topic(kafka_bootstrap, topic)] == [b"a"]

    for line, message in (
        ("[1]", "line 1: expected a JSON object with any of key, value, headers, timestamp, partition"),
        ('{"value": 1, "partition": 3}', "line 1: partition must be a whole number, 0 to 2, not 3"),
        ('{"value": 1, "timestamp": "noon"}', 'line 1: timestamp must be a whole number, at least 0, not "noon"'),
        ('{"value": 1, "headers": {"h": 1}}', 'line 1: header \'h\' must be text or {"$base64": "..."}, not 1'),
        ('{"value": {"$base64": "%%%"}}', "line 1: \"$base64\": '%%%' is not base64"),
        ("{not json", "line 1: not JSON: "),
    ):
        refused = run_command(kafka_bootstrap, "produce", topic, "--app", str(app), stdin=line)
        assert refused.returncode == 1 and f"error: stdin, {message}" in refused.stderr, refused.stderr

    missing = run_command(kafka_bootstrap, "produce", topic_name("nowhere"), stdin="{}")
    assert missing.returncode == 1 and "does not exist at" in missing.stderr


async def test_produce_sends_each_line_as_it_comes_and_a_pause_earns_no_burst_above_the_rate(
    kafka_bootstrap: str, topic_name: TopicNamer
) -> None:
    topic = topic_name("paced")
    await create_topic(kafka_bootstrap, topic)
    producing = subprocess.Popen(  # noqa: ASYNC220 (its input is written while the test reads the topic)
        [sys.executable, "-m", "runtime", "produce", topic, "--rate", "10"],
        stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=command_env(kafka_bootstrap), cwd=REPO,
    )  # fmt: skip
    assert producing.stdin is not None
    try:
        producing.stdin.write('{"value": "first"}\n')
        producing.stdin.flush()
        deadline = time.monotonic() + 30
        while not await read_topic(kafka_bootstrap, topic):
            assert time.monotonic() < deadline, "a line is sent when it comes, not when the input ends"
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)  # the input pauses
        producing.stdin.write('{"value": "after the pause"}\n' * 5)
        producing.stdin.close()
        assert producing.wait(60) == 0, producing.stderr.read() if producing.stderr else ""
    finally:
        producing.kill()
    times = [record.timestamp for record in await read_topic(kafka_bootstrap, topic)]
    assert len(times) == 6
    gaps = [later - earlier for earlier, later in itertools.pairwise(times[1:])]
    assert min(gaps) >= 90, f"10 records per second after a pause too, not a burst: {gaps} ms apart"


async def test_produce_keeps_to_its_rate(kafka_bootstrap: str, topic_name: TopicNamer) -> None:
    topic = topic_name("rate")
    await create_topic(kafka_bootstrap, topic)
    started = time.monotonic()
    produced = run_command(kafka_bootstrap, "produce", topic, "--rate", "20", stdin='{"value": "x"}\n' * 21)
    assert produced.returncode == 0, produced.stderr
    assert time.monotonic() - started >= 1.0, "21 records at 20 per second take a second at least"
    assert len(await read_topic(kafka_bootstrap, topic)) == 21
