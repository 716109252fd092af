"""A broker outage in the middle of a run: queues stay bounded, and every record is processed."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import msgpack
import pytest
import yaml

from runtime.config import parse_app
from runtime.devkafka import LocalBroker
from runtime.devkafka.broker import free_port
from runtime.worker.worker import Worker
from tests.conftest import TopicNamer
from tests.support.health import Answer, probe
from tests.support.kafka_helpers import create_topic, produce, read_topic
from tests.support.running import numbered, spawn_worker, write_app

pytestmark = pytest.mark.anyio

RECORDS = 600
PAUSE_AT, RESUME_AT = 20, 5
OUTAGE_S = 3.0


async def until(condition: Callable[[], bool], what: str, running: asyncio.Task[None], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if running.done():
            await running  # raises what stopped the worker
            raise AssertionError(f"the worker stopped before {what}")
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.01)


async def test_queues_stay_bounded_across_a_broker_outage(private_broker: LocalBroker, topic_name: TopicNamer) -> None:
    bootstrap = private_broker.bootstrap_servers
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(bootstrap, source, 1)
    # A backlog of small records: one fetch of max_partition_fetch_bytes (1 MiB) holds all of them.
    await produce(bootstrap, source, numbered(RECORDS))
    app = parse_app({
        "app_id": topic_name("app"),
        "topics": {source: {"partitions": 1, "key_serde": "str"}, sink: {"partitions": 1, "key_serde": "str"}},
        "processors": [{"name": "echo", "class": "tests.support.apps:Echo", "inputs": [source],
                        "outputs": [sink], "params": {"output": sink, "sleep_ms": 2}}],
        "commit_interval_ms": 200,
        "queue": {"pause_at": PAUSE_AT, "resume_at": RESUME_AT},
        # Outputs wait out the outage (the broker's shutdown and start included) rather than expire;
        # a poll hands the tasks at most pause_at - resume_at records, however many one fetch holds.
        "kafka": {"producer": {"request_timeout_ms": 300_000}, "consumer": {"max_poll_records": PAUSE_AT - RESUME_AT}},
    })  # fmt: skip
    worker = Worker(app, bootstrap)
    running = asyncio.create_task(worker.run())
    try:
        await until(lambda: worker.counters.processed >= RECORDS // 4, "a quarter is processed", running)
        await asyncio.to_thread(private_broker.stop)
        await asyncio.sleep(OUTAGE_S)  # the outage itself, not a wait for anything
        await asyncio.to_thread(private_broker.start)
        await until(lambda: worker.counters.processed >= RECORDS, "every record is processed", running)
    finally:
        worker.stop()
        await running

    # The deepest any task's queue was, taken after every hand-off of records to it.
    assert worker.counters.max_queued < PAUSE_AT + (PAUSE_AT - RESUME_AT), "past pause_at plus one poll's records"
    values = {msgpack.unpackb(r.value)["value"]["n"] for r in await read_topic(bootstrap, sink)}
    assert values == set(range(RECORDS))


def test_a_broker_killed_for_20_s_is_told_in_a_handful_of_lines_and_nothing_is_lost(
    private_broker: LocalBroker, topic_name: TopicNamer, tmp_path: Path
) -> None:
    """Told in the worker's JSON log, and seen by the readiness probe: not ready while Kafka is away."""
    bootstrap = private_broker.bootstrap_servers
    source, sink = topic_name("in"), topic_name("out")
    asyncio.run(create_topic(bootstrap, source, 1))
    asyncio.run(produce(bootstrap, source, numbered(3_000)))
    health_port = free_port()
    app = write_app(tmp_path, {
        "app_id": topic_name("app"),
        "topics": {source: {"partitions": 1, "key_serde": "str"}, sink: {"partitions": 1, "key_serde": "str"}},
        "processors": [{"name": "echo", "class": "tests.support.apps:Echo", "inputs": [source], "outputs": [sink],
                        "params": {"output": sink, "sleep_ms": 2}}],
        "kafka": {"bootstrap_servers": bootstrap, "producer": {"request_timeout_ms": 300_000}},
        "health": {"host": "127.0.0.1", "port": health_port},
        "log_format": "json",
    })  # fmt: skip
    log_path = tmp_path / "worker.log"
    worker = spawn_worker(app, log=log_path)
    wait_for(lambda: probe(health_port, "/ready") == (200, {"ready": True}), "the worker is ready", 60)
    assert private_broker.process is not None
    private_broker.process.send_signal(signal.SIGKILL)
    private_broker.process.wait()
    private_broker.process = None
    killed = time.monotonic()
    unready = wait_for(lambda: unreachable(probe(health_port, "/ready")), "the worker is not ready", 20)
    assert probe(health_port, "/live") == (200, {"live": True})
    time.sleep(max(0.0, 20 - (time.monotonic() - killed)))  # the rest of the outage
    private_broker.start()
    wait_for(lambda: probe(health_port, "/ready") == (200, {"ready": True}), "the worker is ready again", 120)
    deadline = time.monotonic() + 120
    while len({msgpack.unpackb(r.value)["value"]["n"] for r in asyncio.run(read_topic(bootstrap, sink))}) < 3_000:
        assert time.monotonic() < deadline, "not every record was processed after the broker came back"
        time.sleep(1)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(60) == 0
    lines = [json.loads(line) for line in log_path.read_text().splitlines()]  # each line an object
    assert {line["app"] for line in lines} == {app_id(app)}
    client_errors = [line for line in lines if line["logger"].startswith("aiokafka") and line["level"] != "INFO"]
    told = [line["message"] for line in lines if line["message"].startswith(("Kafka is", "Kafka has been"))]
    assert told[0].startswith("Kafka is unreachable") and told[-1].startswith("Kafka is reachable again"), told
    assert len(told) <= 4 and len(client_errors) <= 5, client_errors[:20]
    assert unready[1]["reasons"][0].startswith("Kafka unreachable for"), unready


def unreachable(answer: Answer | None) -> Answer | None:
    if answer is not None and answer[0] == 503 and any("Kafka unreachable" in r for r in answer[1]["reasons"]):
        return answer
    return None


T = TypeVar("T")


def wait_for(answer: Callable[[], T | None], what: str, timeout: float) -> T:
    deadline = time.monotonic() + timeout
    while not (found := answer()):
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.1)
    return found


def app_id(app: Path) -> str:
    return str(yaml.safe_load(app.read_text())["app_id"])
