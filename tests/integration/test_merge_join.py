"""Seed 001's merge join on a real broker: rows of a data topic of several partitions joined with the
transactions of a one-partition topic that every task reads whole (`broadcast`), each task at its own
position, committed with its outputs; under exactly-once through kills and rebalances."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import msgpack
import pytest

from examples.cdc_merge.changes import Transaction, joined, produce, transactions
from runtime.config import parse_app
from runtime.worker.worker import Worker
from stores.partitioner import partition_for
from tests.conftest import TopicNamer
from tests.integration.test_exactly_once import wait_exit
from tests.support.kafka_helpers import committed_offsets, create_topic, read_topic
from tests.support.kills import FAST_FAILOVER, kill_and_replace
from tests.support.running import spawn_worker, write_app

pytestmark = pytest.mark.anyio

PARTITIONS = 3


def join_app(app_id: str, topics: dict[str, str], state_dir: Path, bootstrap: str, **settings: Any) -> dict[str, Any]:
    json_topic = {"key_serde": "str", "value_serde": "json"}
    return {
        "app_id": app_id,
        "kafka": {"bootstrap_servers": bootstrap},
        "topics": {
            topics["data"]: {"partitions": PARTITIONS, **json_topic},
            topics["transactions"]: {"partitions": 1, **json_topic},
            topics["joined"]: {"partitions": PARTITIONS, **json_topic},
            topics["unmatched"]: {"partitions": PARTITIONS, **json_topic},
        },
        "processors": [
            {
                "name": "merge",
                "class": "processors.joins:MergeJoin",
                "inputs": [topics["data"]],
                "broadcast": [topics["transactions"]],
                "outputs": [topics["joined"], topics["unmatched"]],
                "params": {"data": topics["data"], "transactions": topics["transactions"], "data_id": "tx",
                           "transaction_id": "id", "output": topics["joined"], "unmatched_topic": topics["unmatched"]},
            }
        ],
        "state_dir": str(state_dir),
        "queue": {"pause_at": 200, "resume_at": 50},
        **settings,
    }  # fmt: skip


async def given_changes(bootstrap: str, topic_name: TopicNamer, count: int) -> tuple[dict[str, str], list[Transaction]]:
    topics = {role: topic_name(role) for role in ("data", "transactions", "joined", "unmatched")}
    for role, topic in topics.items():
        await create_topic(bootstrap, topic, 1 if role == "transactions" else PARTITIONS)
    changes = list(transactions(count, seed=7))
    await produce(bootstrap, topics["data"], topics["transactions"], changes)
    return topics, changes


async def read_json(bootstrap: str, topic: str) -> list[tuple[str, Any]]:
    return [(r.key.decode(), json.loads(r.value)) for r in await read_topic(bootstrap, topic, "read_committed")]


def key_of(output: tuple[str, Any]) -> str:
    return json.dumps(output, sort_keys=True)


async def positions(bootstrap: str, app_id: str) -> dict[int, int]:
    """Each task's committed position in the transactions, from its positions store's changelog."""
    found: dict[int, int] = {}
    for record in await read_topic(bootstrap, f"{app_id}-merge-broadcast-positions-changelog", "read_committed"):
        found[record.partition] = msgpack.unpackb(record.value)
    return found


def final_positions(changes: list[Transaction]) -> dict[int, int]:
    """Where each task's position in the transactions ends: at the transaction of its partition's last row,
    which waits there for rows that may still come."""
    last: dict[int, int] = {}
    for index, transaction in enumerate(changes):
        for key, _ in transaction.rows:
            last[partition_for(key.encode(), PARTITIONS)] = index
    return last


def resumed_past_the_start(logs: Path, topic: str) -> list[str]:
    """The workers' log lines of tasks that started reading the broadcast topic past its first record."""
    started = [line for log in logs.glob("worker*.log") for line in log.read_text().splitlines()
               if "reading broadcast inputs from" in line]  # fmt: skip
    return [line for line in started if f"'{topic}[0]': 0}}" not in line]


def check_positions(found: dict[int, int], changes: list[Transaction], guarantee: str) -> None:
    """Exactly-once commits each task's position with its outputs; at-least-once the position of the
    commit before, which may be behind (read again), never ahead."""
    final = final_positions(changes)
    if guarantee == "exactly_once":
        assert found == final
    else:
        assert found.keys() <= final.keys() and all(found[p] <= final[p] for p in found), (found, final)


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
async def test_every_row_is_joined_with_its_transaction_and_each_task_keeps_its_own_position(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, guarantee: str, caplog: pytest.LogCaptureFixture
) -> None:
    topics, changes = await given_changes(kafka_bootstrap, topic_name, 300)
    app = join_app(topic_name("app"), topics, tmp_path / "state", kafka_bootstrap, guarantee=guarantee)
    worker = Worker(parse_app(app), kafka_bootstrap, until_caught_up=True)
    with caplog.at_level(logging.DEBUG, logger="runtime.task.broadcast"):
        await asyncio.wait_for(worker.run(), 120)
    # Each reader fetches the 300 transactions at once, past the queue's pause_at of 200.
    broadcast_pauses = [r.message for r in caplog.records if r.message.startswith("paused broadcast input")]
    assert len(broadcast_pauses) >= PARTITIONS and worker.counters.pauses >= len(broadcast_pauses)

    out = await read_json(kafka_bootstrap, topics["joined"])
    assert Counter(map(key_of, out)) == Counter(map(key_of, joined(changes)))
    by_partition: dict[int, list[Any]] = defaultdict(list)
    for key, value in joined(changes):
        by_partition[partition_for(key.encode(), PARTITIONS)].append((key, value))
    for partition in range(PARTITIONS):
        in_partition = [output for output in out if partition_for(output[0].encode(), PARTITIONS) == partition]
        assert in_partition == by_partition[partition], "each partition's rows in their order"
    assert await read_json(kafka_bootstrap, topics["unmatched"]) == []
    check_positions(await positions(kafka_bootstrap, app["app_id"]), changes, guarantee)
    group_offsets = await committed_offsets(kafka_bootstrap, app["app_id"])
    assert {topic for topic, _ in group_offsets} == {topics["data"]}, "broadcast positions are not the group's"


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
async def test_through_kills_and_rebalances_every_row_is_joined_once_and_positions_come_back(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, guarantee: str
) -> None:
    """Two workers share the data partitions; one of them, at random, is killed at a random moment five
    times over, and a new one joins: tasks move with their positions. Exactly-once: each row joined once,
    read_committed; at-least-once: each row at least once. No row is ever unmatched, which a position
    that came back ahead of where its task was would cause."""
    topics, changes = await given_changes(kafka_bootstrap, topic_name, 250)
    app = join_app(topic_name("app"), topics, tmp_path / "state", kafka_bootstrap, guarantee=guarantee,
                   commit_interval_ms=100)  # fmt: skip
    app["kafka"]["consumer"] = FAST_FAILOVER
    app["processors"][0]["class"] = "tests.support.join_apps:SlowMergeJoin"
    path = write_app(tmp_path, app)
    rows = sum(len(t.rows) for t in changes)
    committed = await kill_and_replace(path, kafka_bootstrap, app["app_id"], tmp_path, seed=11)
    assert committed < rows, "the kills did not land mid-stream"
    finisher = spawn_worker(path, "--until-caught-up", log=tmp_path / "finisher.log")
    assert await wait_exit(finisher, 120) == 0, (tmp_path / "finisher.log").read_text()[-3000:]

    out = Counter(map(key_of, await read_json(kafka_bootstrap, topics["joined"])))
    expected = Counter(map(key_of, joined(changes)))
    if guarantee == "exactly_once":
        assert out == expected
    else:
        assert set(out) == set(expected)
    assert await read_json(kafka_bootstrap, topics["unmatched"]) == []
    check_positions(await positions(kafka_bootstrap, app["app_id"]), changes, guarantee)
    assert resumed_past_the_start(tmp_path, topics["transactions"]), "no task came back to a position past the start"
