"""A batching sink that writes to SQLite only in `flush`: no offset is ever committed before the rows of
the records below it are written, whether the worker is killed, stopped, or its flush fails."""

from __future__ import annotations

import asyncio
import random
import signal
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TopicNamer
from tests.integration.test_exactly_once import wait_exit
from tests.support.kafka_helpers import committed_offsets, create_topic, produce
from tests.support.kills import FAST_FAILOVER
from tests.support.lifecycle_apps import read_rows
from tests.support.running import numbered, spawn_worker, until, write_app

pytestmark = pytest.mark.anyio

GUARANTEES = ["at_least_once", "exactly_once"]


def sink_app(
    app_id: str, source: str, partitions: int, bootstrap: str, guarantee: str, **params: Any
) -> dict[str, Any]:
    return {
        "app_id": app_id,
        "kafka": {"bootstrap_servers": bootstrap, "consumer": FAST_FAILOVER},
        "topics": {source: {"partitions": partitions, "key_serde": "str"}},
        "processors": [
            {"name": "sink", "class": "tests.support.lifecycle_apps:SqliteSink", "inputs": [source],
             "params": params}
        ],
        "guarantee": guarantee,
        "commit_interval_ms": 200,
    }  # fmt: skip


def has_more_rows(db: Path, than: int) -> bool:
    return len(read_rows(db)) > than


def rows_by_partition(db: Path) -> dict[int, list[int]]:
    offsets: dict[int, list[int]] = {}
    for partition, offset, _, _ in read_rows(db):
        offsets.setdefault(partition, []).append(offset)
    return offsets


def final_error(log: Path) -> str:
    """The line the command prints when the worker fails (the log lines before it say more)."""
    errors = [line for line in log.read_text().splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, errors
    return errors[0]


async def assert_rows_cover_the_committed_offsets(bootstrap: str, group: str, db: Path) -> int:
    """Every record below its partition's committed offset has its row; returns how many are committed."""
    committed = await committed_offsets(bootstrap, group)
    ends = {partition: offset for (_, partition), offset in committed.items()}
    below = Counter(partition for partition, offset, _, _ in read_rows(db) if offset < ends.get(partition, 0))
    missing = {partition: end - below[partition] for partition, end in ends.items() if below[partition] < end}
    assert not missing, f"offsets committed before their rows were written, rows missing by partition: {missing}"
    return sum(committed.values())


@pytest.mark.parametrize("guarantee", GUARANTEES)
async def test_killed_sink_never_commits_offsets_ahead_of_its_rows(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, guarantee: str
) -> None:
    source, group = topic_name("in"), topic_name("app")
    await create_topic(kafka_bootstrap, source, 4)
    total = 12_000
    await produce(kafka_bootstrap, source, numbered(total))
    db = tmp_path / "sink.sqlite"
    path = write_app(tmp_path, sink_app(group, source, 4, kafka_bootstrap, guarantee, db=str(db), sleep_every=10))
    rng = random.Random(guarantee)
    for kill in range(3):
        written = len(read_rows(db))
        worker = spawn_worker(path, log=tmp_path / f"killed{kill}.log")
        await until(partial(has_more_rows, db, written), "this run flushed rows")  # at least once
        await asyncio.sleep(rng.uniform(0.0, 1.0))  # the random moment of the kill
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        committed = await assert_rows_cover_the_committed_offsets(kafka_bootstrap, group, db)
    assert committed < total, "the kills did not land mid-run"

    finisher = spawn_worker(path, "--until-caught-up", log=tmp_path / "finisher.log")
    assert await wait_exit(finisher, 120) == 0
    assert await assert_rows_cover_the_committed_offsets(kafka_bootstrap, group, db) == total
    numbers = Counter(n for _, _, n, _ in read_rows(db))
    assert set(numbers) == set(range(total)), f"{total - len(numbers)} records have no row"
    assert max(numbers.values()) == 1, "a record has two rows"


@pytest.mark.parametrize("guarantee", GUARANTEES)
async def test_graceful_stop_flushes_everything_it_commits(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, guarantee: str
) -> None:
    source, group = topic_name("in"), topic_name("app")
    await create_topic(kafka_bootstrap, source, 2)
    total = 4000
    await produce(kafka_bootstrap, source, numbered(total))
    db, progress = tmp_path / "sink.sqlite", tmp_path / "progress"
    app = sink_app(group, source, 2, kafka_bootstrap, guarantee, db=str(db), sleep_every=10, progress=str(progress),
                   progress_after=200)  # fmt: skip
    app["commit_interval_ms"] = 600_000  # the stop's commit is the only one
    worker = spawn_worker(write_app(tmp_path, app), log=tmp_path / "worker.log")
    await until(progress.exists, "the worker wrote its progress file")
    worker.send_signal(signal.SIGTERM)
    assert await wait_exit(worker, 30) == 0

    committed = await committed_offsets(kafka_bootstrap, group)
    assert 0 < sum(committed.values()) < total, committed
    # The rows are exactly the committed records: the stop flushed them all before committing.
    assert rows_by_partition(db) == {p: list(range(offset)) for (_, p), offset in committed.items()}


@pytest.mark.parametrize("guarantee", GUARANTEES)
async def test_failing_flush_under_fail_stops_the_worker_and_commits_nothing_past_it(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, guarantee: str
) -> None:
    source, group = topic_name("in"), topic_name("app")
    await create_topic(kafka_bootstrap, source, 1)
    await produce(kafka_bootstrap, source, numbered(400))
    db, log = tmp_path / "sink.sqlite", tmp_path / "worker.log"
    app = sink_app(group, source, 1, kafka_bootstrap, guarantee, db=str(db), sleep_every=5, fail_at=300)
    app["commit_interval_ms"] = 50
    app["errors"] = {"processing": "fail"}
    worker = spawn_worker(write_app(tmp_path, app), log=log)
    assert await wait_exit(worker, 30) == 1
    error = final_error(log)
    assert error.startswith("error: processor 'sink' failed in flush() of task sink[0]"), error
    assert "database refused the batch holding n=300" in error

    committed = await assert_rows_cover_the_committed_offsets(kafka_bootstrap, group, db)
    assert 0 < committed <= 300, "the offsets went past the records whose flush failed"


async def test_failing_flush_under_skip_goes_on_and_commits_once_a_flush_succeeds(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, group = topic_name("in"), topic_name("app")
    await create_topic(kafka_bootstrap, source, 1)
    await produce(kafka_bootstrap, source, numbered(300))
    db, log = tmp_path / "sink.sqlite", tmp_path / "worker.log"
    app = sink_app(group, source, 1, kafka_bootstrap, "at_least_once", db=str(db), sleep_every=5, failing_flushes=3)
    app["commit_interval_ms"] = 50
    app["errors"] = {"processing": "skip"}
    worker = spawn_worker(write_app(tmp_path, app), "--until-caught-up", log=log)
    assert await wait_exit(worker, 30) == 0
    assert log.read_text().count("processor 'sink' failed to flush task sink[0]") == 3

    assert await committed_offsets(kafka_bootstrap, group) == {(source, 0): 300}
    assert [(offset, n, writes) for _, offset, n, writes in read_rows(db)] == [(n, n, 1) for n in range(300)]
