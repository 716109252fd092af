"""Cooperative rebalancing against a broker, under exactly-once: a worker joins and leaves while input
flows, and only the tasks that move stop; the others never do, and go on committing through both
rebalances; every input comes out once."""

from __future__ import annotations

import asyncio
import re
import signal
from pathlib import Path

import pytest

from tests.conftest import TopicNamer
from tests.integration.test_exactly_once import assert_exactly_once, eos_app, wait_exit
from tests.support.kafka_helpers import committed_offsets, create_topic, produce
from tests.support.running import numbered, read_log, running_tasks, spawn_worker, until, write_app

pytestmark = pytest.mark.anyio

SLOW_HEARTBEAT = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 2000}
"""The joining worker's: it learns of the second round on its next heartbeat, so that round is awaited for up
to 2 s, a rebalance the others' kept tasks must run through."""


def changes_between(log: Path, start: int, end: int, kind: str) -> set[str]:
    """The tasks a worker started or stopped while its log grew from `start` to `end` characters."""
    found = re.findall(rf"{kind} tasks \[(.*)\]$", read_log(log)[start:end], re.MULTILINE)
    return {task for listed in found for task in re.findall(r"'([^']+)'", listed)}


async def test_only_the_tasks_that_move_stop_and_every_input_comes_out_once(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 4)
    app = eos_app(topic_name, source, sink, tmp_path, kafka_bootstrap)
    group = app["app_id"]
    logs = {name: tmp_path / f"{name}.log" for name in "abc"}

    def yaml(name: str, consumer: dict[str, int] | None = None) -> Path:
        kafka = {**app["kafka"], "consumer": consumer or app["kafka"]["consumer"]}
        return write_app(tmp_path, {**app, "kafka": kafka, "state_dir": str(tmp_path / name)}, f"{name}.yaml")

    sent = 0
    fed_enough = asyncio.Event()

    async def feed() -> None:
        """Until `fed_enough`, never cut off between a produce and its count: `sent` is what the input holds."""
        nonlocal sent
        while not fed_enough.is_set():
            await produce(kafka_bootstrap, source, numbered(40, start=sent))
            sent += 40
            await asyncio.sleep(0.05)

    a, b = spawn_worker(yaml("a"), log=logs["a"]), spawn_worker(yaml("b"), log=logs["b"])
    await until(
        lambda: len(running_tasks(logs["a"])) == len(running_tasks(logs["b"])) == 2, "a and b run two tasks each"
    )
    feeding = asyncio.create_task(feed())
    try:
        marks = {name: len(read_log(logs[name])) for name in "ab"}
        kept_by_a, kept_by_b = running_tasks(logs["a"]), running_tasks(logs["b"])
        c = spawn_worker(yaml("c", SLOW_HEARTBEAT), log=logs["c"])
        await until(
            lambda: "partitions keep running" in read_log(logs["a"])[marks["a"] :], "the scale-out's first round"
        )
        during = await committed_offsets(kafka_bootstrap, group)
        await until(lambda: len(running_tasks(logs["c"])) == 1, "c took a task over")
        after = await committed_offsets(kafka_bootstrap, group)
        moved = running_tasks(logs["c"])
        kept_by_a, kept_by_b = kept_by_a - moved, kept_by_b - moved
        c.send_signal(signal.SIGTERM)
        assert await wait_exit(c, 60) == 0
        await until(lambda: len(running_tasks(logs["a"]) | running_tasks(logs["b"])) == 4, "a and b took c's task back")
    finally:
        fed_enough.set()
        await feeding
    total = sent

    deadline = asyncio.get_running_loop().time() + 60
    while sum((committed := await committed_offsets(kafka_bootstrap, group)).values()) != total:
        assert asyncio.get_running_loop().time() < deadline, f"the group committed {committed} of {total} inputs"
        await asyncio.sleep(0.2)
    ends = {name: len(read_log(logs[name])) for name in "ab"}  # before the one stopped first hands its tasks on
    for worker in (a, b):
        worker.send_signal(signal.SIGTERM)
        assert await wait_exit(worker, 60) == 0

    await assert_exactly_once(kafka_bootstrap, sink, total)
    # One of a and b gave c a task, which one of them took back: no other task of theirs ever stopped.
    stopped, started = (
        changes_between(logs["a"], marks["a"], ends["a"], kind)
        | changes_between(logs["b"], marks["b"], ends["b"], kind)
        for kind in ("stopped", "started")
    )
    assert stopped == started == moved, "only the task that moved to c and back stopped and started"
    assert kept_by_a | kept_by_b == {"count[0]", "count[1]", "count[2]", "count[3]"} - moved
    kept_inputs = {(source, int(task[6:-1])) for task in kept_by_a | kept_by_b}
    assert any(after.get(tp, 0) > during.get(tp, 0) for tp in kept_inputs), "kept tasks committed through it"
