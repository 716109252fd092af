"""The health endpoints: live while the event loop turns, ready when nothing keeps the worker from
processing, each answered over HTTP with a JSON body saying why."""

from __future__ import annotations

import asyncio
import select
import socket
import time
from typing import Any

import pytest

from runtime.health import HealthServer, Probes
from runtime.kafka.outages import OUTAGES
from runtime.task.task import TaskPhase
from runtime.worker.outcome import Outcome
from runtime.worker.readiness import CONNECTING, JOINING, Readiness
from tests.support.health import Answer, probe
from tests.unit.test_outages import Clock

pytestmark = pytest.mark.anyio


def get(port: int, path: str) -> Answer:
    answer = probe(port, path)
    assert answer is not None, "the server does not listen"
    return answer


def test_live_until_the_loop_has_not_turned_for_stall_s() -> None:
    clock = Clock()
    probes = Probes(30.0, list, clock)
    assert probes.live() == (True, {"live": True})
    clock.now += 31
    assert probes.live() == (False, {"live": False, "reason": "the event loop has not turned for 31 s"})


def test_ready_when_there_is_no_reason_not_to_be() -> None:
    reasons: list[str] = ["restoring"]
    probes = Probes(30.0, lambda: reasons)
    assert probes.ready() == (False, {"ready": False, "reasons": ["restoring"]})
    reasons.clear()
    assert probes.ready() == (True, {"ready": True})


def test_the_server_answers_200_or_503_with_the_reason_and_404_elsewhere() -> None:
    reasons = ["bootstrapping the global stores"]
    server = HealthServer(Probes(30.0, lambda: reasons), "127.0.0.1", 0)
    server.start()
    try:
        assert get(server.port, "/live") == (200, {"live": True})
        assert get(server.port, "/ready") == (503, {"ready": False, "reasons": ["bootstrapping the global stores"]})
        reasons.clear()
        assert get(server.port, "/ready?verbose=1") == (200, {"ready": True})
        status, body = get(server.port, "/metrics")
        assert status == 404 and "/live or /ready" in body["error"]
    finally:
        server.stop()


def test_a_burst_of_connections_waits_to_be_accepted_rather_than_being_refused() -> None:
    """While the event loop holds the GIL the server's thread accepts late; the connections meanwhile wait
    in the listen backlog, where past 5 the kernel would drop them and their clients retry a second later."""
    server = HealthServer(Probes(30.0, list), "127.0.0.1", 0)  # listening, but not started: nothing accepts
    clients = [socket.socket() for _ in range(32)]
    try:
        for client in clients:
            client.setblocking(False)
            client.connect_ex(("127.0.0.1", server.port))
        time.sleep(0.2)
        _, connected, _ = select.select([], clients, [], 0)
        assert len(connected) == len(clients), "connections beyond the backlog were dropped"
    finally:
        for client in clients:
            client.close()
        server.start()
        server.stop()


async def test_a_blocked_event_loop_is_seen_from_the_servers_thread() -> None:
    probes = Probes(0.3, list)
    server = HealthServer(probes, "127.0.0.1", 0)
    server.start()
    beat = asyncio.create_task(probes.beat())
    try:
        await asyncio.sleep(0.05)
        assert (await asyncio.to_thread(get, server.port, "/live"))[0] == 200

        def probe_later() -> tuple[int, dict[str, Any]]:
            time.sleep(0.6)
            return get(server.port, "/live")

        # A processor that blocks the loop: the probe, from another thread, still answers, and says why.
        probing = asyncio.get_running_loop().run_in_executor(None, probe_later)
        time.sleep(1.0)  # noqa: ASYNC251 (blocking the loop on purpose)
        status, body = await probing
        assert status == 503 and "has not turned" in body["reason"]
        await asyncio.sleep(0.05)  # the loop turns again
        assert (await asyncio.to_thread(get, server.port, "/live"))[0] == 200
    finally:
        beat.cancel()
        server.stop()


class Task:
    def __init__(self, phase: TaskPhase):
        self.phase = phase


async def test_readiness_follows_the_workers_life() -> None:
    outcome, assigned = Outcome(), asyncio.Event()
    readiness = Readiness(outcome, assigned)
    assert readiness.reasons() == [CONNECTING]
    readiness.phase = JOINING
    assert readiness.reasons() == [JOINING]
    assigned.set()
    tasks = [Task(TaskPhase.RESTORING), Task(TaskPhase.RUNNING), Task(TaskPhase.CREATED)]
    readiness.tasks = lambda: tasks  # type: ignore[assignment,return-value]
    readiness.records_to_restore = lambda: 1234
    assert readiness.reasons() == ["restoring the stores of 2 tasks (1234 changelog records left)"]
    for task in tasks:
        task.phase = TaskPhase.RUNNING
    assert readiness.ready
    outcome.stop()
    assert readiness.reasons() == ["stopping"]


async def test_not_ready_while_kafka_is_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    assigned = asyncio.Event()
    assigned.set()
    readiness = Readiness(Outcome(), assigned)
    clock = Clock()
    monkeypatch.setattr(OUTAGES, "_clock", clock)
    monkeypatch.setattr(OUTAGES, "since", clock.now - 12)
    assert readiness.reasons() == ["Kafka unreachable for 12 s"]
    monkeypatch.setattr(OUTAGES, "since", None)
    assert readiness.ready
