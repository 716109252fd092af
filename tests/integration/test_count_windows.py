"""Count windows against a real broker, under exactly-once: a worker stops with windows half full and its state
directory is deleted; the next one restores them, sends the results of the windows that fill, and is killed
(-9) before it commits them. Read_committed, every full window's result is there once, in order, and none
of a window that is still open."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import msgpack
import pytest

from tests.conftest import TopicNamer
from tests.integration.test_exactly_once import wait_exit
from tests.integration.test_windows import produce_timed
from tests.support.kafka_helpers import create_topic, read_topic
from tests.support.running import spawn_worker, write_app

pytestmark = pytest.mark.anyio

SIZE, STEP = 3, 2
KILL_AFTER_N = 18  # key a's 10th record (a gets the even n), in the middle of a window
BASE = int(time.time() * 1000) - 600_000  # record n is stamped BASE + n


def records(numbers: range) -> list[tuple[str, int, int]]:
    """`n` alternately to keys a and b."""
    return [("ab"[n % 2], BASE + n, n) for n in numbers]


def expected(last: int) -> list[tuple[str, list[int]]]:
    """(key, its values) of every full window of the records 0 to `last`, by key, each key's in order."""
    full = []
    for key, parity in (("a", 0), ("b", 1)):
        values = [n for n in range(last + 1) if n % 2 == parity]
        full += [(key, values[first : first + SIZE]) for first in range(0, len(values) - SIZE + 1, STEP)]
    return full


async def test_a_restart_and_a_kill_mid_window_lose_no_window_and_send_none_twice(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, results = topic_name("in"), topic_name("out")
    for topic in (source, results):
        await create_topic(kafka_bootstrap, topic)
    app = {
        "app_id": topic_name("app"),
        "guarantee": "exactly_once",
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "topics": {source: {"key_serde": "str"}, results: {"key_serde": "str"}},
        "processors": [{"name": "counted", "class": "tests.support.window_apps:KilledAfterAggregate",
                        "inputs": [source], "outputs": [results],
                        "params": {"window": {"type": "count", "size": SIZE, "step": STEP},
                                   "aggregation": {"type": "list", "field": "n", "max_items": SIZE},
                                   "output": results}}],
        "state_dir": str(tmp_path / "state"),
        "commit_interval_ms": 30_000,  # the killed worker commits none of what it sent
    }  # fmt: skip
    path = write_app(tmp_path, app)

    await produce_timed(kafka_bootstrap, source, records(range(10)))  # a: 0..8, b: 1..9; each key's last window open
    assert await wait_exit(spawn_worker(path, "--until-caught-up", log=tmp_path / "first.log"), 120) == 0
    shutil.rmtree(tmp_path / "state")  # the next worker restores the open windows from the changelog

    await produce_timed(kafka_bootstrap, source, records(range(10, 18)))
    marker = tmp_path / "killed"
    monkeypatch.setenv("KILL_MARKER", str(marker))
    monkeypatch.setenv("KILL_AFTER_N", str(KILL_AFTER_N))
    killed = spawn_worker(path, log=tmp_path / "killed.log")
    deadline = time.monotonic() + 60
    while len(await read_topic(kafka_bootstrap, results, "read_uncommitted")) < len(expected(17)):
        assert time.monotonic() < deadline, "the worker did not send the results of the windows that filled"
        await asyncio.sleep(0.2)
    await produce_timed(kafka_bootstrap, source, records(range(18, 20)))
    assert await wait_exit(killed, 60) == -9 and marker.exists(), "the worker was not killed mid-stream"
    assert await wait_exit(spawn_worker(path, "--until-caught-up", log=tmp_path / "last.log"), 120) == 0

    sent_at_all = await read_topic(kafka_bootstrap, results, "read_uncommitted")
    assert len(sent_at_all) > len(expected(19)), "the killed worker sent no result that it did not commit"
    sent = [(r.key.decode(), msgpack.unpackb(r.value)) for r in await read_topic(kafka_bootstrap, results)]
    by_key = sorted(sent, key=lambda result: result[0])  # stable: each key's results in the order sent
    assert [(key, value["value"]) for key, value in by_key] == expected(19)
    spans = [(value["start"] - BASE, value["end"] - BASE) for _, value in by_key]
    assert spans == [(values[0], values[-1]) for _, values in expected(19)]
