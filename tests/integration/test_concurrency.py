"""Processors with concurrency against a real broker: order per key, kill -9 under both guarantees with a
store, and a failing record while others are in flight under each policy."""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import msgpack
import pytest

from tests.conftest import TopicNamer
from tests.integration.test_exactly_once import assert_exactly_once, wait_exit
from tests.integration.test_state import counting_app
from tests.support.kafka_helpers import committed_offsets, create_topic, produce, read_topic
from tests.support.kills import FAST_FAILOVER, kill_and_replace
from tests.support.running import numbered, spawn_worker, write_app

pytestmark = pytest.mark.anyio

PARTITIONS = 4


def concurrent_app(
    topic_name: TopicNamer,
    source: str,
    sink: str,
    tmp_path: Path,
    bootstrap: str,
    order: str,
    max_in_flight: int = 64,
    **params: Any,
) -> dict[str, Any]:
    """Count per key after a random wait, with `order` and up to `max_in_flight` records in flight per task."""
    app = counting_app(topic_name("app"), source, sink, PARTITIONS, tmp_path / "state", "rocksdb")
    app["kafka"] = {"bootstrap_servers": bootstrap, "consumer": FAST_FAILOVER}
    app["commit_interval_ms"] = 100
    processor = app["processors"][0]
    processor["class"] = "tests.support.apps:AwaitingCountPerKey"
    processor["concurrency"] = {"max_in_flight": max_in_flight, "order": order}
    processor["params"].update(params)
    return app


async def updates_of(bootstrap: str, sink: str) -> list[dict[str, Any]]:
    return [msgpack.unpackb(record.value) for record in await read_topic(bootstrap, sink)]


@pytest.mark.parametrize("order", ["key", "none"])
async def test_each_keys_outputs_keep_its_input_order_while_keys_overlap(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, order: str
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, PARTITIONS)
    rng = random.Random(7)
    total = 3_000
    await produce(kafka_bootstrap, source, [(f"k{rng.randrange(300)}".encode(), msgpack.packb({"n": n}))
                                            for n in range(total)])  # fmt: skip
    app = concurrent_app(topic_name, source, sink, tmp_path, kafka_bootstrap, order, max_wait_ms=20)
    worker = spawn_worker(write_app(tmp_path, app), "--until-caught-up", log=tmp_path / "worker.log")
    assert await wait_exit(worker, 120) == 0, (tmp_path / "worker.log").read_text()[-3000:]
    updates = await updates_of(kafka_bootstrap, sink)
    assert sorted(update["n"] for update in updates) == list(range(total))
    inputs_of: dict[str, list[int]] = defaultdict(list)
    for update in updates:  # a key lives in one partition, and a partition's outputs are read in order
        inputs_of[update["key"]].append(update["n"])
    in_order = [key for key, inputs in inputs_of.items() if inputs == sorted(inputs)]
    if order == "key":
        assert len(in_order) == len(inputs_of)
        # ...and every update counted: one record of a key at a time read and wrote its count.
        assert all(sorted(u["count"] for u in updates if u["key"] == key) == list(range(1, len(inputs) + 1))
                   for key, inputs in inputs_of.items())  # fmt: skip
    else:
        assert len(in_order) < len(inputs_of)  # records of one key overlapped and overtook each other


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
async def test_kills_at_random_moments_leave_every_count_exact_or_nothing_missing(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, guarantee: str
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, PARTITIONS)
    total = 4_000
    await produce(kafka_bootstrap, source, numbered(total))
    # About 600 records/s (4 partitions x 4 in flight / 25 ms on average): the input lasts through the kills.
    app = concurrent_app(topic_name, source, sink, tmp_path, kafka_bootstrap, "key", 4, max_wait_ms=50)
    app["guarantee"] = guarantee
    path = write_app(tmp_path, app)
    committed = await kill_and_replace(path, kafka_bootstrap, app["app_id"], tmp_path, seed=len(guarantee), kills=5)
    assert committed < total, "the input was done before the last kill: the kills proved nothing"
    app["processors"][0]["concurrency"]["max_in_flight"] = 64  # the rest, at full speed
    finisher = spawn_worker(write_app(tmp_path, app, "finisher.yaml"), "--until-caught-up",
                            log=tmp_path / "finisher.log")  # fmt: skip
    assert await wait_exit(finisher, 180) == 0, (tmp_path / "finisher.log").read_text()[-3000:]
    if guarantee == "exactly_once":
        await assert_exactly_once(kafka_bootstrap, sink, total)
    else:
        seen = {update["n"] for update in await updates_of(kafka_bootstrap, sink)}
        assert seen == set(range(total)), f"{total - len(seen)} inputs have no output"


@pytest.mark.parametrize("policy", ["skip", "dead_letter", "fail"])
async def test_a_record_failing_while_others_are_in_flight_follows_the_policy(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, policy: str
) -> None:
    source, sink, dead_letters = topic_name("in"), topic_name("out"), topic_name("dlq")
    await create_topic(kafka_bootstrap, source, PARTITIONS)
    total, bad = 2_000, 1_234
    await produce(kafka_bootstrap, source, [(key, msgpack.packb({"n": n, "bad": n == bad}))
                                            for n, (key, _) in enumerate(numbered(total))])  # fmt: skip
    app = concurrent_app(topic_name, source, sink, tmp_path, kafka_bootstrap, "key", max_wait_ms=10)
    app["errors"] = {"processing": policy, "dead_letter_topic": dead_letters}
    app["topics"][dead_letters] = {"partitions": 1}
    worker = spawn_worker(write_app(tmp_path, app), "--until-caught-up", log=tmp_path / "worker.log")
    code = await wait_exit(worker, 120)
    log = (tmp_path / "worker.log").read_text()
    seen = {update["n"] for update in await updates_of(kafka_bootstrap, sink)}
    if policy == "fail":
        assert code == 1, log[-3000:]
        assert "processing failed in processor 'count' for record" in log and "lookup failed for k70" in log
        # Nothing past the failure is committed: its partition's offset stays at or below it.
        failed = next(r for r in await read_topic(kafka_bootstrap, source) if msgpack.unpackb(r.value)["n"] == bad)
        offsets = await committed_offsets(kafka_bootstrap, app["app_id"])
        assert offsets.get((source, failed.partition), 0) <= failed.offset
        return
    assert code == 0, log[-3000:]
    assert seen == set(range(total)) - {bad}
    letters = await read_topic(kafka_bootstrap, dead_letters)
    if policy == "dead_letter":
        assert [msgpack.unpackb(letter.value)["n"] for letter in letters] == [bad]
        assert b"lookup failed for k70" in dict(letters[0].headers)["error.message"]
    else:
        assert letters == []
