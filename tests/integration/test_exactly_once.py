"""Exactly-once against a real broker, proven by SIGKILL, SIGSTOP and failures, read with read_committed."""

from __future__ import annotations

import asyncio
import random
import re
import signal
from collections import Counter, defaultdict
from functools import partial
from pathlib import Path
from typing import Any

import msgpack
import pytest

from runtime.config import parse_app
from runtime.worker.worker import Worker, WorkerFailed
from stores import RocksDBBackend
from tests.conftest import TopicNamer
from tests.integration.test_state import counting_app, true_counts
from tests.support.kafka_helpers import committed_offsets, create_topic, produce, read_topic
from tests.support.kills import FAST_FAILOVER
from tests.support.running import numbered, read_log, spawn_worker, until, write_app

pytestmark = pytest.mark.anyio


def eos_app(topic_name: TopicNamer, source: str, sink: str, tmp_path: Path, bootstrap: str) -> dict[str, Any]:
    app = counting_app(topic_name("app"), source, sink, 4, tmp_path / "state", "rocksdb")
    app["guarantee"] = "exactly_once"
    app["commit_interval_ms"] = 100
    app["kafka"] = {"bootstrap_servers": bootstrap, "consumer": FAST_FAILOVER}
    app["processors"][0]["class"] = "tests.support.apps:SlowCountPerKey"
    return app


async def assert_exactly_once(bootstrap: str, sink: str, total: int) -> None:
    updates = [msgpack.unpackb(r.value) for r in await read_topic(bootstrap, sink, "read_committed")]
    seen = Counter(update["n"] for update in updates)
    assert set(seen) == set(range(total)), f"{total - len(seen)} inputs have no output"
    duplicates = {n: times for n, times in seen.items() if times > 1}
    assert not duplicates, f"{len(duplicates)} inputs came out more than once, e.g. {list(duplicates.items())[:5]}"
    per_key: dict[str, list[int]] = defaultdict(list)
    for update in updates:
        per_key[update["key"]].append(update["count"])
    # Every key's updates are exactly 1, 2, ..., its true count: state and outputs moved together.
    assert {key: sorted(counts) for key, counts in per_key.items()} == {
        key: list(range(1, count + 1)) for key, count in true_counts(total).items()
    }


async def wait_exit(process: Any, timeout: float) -> int:
    for _ in range(int(timeout * 10)):
        if process.poll() is not None:
            return int(process.returncode)
        await asyncio.sleep(0.1)
    raise AssertionError("worker did not finish in time")


def restored_every_task(log: Path) -> bool:
    """Each of the 4 tasks restored its store `counts` (or found it up to date), which it does once claimed."""
    return set(re.findall(r"store counts partition (\d+)\b", read_log(log))) == {"0", "1", "2", "3"}


@pytest.mark.parametrize("workers", [1, 2])
async def test_crash_loop_outputs_every_input_exactly_once(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, workers: int
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 4)
    total = 25_000
    await produce(kafka_bootstrap, source, numbered(total))
    app = eos_app(topic_name, source, sink, tmp_path, kafka_bootstrap)
    path = write_app(tmp_path, app)
    rng = random.Random(workers)
    running = [spawn_worker(path, log=tmp_path / f"w{i}.log") for i in range(workers)]
    for kill in range(5):  # SIGKILL at random moments; with two workers the survivor takes over meanwhile
        await asyncio.sleep(rng.uniform(2.0, 5.0))
        victim = running.pop(rng.randrange(len(running)))
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        running.append(spawn_worker(path, log=tmp_path / f"restart{kill}.log"))
    finisher = spawn_worker(path, "--until-caught-up", log=tmp_path / "finisher.log")
    assert await wait_exit(finisher, 240) == 0
    for worker in running:
        worker.send_signal(signal.SIGTERM)
        assert await wait_exit(worker, 60) == 0
    await assert_exactly_once(kafka_bootstrap, sink, total)


async def test_zombie_is_fenced(kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 4)
    total = 40_000
    await produce(kafka_bootstrap, source, numbered(total))
    app = eos_app(topic_name, source, sink, tmp_path, kafka_bootstrap)
    zombie = spawn_worker(write_app(tmp_path, {**app, "state_dir": str(tmp_path / "z")}, "z.yaml"),
                          log=tmp_path / "zombie.log")  # fmt: skip
    await asyncio.sleep(3)
    zombie.send_signal(signal.SIGSTOP)  # frozen mid-transaction, its session runs out
    heir = spawn_worker(write_app(tmp_path, {**app, "state_dir": str(tmp_path / "h")}, "h.yaml"),
                        log=tmp_path / "heir.log")  # fmt: skip
    # The heir owns every task now and has fenced the zombie's producers (claimed, then restored each task).
    await until(partial(restored_every_task, tmp_path / "heir.log"), "the heir restored every task's store")
    zombie.send_signal(signal.SIGCONT)
    await until(lambda: "was taken over by another worker" in read_log(tmp_path / "zombie.log"),
                "the zombie found itself fenced")  # fmt: skip
    finisher = spawn_worker(write_app(tmp_path, {**app, "state_dir": str(tmp_path / "f")}, "f.yaml"),
                            "--until-caught-up", log=tmp_path / "finisher.log")  # fmt: skip
    assert await wait_exit(finisher, 240) == 0
    for worker in (zombie, heir):
        worker.send_signal(signal.SIGTERM)
        await wait_exit(worker, 60)
    assert "was taken over by another worker" in (tmp_path / "zombie.log").read_text()
    await assert_exactly_once(kafka_bootstrap, sink, total)


async def test_failure_aborts_the_transaction_and_its_state(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 1)
    records = [*numbered(50), (b"k0", msgpack.packb({"n": 50, "bad": True}))]
    await produce(kafka_bootstrap, source, records)
    app = counting_app(topic_name("app"), source, sink, 1, tmp_path / "state", "rocksdb")
    app["guarantee"] = "exactly_once"
    app["commit_interval_ms"] = 60_000  # one transaction holds all 51 records
    app["processors"][0]["class"] = "tests.support.apps:PickyCountPerKey"
    worker = Worker(parse_app(app), kafka_bootstrap, until_caught_up=True)
    with pytest.raises(WorkerFailed, match="bad record k0"):
        await worker.run()
    assert worker.counters.aborted_transactions == 1
    assert await read_topic(kafka_bootstrap, sink, "read_committed") == []
    assert await read_topic(kafka_bootstrap, f"{app['app_id']}-counts-changelog", "read_committed") == []
    store = RocksDBBackend(tmp_path / "state" / app["app_id"] / "counts" / "0")
    try:
        assert list(store.items()) == [], "an aborted transaction's writes reached the store"
    finally:
        store.close()


async def test_a_custom_group_id_holds_the_transactions_offsets(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 2)
    total = 20_000
    await produce(kafka_bootstrap, source, numbered(total))
    app = eos_app(topic_name, source, sink, tmp_path, kafka_bootstrap)
    group = topic_name("custom-group")
    app["kafka"]["consumer"] = {**FAST_FAILOVER, "group_id": group}
    path = write_app(tmp_path, app)
    victim = spawn_worker(path, log=tmp_path / "victim.log")
    await asyncio.sleep(4)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    finisher = spawn_worker(path, "--until-caught-up", log=tmp_path / "finisher.log")
    assert await wait_exit(finisher, 120) == 0
    await assert_exactly_once(kafka_bootstrap, sink, total)
    committed = await committed_offsets(kafka_bootstrap, group)
    assert set(committed) == {(source, 0), (source, 1)}
    assert sum(committed.values()) == total, "the custom group's offsets stop short of the end"
    assert await committed_offsets(kafka_bootstrap, app["app_id"]) == {}
