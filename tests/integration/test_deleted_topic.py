"""A topic deleted while the app runs: the worker stops with exit 1 naming it, in a handful of log lines, with
no committed input record lacking its output; a start after that refuses to create an input again."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import msgpack
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from tests.conftest import TopicNamer
from tests.support.kafka_helpers import committed_offsets, create_topic, produce, read_topic
from tests.support.running import numbered, read_log, spawn_worker, write_app

RECORDS = 2_000
EXIT_WITHIN_S = 30


async def delete_topic(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([topic])
    finally:
        await admin.close()


async def until_output(bootstrap: str, sink: str, count: int, worker: subprocess.Popen[bytes]) -> None:
    """Until the output holds `count` committed records: the deletion then comes in the middle of the run."""
    for _ in range(600):
        assert worker.poll() is None, "the worker stopped before the deletion"
        if len(await read_topic(bootstrap, sink)) >= count:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"fewer than {count} outputs after 60 s")


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
@pytest.mark.parametrize("deleted", ["input", "output"])
def test_a_topic_deleted_while_the_app_runs_stops_it_naming_the_topic(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, guarantee: str, deleted: str
) -> None:
    bootstrap = kafka_bootstrap
    source, sink, copy, app_id = topic_name("in"), topic_name("out"), topic_name("copy"), topic_name("app")
    asyncio.run(create_topic(bootstrap, source, 2))
    asyncio.run(produce(bootstrap, source, numbered(RECORDS)))
    app = write_app(tmp_path, {
        "app_id": app_id,
        "guarantee": guarantee,
        "topics": {source: {"partitions": 2, "key_serde": "str"}, sink: {"partitions": 2, "key_serde": "str"},
                   copy: {"partitions": 2, "key_serde": "str"}},
        "processors": [{"name": "echo", "class": "tests.support.apps:Echo", "inputs": [source],
                        "outputs": [sink, copy], "params": {"output": sink, "copy_to": copy, "sleep_ms": 5}}],
        "commit_interval_ms": 200,
        "kafka": {"bootstrap_servers": bootstrap},
    })  # fmt: skip
    log = tmp_path / "worker.log"
    worker = spawn_worker(app, log=log)
    asyncio.run(until_output(bootstrap, sink, 100, worker))
    gone = source if deleted == "input" else sink
    asyncio.run(delete_topic(bootstrap, gone))

    assert worker.wait(EXIT_WITHIN_S) == 1
    lines = read_log(log).splitlines()
    assert f"topic '{gone}' (an {deleted} of processor 'echo') was deleted while the app ran" in lines[-1], lines[-5:]
    assert len(lines) < 100, lines[:20]
    if deleted == "output":  # the broker dropped the group's offsets of a deleted input along with it
        committed = asyncio.run(committed_offsets(bootstrap, app_id))
        outputs = {tuple(msgpack.unpackb(r.value)["src"]) for r in asyncio.run(read_topic(bootstrap, copy))}
        assert committed, "nothing was committed before the deletion"
        for (topic, partition), offset in committed.items():
            assert topic == source
            lacking = [n for n in range(offset) if (partition, n) not in outputs]
            assert not lacking, f"committed records of partition {partition} without their outputs: {lacking[:10]}"


def test_a_start_after_an_input_was_deleted_refuses_to_create_it_empty(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    bootstrap = kafka_bootstrap
    source, sink, app_id = topic_name("in"), topic_name("out"), topic_name("app")
    app = write_app(tmp_path, {
        "app_id": app_id,
        "topics": {source: {"partitions": 1, "key_serde": "str"}, sink: {"partitions": 1, "key_serde": "str"}},
        "processors": [{"name": "echo", "class": "tests.support.apps:Echo", "inputs": [source], "outputs": [sink],
                        "params": {"output": sink}}],
        "kafka": {"bootstrap_servers": bootstrap},
    })  # fmt: skip
    asyncio.run(create_topic(bootstrap, source, 1))
    asyncio.run(produce(bootstrap, source, numbered(10)))
    first = spawn_worker(app, "--until-caught-up")
    assert first.wait(60) == 0
    asyncio.run(delete_topic(bootstrap, source))

    log = tmp_path / "restart.log"
    again = spawn_worker(app, log=log)
    assert again.wait(60) == 2
    told = read_log(log)
    assert f"'{source}' (an input of processor 'echo') does not exist, but consumer group '{app_id}' has run" in told
    assert "python -m runtime topics create" in told
