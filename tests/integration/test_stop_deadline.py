"""SIGTERM is honoured in every state: a worker stops within its shutdown timeout plus a few seconds,
with exit status 1 and one line naming what it abandoned when it had to abandon work, whether a
processor never returns (blocking the event loop or not), a flush or a close never returns, the broker
went away, or the broker was never reached (then nothing was processed, and it exits 0)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from runtime.devkafka import LocalBroker
from runtime.devkafka.broker import free_port
from tests.conftest import TopicNamer
from tests.integration.test_exactly_once import wait_exit
from tests.support.kafka_helpers import create_topic, produce
from tests.support.running import numbered, read_log, spawn_worker, until, write_app

pytestmark = pytest.mark.anyio

SHUTDOWN_TIMEOUT_S = 3
WITHIN_S = SHUTDOWN_TIMEOUT_S + 5


def stuck_app(app_id: str, bootstrap: str, source: str, cls: str, tmp_path: Path, **more: Any) -> dict[str, Any]:
    topics = {source: {"partitions": 1, "key_serde": "str"}}
    processor = {
        "name": "stuck",
        "class": f"tests.support.stuck_apps:{cls}",
        "inputs": [source],
        "params": {"started": str(tmp_path / "started"), **more},
    }
    if "output" in more:
        topics[more["output"]] = {"partitions": 1, "key_serde": "str"}
        processor["outputs"] = [more["output"]]
    return {
        "app_id": app_id,
        "kafka": {"bootstrap_servers": bootstrap},
        "topics": topics,
        "processors": [processor],
        "commit_interval_ms": 50,
        "shutdown_timeout_s": SHUTDOWN_TIMEOUT_S,
    }


async def stop(worker: subprocess.Popen[bytes]) -> int:
    """SIGTERM, then the exit status, which must come within the shutdown timeout plus a few seconds."""
    worker.send_signal(signal.SIGTERM)
    return await wait_exit(worker, WITHIN_S)


def abandoning_lines(log: Path) -> list[str]:
    return [line for line in read_log(log).splitlines() if "abandoning" in line]


@pytest.mark.parametrize(
    ("cls", "abandoned"),
    [
        ("StuckInProcess", "task stuck[0] in process() at offset 0 of "),  # the event loop blocked
        ("StuckInAsyncProcess", "task stuck[0] in process() at offset 0 of "),
        ("StuckInFlush", "task stuck[0] in flush()"),
        ("StuckInClose", "task stuck[0] in close()"),  # the event loop blocked
    ],
)
async def test_a_processor_that_never_returns_is_abandoned_at_the_timeout(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, cls: str, abandoned: str
) -> None:
    source = topic_name("in")
    await create_topic(kafka_bootstrap, source, 1)
    await produce(kafka_bootstrap, source, numbered(5))
    log = tmp_path / "worker.log"
    worker = spawn_worker(
        write_app(tmp_path, stuck_app(topic_name("app"), kafka_bootstrap, source, cls, tmp_path)), log=log
    )
    await until((tmp_path / "started").exists, "the processor is stuck")
    await asyncio.sleep(0.2)  # stuck for a while, the flush past its first await

    assert await stop(worker) == 1
    lines = abandoning_lines(log)
    assert len(lines) == 1 and abandoned in lines[0], read_log(log)[-3000:]


async def test_a_worker_whose_broker_went_away_stops_in_time(
    private_broker: LocalBroker, topic_name: TopicNamer, tmp_path: Path
) -> None:
    bootstrap = private_broker.bootstrap_servers
    source = topic_name("in")
    await create_topic(bootstrap, source, 1)
    await produce(bootstrap, source, numbered(500))
    app = stuck_app(topic_name("app"), bootstrap, source, "SlowEcho", tmp_path, output=topic_name("out"))
    log = tmp_path / "worker.log"
    worker = spawn_worker(write_app(tmp_path, app), log=log)
    await until((tmp_path / "started").exists, "the worker processes")
    assert private_broker.process is not None
    private_broker.process.send_signal(signal.SIGKILL)  # gone, with the outputs it did not acknowledge
    private_broker.process.wait()
    private_broker.process = None
    await asyncio.sleep(1)  # records still processed meanwhile, their outputs unacknowledged

    assert await stop(worker) == 1
    lines = abandoning_lines(log)
    assert len(lines) == 1 and "commit" in lines[0], read_log(log)[-3000:]


async def test_a_worker_retrying_an_unreachable_broker_at_start_stops_at_once(
    topic_name: TopicNamer, tmp_path: Path
) -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    log = tmp_path / "worker.log"
    worker = spawn_worker(
        write_app(tmp_path, stuck_app(topic_name("app"), nowhere, "in", "StuckInProcess", tmp_path)), log=log
    )
    await until(lambda: "retrying in" in read_log(log), "the worker retries")

    assert await stop(worker) == 0
    stopped = [line for line in read_log(log).splitlines() if "stopped while" in line]
    assert len(stopped) == 1 and "connecting to Kafka, before it processed anything" in stopped[0], read_log(log)
