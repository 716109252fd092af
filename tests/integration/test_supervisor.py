"""`--workers N` against a real broker: a killed worker is restarted, a crash loop and a configuration
error stop the group, and a worker killed and not restarted makes the exit status non-zero."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import time
import urllib.request
from collections import Counter
from pathlib import Path
from subprocess import Popen

import msgpack
import pytest

from tests.conftest import TopicNamer
from tests.integration.test_exactly_once import wait_exit
from tests.integration.test_processing import echo_app, free_port_pair
from tests.support.crash_on_start import CRASHING_WORKER
from tests.support.kafka_helpers import create_topic, produce, read_topic
from tests.support.kills import FAST_FAILOVER
from tests.support.running import numbered, read_log, spawn_worker, write_app

pytestmark = pytest.mark.anyio


async def wait_for_line(log: Path, pattern: str, process: Popen[bytes], timeout: float = 60) -> re.Match[str]:
    """The first match of `pattern` in `log`, once the running `process` wrote it."""
    deadline = time.monotonic() + timeout
    while (found := re.search(pattern, read_log(log))) is None:
        assert process.poll() is None, f"exited {process.returncode} before logging {pattern!r}:\n{read_log(log)}"
        assert time.monotonic() < deadline, f"no line matching {pattern!r} in {timeout} s:\n{read_log(log)}"
        await asyncio.sleep(0.05)
    return found


async def wait_until_both_assigned(log: Path, supervisor: Popen[bytes], timeout: float = 60) -> list[int]:
    """The pids of the two workers of `supervisor`, once each was assigned partitions."""
    deadline = time.monotonic() + timeout
    while len(pids := sorted({int(pid) for pid in re.findall(r"\[(\d+)\] assigned [1-9]", read_log(log))})) < 2:
        assert supervisor.poll() is None, f"exited {supervisor.returncode}:\n{read_log(log)}"
        assert time.monotonic() < deadline, f"two workers were not assigned partitions in {timeout} s"
        await asyncio.sleep(0.05)
    return pids


async def test_a_worker_killed_mid_run_is_restarted_and_the_group_outputs_every_input_exactly_once(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 4)
    total = 4000
    await produce(kafka_bootstrap, source, numbered(total))
    app = echo_app(topic_name("app"), source, sink, 4, guarantee="exactly_once",
                   params={"crash_at": total // 2, "marker": str(tmp_path / "killed")})  # fmt: skip
    app["processors"][0]["class"] = "tests.support.apps:KillOnce"
    app["kafka"] = {"bootstrap_servers": kafka_bootstrap, "consumer": FAST_FAILOVER}
    log = tmp_path / "workers.log"
    supervisor = spawn_worker(write_app(tmp_path, app), "--workers", "2", "--until-caught-up", log=log)
    assert await wait_exit(supervisor, 120) == 0, log.read_text()
    text = log.read_text()
    killed = re.search(r"worker (\d) \(pid \d+\) was killed by SIGKILL; restarting it in 1 s", text)
    assert killed is not None, text
    restarted = re.findall(rf"worker {killed[1]} started \(pid (\d+)\)", text)
    assert len(restarted) == 2, "started, then restarted once"
    assert re.search(rf"\[{restarted[1]}\] assigned [1-9]", text), "the restarted worker took partitions back"
    seen = Counter(msgpack.unpackb(r.value)["n"] for r in await read_topic(kafka_bootstrap, sink, "read_committed"))
    assert set(seen) == set(range(total)), f"{total - len(seen)} inputs have no output"
    assert set(seen.values()) == {1}, "every input came out exactly once"


async def test_a_worker_that_dies_at_every_start_stops_the_group_naming_it(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 2)
    app = echo_app(topic_name("app"), source, sink, 2)
    app["processors"][0]["class"] = "tests.support.crash_on_start:Echo"
    app["kafka"] = {"bootstrap_servers": kafka_bootstrap}
    monkeypatch.setenv(CRASHING_WORKER, "1")
    log = tmp_path / "workers.log"
    supervisor = spawn_worker(write_app(tmp_path, app), "--workers", "2", "--max-restarts", "2", log=log)
    assert await wait_exit(supervisor, 60) == 1, log.read_text()
    text = log.read_text()
    assert re.search(r"worker 1 \(pid \d+\) was killed by SIGKILL: 3 deaths in a row, each less than 60 s after a "
                     r"restart \(--max-restarts 2\); stopping", text), text  # fmt: skip
    assert len(re.findall(r"worker 1 started", text)) == 3, "started, then restarted twice"
    assert len(re.findall(r"worker 0 started", text)) == 1, "the healthy worker was stopped, not restarted"


async def test_a_worker_reporting_a_configuration_error_stops_the_group_with_status_2(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 2)
    port = free_port_pair()
    app = echo_app(topic_name("app"), source, sink, 2)
    app["kafka"] = {"bootstrap_servers": kafka_bootstrap}
    app["telemetry"] = {"metrics": {"exporter": "prometheus", "host": "127.0.0.1", "port": port}}
    log = tmp_path / "workers.log"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port + 1))  # worker 1's port
        taken.listen()
        supervisor = spawn_worker(write_app(tmp_path, app), "--workers", "2", log=log)
        assert await wait_exit(supervisor, 60) == 2, log.read_text()
    text = log.read_text()
    assert f"metrics.port: cannot serve Prometheus metrics on 127.0.0.1:{port + 1}" in text
    assert re.search(r"worker 1 \(pid \d+\) exited with status 2 \(an error in the app's configuration\); stopping",
                     text), text  # fmt: skip
    assert len(re.findall(r"worker 1 started", text)) == 1, "a configuration error is not restarted"


async def test_sigterm_after_a_worker_was_killed_exits_non_zero_naming_the_signal(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 2)
    await produce(kafka_bootstrap, source, numbered(100))
    app = echo_app(topic_name("app"), source, sink, 2)
    app["kafka"] = {"bootstrap_servers": kafka_bootstrap}
    log = tmp_path / "workers.log"
    supervisor = spawn_worker(write_app(tmp_path, app), "--workers", "2", log=log)
    victim, survivor = await wait_until_both_assigned(log, supervisor)
    os.kill(victim, signal.SIGKILL)
    supervisor.send_signal(signal.SIGTERM)  # before the restart, which waits a second
    assert await wait_exit(supervisor, 60) == 1, log.read_text()
    text = log.read_text()
    assert re.search(rf"worker \d \(pid {victim}\) was killed by SIGKILL", text), text
    assert len(re.findall(r"worker \d started", text)) == 2, "a stopping group restarts no worker"
    assert re.search(rf"worker \d \(pid {survivor}\) exited with status 0", text), "the survivor stopped cleanly"


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


async def test_each_workers_metric_series_carry_the_app_id_and_its_index(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 2)
    await produce(kafka_bootstrap, source, numbered(100))
    port = free_port_pair()
    app = echo_app(topic_name("app"), source, sink, 2)
    app["kafka"] = {"bootstrap_servers": kafka_bootstrap}
    app["telemetry"] = {"metrics": {"exporter": "prometheus", "host": "127.0.0.1", "port": port}}
    log = tmp_path / "workers.log"
    supervisor = spawn_worker(write_app(tmp_path, app), "--workers", "2", log=log)
    await wait_until_both_assigned(log, supervisor)
    for index in (0, 1):
        text = await asyncio.to_thread(scrape, f"http://127.0.0.1:{port + index}/metrics")
        series = [line for line in text.splitlines() if line.startswith("kafka_actor_")]
        assert any(line.startswith("kafka_actor_records_consumed_total{") for line in series), text
        labels = f'kafka_actor_app_id="{app["app_id"]}"', f'kafka_actor_worker="{index}"'
        assert all(all(label in line for label in labels) for line in series), series
        assert "otel_scope" not in text
    supervisor.send_signal(signal.SIGTERM)
    assert await wait_exit(supervisor, 60) == 0, log.read_text()
