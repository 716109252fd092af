"""Static membership (`kafka.group_instance_id`) with three worker processes, as three pods would run: one
restarted within the session timeout gets its partition back with no rebalance (the others revoke nothing)
and no restore (its store is up to date on its disk); one gone for longer than the session timeout leaves
the group, and the others take its partition in a rebalance, and give it back in another when it returns."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TopicNamer
from tests.integration.test_state import counting_app, final_counts, true_counts
from tests.support.kafka_helpers import create_topic, produce
from tests.support.running import numbered, read_log, running_tasks, spawn_worker, until, write_app

pytestmark = pytest.mark.anyio

SESSION_TIMEOUT_MS = 10_000  # longer than a worker's restart here, short enough to wait out
PODS = ("pod-a", "pod-b", "pod-c")


def pod_app(app: dict[str, Any], pod: str, tmp_path: Path, bootstrap: str) -> Path:
    """The app as the pod runs it: its own volume and its own group instance id."""
    kafka = {
        "bootstrap_servers": bootstrap,
        "group_instance_id": pod,
        "consumer": {"session_timeout_ms": SESSION_TIMEOUT_MS, "heartbeat_interval_ms": 500},
    }
    return write_app(tmp_path, {**app, "kafka": kafka, "state_dir": str(tmp_path / pod)}, f"{pod}.yaml")


def since(log: Path, mark: int) -> str:
    return read_log(log)[mark:]


async def test_a_worker_back_within_the_session_timeout_causes_no_rebalance_and_no_restore(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    app = counting_app(topic_name("app"), source, sink, 3, tmp_path, "rocksdb")
    for topic in (source, sink):
        await create_topic(kafka_bootstrap, topic, 3)
    paths = {pod: pod_app(app, pod, tmp_path, kafka_bootstrap) for pod in PODS}
    logs = {pod: tmp_path / f"{pod}.log" for pod in PODS}
    workers = {pod: spawn_worker(paths[pod], log=logs[pod]) for pod in PODS}
    await until(
        lambda: all(len(running_tasks(logs[pod])) == 1 for pod in PODS), "the three workers hold a partition each"
    )
    await produce(kafka_bootstrap, source, numbered(60))
    await until_counted(kafka_bootstrap, sink, 60)

    marks = {pod: len(read_log(logs[pod])) for pod in PODS}
    restarted = PODS[2]
    workers[restarted].send_signal(signal.SIGTERM)
    assert workers[restarted].wait(30) == 0
    workers[restarted] = spawn_worker(paths[restarted], log=logs[restarted])
    await until(lambda: "assigned 1 partitions" in since(logs[restarted], marks[restarted]), "it is back")
    await produce(kafka_bootstrap, source, numbered(60, start=60))
    await until_counted(kafka_bootstrap, sink, 120)
    back = since(logs[restarted], marks[restarted])
    assert "is up to date" in back and "restoring store" not in back, back
    for pod in PODS[:2]:
        assert "revoked" not in since(logs[pod], marks[pod]), since(logs[pod], marks[pod])
        assert "assigned" not in since(logs[pod], marks[pod]), since(logs[pod], marks[pod])

    marks = {pod: len(read_log(logs[pod])) for pod in PODS}
    workers[restarted].send_signal(signal.SIGTERM)
    assert workers[restarted].wait(30) == 0
    await until(
        lambda: len(running_tasks(logs[PODS[0]]) | running_tasks(logs[PODS[1]])) == 3,
        "the session timed out and the others took its partition",
        timeout=SESSION_TIMEOUT_MS / 1000 + 30,
    )
    for pod in PODS[:2]:  # the rebalance is cooperative: the others' tasks go on
        assert "revoked" not in since(logs[pod], marks[pod]), since(logs[pod], marks[pod])
    marks = {pod: len(read_log(logs[pod])) for pod in PODS}
    workers[restarted] = spawn_worker(paths[restarted], log=logs[restarted])
    await until(lambda: all(len(running_tasks(logs[pod])) == 1 for pod in PODS), "it joined again, in a rebalance")
    revoked = [pod for pod in PODS[:2] if "revoked 1 partitions" in since(logs[pod], marks[pod])]
    assert len(revoked) == 1, "the one that took its partition gave it back, and only that"
    for worker in workers.values():
        worker.send_signal(signal.SIGTERM)


async def until_counted(bootstrap: str, sink: str, total: int) -> None:
    counted: dict[str, int] = {}

    async def poll() -> bool:
        counted.update(await final_counts(bootstrap, sink))
        return counted == true_counts(total)

    for _ in range(120):
        if await poll():
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"the counts of {total} records did not arrive: {counted}")
