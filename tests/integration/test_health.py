"""The health endpoints through a worker's life: not ready while it restores its stores, ready once it
has, not ready while it stops (yet live), and gone once it has stopped."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from runtime.devkafka.broker import free_port
from tests.conftest import TopicNamer
from tests.support.health import Answer, probe
from tests.support.kafka_helpers import create_topic, produce
from tests.support.running import numbered, spawn_worker, write_app

KEYS = 60_000


def test_not_ready_through_a_restore_and_a_shutdown(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    asyncio.run(create_topic(kafka_bootstrap, source, 2))
    # As many keys as records: the changelog holds every one of them.
    asyncio.run(produce(kafka_bootstrap, source, [(f"k{n}".encode(), value) for n, (_, value) in
                                                  enumerate(numbered(KEYS))]))  # fmt: skip
    health_port = free_port()
    app = write_app(tmp_path, {
        "app_id": topic_name("app"),
        "topics": {source: {"partitions": 2, "key_serde": "str"}, sink: {"partitions": 2, "key_serde": "str"}},
        "processors": [{"name": "count", "class": "tests.support.apps:CountPerKey", "inputs": [source],
                        "outputs": [sink], "params": {"output": sink}, "stores": {"counts": {"key_serde": "str"}}}],
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "state_dir": str(tmp_path / "state"),
        "health": {"host": "127.0.0.1", "port": health_port},
    })  # fmt: skip
    first = spawn_worker(app, "--until-caught-up", log=tmp_path / "first.log")
    assert first.wait(300) == 0, (tmp_path / "first.log").read_text()[-3000:]
    shutil.rmtree(tmp_path / "state")  # a new pod's empty volume: every store is restored from its changelog

    # Work still to do after the restore, slowly (2,000 records/s a task): a batch is in flight when it stops.
    asyncio.run(produce(kafka_bootstrap, source, numbered(20_000, start=KEYS)))
    app.write_text(app.read_text().replace("apps:CountPerKey", "apps:SlowCountPerKey"))
    answers: list[Answer | None] = []
    lives: list[Answer | None] = []
    worker = spawn_worker(app, log=tmp_path / "second.log")
    watching = threading.Thread(target=watch, args=(health_port, worker, answers, lives))
    watching.start()
    deadline = time.monotonic() + 120
    while not any(answer == (200, {"ready": True}) for answer in answers):
        assert time.monotonic() < deadline and worker.poll() is None, (tmp_path / "second.log").read_text()[-3000:]
        time.sleep(0.05)
    time.sleep(1)  # processing the new records
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(60) == 0
    watching.join()

    reasons = [answer[1]["reasons"] for answer in answers if answer is not None and answer[0] == 503]
    ready_at = answers.index((200, {"ready": True}))
    restoring = [r for r in reasons if any(reason.startswith("restoring the stores of") for reason in r)]
    assert restoring, reasons
    assert all(answer is None or answer[0] == 503 for answer in answers[:ready_at]), "ready before restored"
    stopping = [i for i, answer in enumerate(answers) if answer == (503, {"ready": False, "reasons": ["stopping"]})]
    assert stopping and stopping[0] > ready_at, "not told it stops"
    assert answers[-1] is None, "still answering after the worker stopped"
    assert lives and all(live in (None, (200, {"live": True})) for live in lives), lives


def watch(port: int, worker: subprocess.Popen[bytes], answers: list[Answer | None], lives: list[Answer | None]) -> None:
    """Every 10 ms, until the worker has exited: /ready's answer, and /live's while it is ready or stopping."""
    while worker.poll() is None:
        answer = probe(port, "/ready")
        answers.append(answer)
        if answer is not None and (answer[0] == 200 or answer[1]["reasons"] == ["stopping"]):
            lives.append(probe(port, "/live"))
        time.sleep(0.01)
    answers.append(probe(port, "/ready"))
