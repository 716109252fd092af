"""Store queries of three workers under exactly-once, while they process and while the group rebalances: every
answer is the committed state as of the input offsets it reports, never the writes buffered until the next
commit; a key the asked worker does not own is answered by the worker that does; and while a fourth worker
joins and then one stops, a key is answered correctly or said to be unanswerable now, never answered wrong."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import msgpack
import pytest

from runtime.config import AppConfig, parse_app
from runtime.devkafka.broker import free_ports
from runtime.worker.worker import Worker
from stores.partitioner import partition_for
from tests.conftest import TopicNamer
from tests.support.kafka_helpers import create_topic, produce

pytestmark = pytest.mark.anyio

PARTITIONS = 6
KEYS = [f"k{n}" for n in range(12)]
ROUND = 36  # records a round, over the keys in turn
# Why a worker may not answer now: each is said, with a 503, rather than a wrong answer given.
UNANSWERED = re.compile(r"rebalancing|restoring|did not answer|not processing|event loop did not take")


def partition_of(key: str) -> int:
    return partition_for(key.encode(), PARTITIONS)


def offset_of(partition: int, offsets: list[dict[str, Any]]) -> int:
    """The input offset an answer reports for the partition: every record below it is in the answer."""
    offset: int = next(o["offset"] for o in offsets if o["partition"] == partition)
    return offset


def get(port: int, path: str) -> tuple[int, dict[str, Any]] | None:
    """The worker's answer; None when nothing listens on the port (a worker stopped)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
    except urllib.error.URLError as error:
        if isinstance(error.reason, ConnectionRefusedError):
            return None
        raise


class Group:
    """The workers of one app, each with its own state directory and health port, and the input they read."""

    def __init__(self, config: AppConfig, bootstrap: str, tmp_path: Path, source: str):
        self.config, self.bootstrap, self.tmp_path, self.source = config, bootstrap, tmp_path, source
        self.ports = free_ports(4)
        self.workers: dict[int, Worker] = {}
        self.running: dict[int, asyncio.Task[None]] = {}
        self.written: dict[int, list[str]] = defaultdict(list)  # each partition's keys, in offset order
        self.records = 0

    def address(self, index: int) -> str:
        return f"127.0.0.1:{self.ports[index]}"

    def start(self, index: int) -> None:
        assert self.config.health is not None
        config = self.config.model_copy(update={
            "health": self.config.health.model_copy(update={"port": self.ports[index]}),
            "state_dir": self.tmp_path / f"state-{index}",
        })  # fmt: skip
        self.workers[index] = worker = Worker(config, self.bootstrap, index=index)
        self.running[index] = asyncio.create_task(worker.run())

    async def stop(self, index: int) -> None:
        self.workers[index].stop()
        await self.running[index]

    async def stop_all(self) -> None:
        for worker in self.workers.values():
            worker.stop()
        await asyncio.gather(*self.running.values(), return_exceptions=True)

    def check_alive(self) -> None:
        failed = [task for task in self.running.values() if task.done() and task.exception() is not None]
        assert not failed, [task.exception() for task in failed]

    async def write_round(self) -> None:
        keys = [KEYS[n % len(KEYS)] for n in range(self.records, self.records + ROUND)]
        for key in keys:
            self.written[partition_of(key)].append(key)
        self.records += ROUND
        await produce(self.bootstrap, self.source, [(k.encode(), msgpack.packb({"n": n})) for n, k in enumerate(keys)])

    def expected(self, key: str, offsets: list[dict[str, Any]]) -> int:
        """The key's count in the committed state as of the input offsets an answer reports."""
        partition = partition_of(key)
        return self.written[partition][: offset_of(partition, offsets)].count(key)


class Asker:
    """Asks the workers for keys and prefixes, and checks every answer against the input written."""

    def __init__(self, group: Group):
        self.group = group
        self.answered: dict[int, Counter[str]] = defaultdict(Counter)  # by the worker asked: who answered, how often

    async def key(self, index: int, key: str) -> bool:
        """Whether the answer reflects every record written of the key's partition."""
        reply = await asyncio.to_thread(get, self.group.ports[index], f"/stores/counts/{key}")
        if reply is None or self.said_why(*reply):
            return False
        status, body = reply
        assert status == 200, body
        expected = self.group.expected(key, body["offsets"])
        assert body["partition"] == partition_of(key), body
        assert (body["found"], body["value"] or 0) == (expected > 0, expected), (key, body)
        self.answered[index][body["worker"]] += 1
        partition = partition_of(key)
        return offset_of(partition, body["offsets"]) == len(self.group.written[partition])

    async def keys(self, index: int, query: str, keys: list[str]) -> None:
        """Every key of a prefix or a range, each partition's as of the offsets told for it."""
        reply = await asyncio.to_thread(get, self.group.ports[index], f"/stores/counts?{query}")
        if reply is None or self.said_why(*reply):
            return
        status, body = reply
        assert status == 200, body
        assert [p["partition"] for p in body["partitions"]] == list(range(PARTITIONS)), body
        offsets = [offset for p in body["partitions"] for offset in p["offsets"]]
        counts = {key: self.group.expected(key, offsets) for key in keys}
        assert {item["key"]: item["value"] for item in body["items"]} == {k: n for k, n in counts.items() if n}, body
        assert all(item["partition"] == partition_of(item["key"]) for item in body["items"]), body

    def said_why(self, status: int, body: dict[str, Any]) -> bool:
        if status != 503:
            return False
        assert UNANSWERED.search(body["error"]), body
        return True

    async def round(self, asked: list[int]) -> bool:
        """Every key asked of every worker, and a prefix and a range: whether every key's answer was caught up."""
        self.group.check_alive()
        keys = [self.key(index, key) for index in asked for key in KEYS]
        prefixes = [self.keys(index, "prefix=k", KEYS) for index in asked]
        ranges = [self.keys(index, "from=k2&to=k5", ["k2", "k3", "k4"]) for index in asked]  # k10 < k2
        caught_up = await asyncio.gather(*keys, *prefixes, *ranges)
        return all(caught_up[: len(keys)])

    async def until_caught_up(self, asked: list[int]) -> None:
        while True:
            if await self.round(asked):
                return
            await asyncio.sleep(0.05)


async def test_answers_are_committed_state_routed_to_the_owner_and_never_wrong_while_the_group_rebalances(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, PARTITIONS)
    topics = {"partitions": PARTITIONS, "key_serde": "str"}
    config = parse_app({
        "app_id": topic_name("app"),
        "guarantee": "exactly_once",
        "commit_interval_ms": 500,  # writes wait in the stores' buffers this long after they are processed
        "topics": {source: topics, sink: topics},
        "processors": [{"name": "count", "class": "tests.support.apps:CountPerKey", "inputs": [source],
                        "outputs": [sink], "params": {"output": sink}, "stores": {"counts": {"key_serde": "str"}}}],
        "kafka": {"bootstrap_servers": kafka_bootstrap,
                  "consumer": {"session_timeout_ms": 3_000, "heartbeat_interval_ms": 300}},
        "state_dir": str(tmp_path),
        "health": {"host": "127.0.0.1", "port": 8080},
        "queries": {},
    })  # fmt: skip
    group = Group(config, kafka_bootstrap, tmp_path, source)
    asker = Asker(group)
    try:
        for index in range(3):
            group.start(index)
        await group.write_round()
        await asyncio.wait_for(asker.until_caught_up([0, 1, 2]), 30)
        await group.write_round()  # processed at once, committed up to half a second later: asked meanwhile
        await asyncio.wait_for(asker.until_caught_up([0, 1, 2]), 30)
        for index in range(3):
            others = set(asker.answered[index]) - {group.address(index)}
            assert others and group.address(index) in asker.answered[index], (index, asker.answered[index])

        asked = [0, 1, 2, 3]
        rebalancing = True

        async def ask_and_write_while_rebalancing() -> None:
            while rebalancing:
                await group.write_round()
                await asker.round(asked)

        during = asyncio.create_task(ask_and_write_while_rebalancing())
        group.start(3)  # a fourth joins: every partition's owner may change
        while asker.answered[3][group.address(3)] == 0:  # until it answers a key of its own
            assert not during.done(), during.exception()
            await asyncio.sleep(0.05)
        await group.stop(0)  # and one leaves, asked until it stops and after: nothing listens there then
        rebalancing = False
        await asyncio.wait_for(during, 30)
        asked.remove(0)
        asker.answered.clear()
        await asyncio.wait_for(asker.until_caught_up(asked), 30)
    finally:
        await group.stop_all()
    for index in asked:  # the three left own two partitions each
        assert set(asker.answered[index]) == {group.address(i) for i in asked}, (index, asker.answered[index])
