"""Exactly-once on three brokers through broker faults: the leader of the app's partitions killed (-9) twice,
then a broker wiped and restarted empty, while one worker counts a backlog with a RocksDB store. Every topic
has 3 replicas and needs 2 in sync, the app's changelog too (`internal_topics`)."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from pathlib import Path
from subprocess import Popen

import pytest
from aiokafka.errors import KafkaError

from runtime.devkafka.cluster import LocalCluster
from tests.conftest import TopicNamer
from tests.integration.test_exactly_once import assert_exactly_once, wait_exit
from tests.integration.test_state import counting_app
from tests.support.broker_faults import (
    create_replicated,
    kill,
    leading_most,
    node,
    roles,
    until_fully_replicated,
    wipe,
)
from tests.support.commands import run_command
from tests.support.kafka_helpers import committed_offsets, produce
from tests.support.running import numbered, read_log, spawn_worker, write_app

pytestmark = pytest.mark.anyio
log = logging.getLogger(__name__)

PARTITIONS = 4
TWO_IN_SYNC = {"min.insync.replicas": "2"}
# Records produced before each fault: at 20 records/s per task at most (PacedCountPerKey, 50 ms each), the
# worker has seconds of them left when the fault lands, and the last are done soon after the wipe.
CHUNK = 300
STALL_S = 120
# What the worker must commit while a broker is down: more than the transactions in flight when it went.
WITH_A_BROKER_DOWN = 50


async def committed_total(bootstrap: str, group: str) -> int | None:
    """The input records the group has committed; None while its coordinator cannot say (it may be moving)."""
    try:
        return sum((await committed_offsets(bootstrap, group)).values())
    except KafkaError:
        return None


async def until_committed_beyond(bootstrap: str, group: str, floor: int, worker: Popen[bytes], worker_log: Path) -> int:
    """Wait until the group has committed more than `floor` records, as long as it keeps committing more (or
    may be moving its coordinator); the worker must stay up meanwhile."""
    latest, stalled_since = 0, time.monotonic()
    while True:
        assert worker.poll() is None, f"the worker stopped:\n{read_log(worker_log)[-3000:]}"
        committed = await committed_total(bootstrap, group)
        if committed is not None and committed > floor:
            return committed
        if committed is not None and committed > latest:
            latest, stalled_since = committed, time.monotonic()
        assert time.monotonic() - stalled_since < STALL_S, f"no commit beyond {latest} in {STALL_S} s (of {floor + 1})"
        await asyncio.sleep(0.2)


async def test_every_count_is_exact_through_two_leader_kills_and_a_wiped_broker(
    kafka_cluster: LocalCluster, topic_name: TopicNamer, tmp_path: Path
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    source, sink = topic_name("in"), topic_name("out")
    for topic in (source, sink):  # broker 1 leads them all at first, then 2 once 1 is gone
        await create_replicated(bootstrap, topic, PARTITIONS, [1, 2, 3], TWO_IN_SYNC)
    app = counting_app(topic_name("app"), source, sink, PARTITIONS, tmp_path / "state", "rocksdb")
    app["guarantee"] = "exactly_once"
    app["commit_interval_ms"] = 500
    app["kafka"] = {"bootstrap_servers": bootstrap}
    app["internal_topics"] = {"replication_factor": 3, "configs": TWO_IN_SYNC}
    counting = app["processors"][0]
    counting["class"] = "tests.support.apps:PacedCountPerKey"
    counting["params"]["sleep_ms"] = 50
    group, changelog = app["app_id"], f"{app['app_id']}-counts-changelog"
    topics, transactional_ids = [source, sink, changelog], [f"{group}-count-{p}" for p in range(PARTITIONS)]
    worker_log = tmp_path / "worker.log"
    worker = spawn_worker(write_app(tmp_path, app), log=worker_log)

    produced = 0
    for fault in ("kill", "kill", "wipe"):
        await produce(bootstrap, source, numbered(CHUNK, produced), acks="all", enable_idempotence=True)
        produced += CHUNK
        # The fault lands once the worker has committed some of the new records, with most of them still to do.
        committed = await until_committed_beyond(bootstrap, group, produced - CHUNK, worker, worker_log)
        victim = node(kafka_cluster, await leading_most(bootstrap, topics))
        role = await roles(bootstrap, victim.node_id, topics, group, transactional_ids)
        log.info("%s broker %d (%s) at %d of %d records committed", fault, victim.node_id, role, committed, produced)
        (kill if fault == "kill" else wipe)(victim)
        # The other two carry on alone: two replicas in sync are all that a write needs.
        floor = committed + WITH_A_BROKER_DOWN
        committed = await until_committed_beyond(bootstrap, group, floor, worker, worker_log)
        log.info("committed %d with broker %d down", committed, victim.node_id)
        await asyncio.to_thread(victim.start)  # it waits until the broker answers
        log.info("broker %d answers again", victim.node_id)
        await until_fully_replicated(bootstrap)
        log.info("every replica in sync")

    await until_committed_beyond(bootstrap, group, produced - 1, worker, worker_log)
    log.info("committed all %d", produced)
    worker.send_signal(signal.SIGTERM)
    assert await wait_exit(worker, 60) == 0, read_log(worker_log)[-3000:]
    assert "could not be read" not in read_log(worker_log), "a broker did not know the new changelog yet"
    await assert_exactly_once(bootstrap, sink, produced)
    described = run_command(bootstrap, "topics", "describe", changelog)
    assert described.returncode == 0, described.stderr
    shape, configs = (line.strip() for line in described.stdout.splitlines()[:2])
    assert shape.startswith(f"{changelog}: {PARTITIONS} partitions, replication factor 3,"), shape
    assert configs == "configs: cleanup.policy=compact, min.insync.replicas=2"
