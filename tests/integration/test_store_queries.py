"""Store queries of two workers under exactly-once: every answer is the committed state as of the input
offsets it reports, never the writes buffered until the next commit, and a key the asked worker does not
own is answered by the worker that does."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

import msgpack
import pytest

from runtime.config import parse_app
from runtime.devkafka.broker import free_ports
from runtime.worker.worker import Worker
from stores.partitioner import partition_for
from tests.conftest import TopicNamer
from tests.support.kafka_helpers import create_topic, produce

pytestmark = pytest.mark.anyio

KEYS = [f"k{n}" for n in range(8)]
ROUND = 40  # records a round, over the keys in turn


def ask(port: int, key: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/stores/counts/{key}", timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


async def test_answers_are_committed_state_and_other_workers_keys_are_routed(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 2)
    ports = free_ports(2)
    config = parse_app({
        "app_id": topic_name("app"),
        "guarantee": "exactly_once",
        "commit_interval_ms": 1_000,  # writes wait in the stores' buffers this long after they are processed
        "topics": {source: {"partitions": 2, "key_serde": "str"}, sink: {"partitions": 2, "key_serde": "str"}},
        "processors": [{"name": "count", "class": "tests.support.apps:CountPerKey", "inputs": [source],
                        "outputs": [sink], "params": {"output": sink}, "stores": {"counts": {"key_serde": "str"}}}],
        "kafka": {"bootstrap_servers": kafka_bootstrap,
                  "consumer": {"session_timeout_ms": 3_000, "heartbeat_interval_ms": 500}},
        "state_dir": str(tmp_path / "state"),
        "health": {"host": "127.0.0.1", "port": ports[0]},
        "queries": {},
    })  # fmt: skip
    assert config.health is not None
    second = config.model_copy(update={"health": config.health.model_copy(update={"port": ports[1]})})
    workers = [Worker(config, kafka_bootstrap), Worker(second, kafka_bootstrap, index=1)]
    addresses = {f"127.0.0.1:{port}" for port in ports}
    running = [asyncio.create_task(worker.run()) for worker in workers]
    written: dict[int, list[str]] = defaultdict(list)  # each partition's keys, in offset order

    async def write_round(start: int) -> None:
        keys = [KEYS[n % len(KEYS)] for n in range(start, start + ROUND)]
        for key in keys:
            written[partition_for(key.encode(), 2)].append(key)
        await produce(kafka_bootstrap, source, [(k.encode(), msgpack.packb({"n": n})) for n, k in enumerate(keys)])

    answered_by: set[str] = set()
    consistent = 0

    async def ask_until_caught_up() -> None:
        """Ask worker 0 for every key until each answer reflects every record written."""
        nonlocal consistent
        while True:
            assert not any(task.done() for task in running), [task.result() for task in running if task.done()]
            caught_up = True
            for key in KEYS:
                status, body = await asyncio.to_thread(ask, ports[0], key)
                if status == 503:  # the group is rebalancing, or the partition restores: said so, nothing wrong
                    assert body["error"], body
                    caught_up = False
                    continue
                assert status == 200, body
                partition = partition_for(key.encode(), 2)
                offset = next(o["offset"] for o in body["offsets"] if o["partition"] == partition)
                expected = written[partition][:offset].count(key)
                assert (body["found"], body["value"] or 0) == (expected > 0, expected), (key, body)
                assert body["partition"] == partition
                consistent += 1
                answered_by.add(body["worker"])
                caught_up = caught_up and offset == len(written[partition])
            if caught_up:
                return
            await asyncio.sleep(0.05)

    try:
        await write_round(0)
        await asyncio.wait_for(ask_until_caught_up(), 60)
        await write_round(ROUND)  # processed at once, committed up to a second later: asked meanwhile
        await asyncio.wait_for(ask_until_caught_up(), 60)
    finally:
        for worker in workers:
            worker.stop()
        await asyncio.gather(*running, return_exceptions=True)
    assert answered_by == addresses, "a key of the other worker was not answered through routing"
    assert consistent >= 2 * len(KEYS)
