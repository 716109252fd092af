"""A task's part in a commit (`prepare_commit`, the processor's flush) and its lifecycle (init, close)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import pytest
from aiokafka import TopicPartition

from processors.context import Context
from processors.errors import StopWorker
from processors.processor import Processor
from processors.record import Record
from runtime.config import ErrorPolicy
from runtime.errors import StopAfterCommit
from runtime.task.commits import TaskCommit
from runtime.task.task import Task, TaskPhase
from tests.support.engine_fakes import (
    IN,
    OUT,
    FakeState,
    fake_outputs,
    make_services,
    make_task,
    records,
    running,
    sent,
    until_idle,
)

pytestmark = pytest.mark.anyio

TP = TopicPartition(IN, 0)


class Buffering(Processor):
    """A sink: keeps what it processed and sends it on at `flush`, which raises while `failing`."""

    def __init__(self) -> None:
        self.buffer: list[Any] = []
        self.failing = False
        self.flushes = 0

    def process(self, record: Record, ctx: Context) -> None:
        self.buffer.append(record.value)

    def flush(self, ctx: Context) -> Awaitable[None] | None:
        self.flushes += 1
        for buffered in self.buffer:
            ctx.send(OUT, buffered)
        if self.failing:
            raise OSError("the database is unreachable")
        self.buffer.clear()
        return None


class AsyncBuffering(Buffering):
    async def flush(self, ctx: Context) -> None:
        await asyncio.sleep(0)  # an async flush that suspends, as a real write would
        super().flush(ctx)


@pytest.fixture(params=[Buffering, AsyncBuffering], ids=["sync", "async"])
def buffering(request: pytest.FixtureRequest) -> Buffering:
    processor: Buffering = request.param()
    return processor


async def processed(task: Task, *offsets: int) -> None:
    """Run the task until it processed these records, then stop its actor: the task is still running (its
    phase), as a task whose partitions are revoked is when it commits one last time."""
    task.enqueue(TP, records(*offsets))
    async with running(task):
        await until_idle(task)


async def prepare(task: Task) -> TaskCommit | None:
    async with task.commit_turn():
        return await task.prepare_commit()


async def test_prepare_commit_awaits_the_flush_and_releases_what_it_sent(buffering: Buffering) -> None:
    log: list[str] = []
    task = make_task(buffering, state=FakeState("p", log))
    await processed(task, 0, 1)
    assert sent(fake_outputs(task)) == []

    assert await prepare(task) == TaskCommit(task, {TP: 2})

    assert buffering.flushes == 1
    assert sent(fake_outputs(task)) == [{"n": 0}, {"n": 1}]
    assert log == ["p log changes"]


async def test_a_failing_flush_under_skip_commits_nothing_of_the_task_and_counts_the_failure(
    buffering: Buffering,
) -> None:
    log: list[str] = []
    services = make_services(policy=ErrorPolicy.SKIP)
    task = make_task(buffering, services, state=FakeState("p", log))
    await processed(task, 0, 1)
    buffering.failing = True

    assert await prepare(task) is None

    assert services.counters.failed_flushes == 1
    assert sent(fake_outputs(task)) == []  # what the failed flush sent does not escape
    assert log == []
    buffering.failing = False
    assert await prepare(task) == TaskCommit(task, {TP: 2})
    assert sent(fake_outputs(task)) == [{"n": 0}, {"n": 1}]


async def test_a_failing_flush_under_fail_stops_the_worker(buffering: Buffering) -> None:
    services = make_services(policy=ErrorPolicy.FAIL)
    task = make_task(buffering, services)
    await processed(task, 0)
    buffering.failing = True

    with pytest.raises(StopAfterCommit, match=r"failed in flush\(\) of task p\[0\]: OSError: the database"):
        await prepare(task)

    assert services.counters.failed_flushes == 1
    assert sent(fake_outputs(task)) == []


async def test_a_task_that_is_not_running_prepares_nothing(buffering: Buffering) -> None:
    task = make_task(buffering)
    task.phase = TaskPhase.RESTORING

    assert await prepare(task) is None
    assert buffering.flushes == 0


class Lifecycle(Processor):
    """Async init and close, which count their calls and raise when told to."""

    def __init__(self, init_fails: bool = False, close_fails: bool = False):
        self.init_fails = init_fails
        self.close_fails = close_fails
        self.inits = 0
        self.closes = 0

    async def init(self, ctx: Context) -> None:
        await asyncio.sleep(0)
        self.inits += 1
        if self.init_fails:
            raise PermissionError("no access to the sink")

    def process(self, record: Record, ctx: Context) -> None:
        pass

    async def close(self) -> None:
        await asyncio.sleep(0)
        self.closes += 1
        if self.close_fails:
            raise BrokenPipeError("the sink hung up")


async def test_async_init_and_close_are_awaited_and_close_runs_once() -> None:
    processor = Lifecycle()
    state = FakeState("p", [])
    task = make_task(processor, state=state)
    await processed(task, 0)

    await task.close()
    await task.close()

    assert (processor.inits, processor.closes) == (1, 1)
    assert task.phase is TaskPhase.CLOSED
    assert state.closes == 1


async def test_a_task_that_never_ran_closes_its_stores_but_not_its_processor() -> None:
    processor = Lifecycle()
    state = FakeState("p", [])
    task = make_task(processor, state=state)

    await task.close()

    assert processor.closes == 0
    assert state.closes == 1


async def test_a_failing_close_stops_after_commit_and_still_closes_the_stores() -> None:
    processor = Lifecycle(close_fails=True)
    state = FakeState("p", [])
    task = make_task(processor, state=state)
    await processed(task, 0)

    with pytest.raises(StopAfterCommit, match=r"failed in close\(\) of task p\[0\]: BrokenPipeError: the sink"):
        await task.close()
    await task.close()  # closed once: no second attempt, no second error

    assert processor.closes == 1
    assert state.closes == 1


async def test_a_failing_init_stops_after_commit_before_any_record() -> None:
    processor = Lifecycle(init_fails=True)
    task = make_task(processor)
    task.enqueue(TP, records(0))

    with pytest.raises(StopAfterCommit, match=r"failed in init\(\) of task p\[0\]: PermissionError"):
        await task.run()

    assert task.next_offsets == {}
    assert await prepare(task) is None  # a task that never started takes no part in commits
    await task.close()
    assert processor.closes == 0  # nor is a processor closed that never started


class Refused(Processor):
    """A processor whose database refuses it: `StopWorker` from init, process or flush, as told."""

    def __init__(self, fails_in: str):
        self.fails_in = fails_in

    def _refuse(self, step: str) -> None:
        if step == self.fails_in:
            raise StopWorker("PostgreSQL at db:5432: bad credentials")

    def init(self, ctx: Context) -> None:
        self._refuse("init")

    def process(self, record: Record, ctx: Context) -> None:
        self._refuse("process")

    def flush(self, ctx: Context) -> None:
        self._refuse("flush")


@pytest.mark.parametrize(
    ("fails_in", "told"),
    [
        ("init", r"^processor 'p' stopped in init\(\) of task p\[0\]: PostgreSQL at db:5432: bad credentials$"),
        ("process", r"^processor 'p' stopped at record in\[0\]@0: PostgreSQL at db:5432: bad credentials$"),
    ],
)
@pytest.mark.parametrize("policy", [ErrorPolicy.SKIP, ErrorPolicy.DEAD_LETTER])
async def test_stop_worker_stops_under_every_policy_with_its_message_alone(
    fails_in: str, told: str, policy: ErrorPolicy, caplog: pytest.LogCaptureFixture
) -> None:
    services = make_services(policy=policy)
    task = make_task(Refused(fails_in), services)
    task.enqueue(TP, records(0))

    with pytest.raises(StopAfterCommit, match=told):
        await task.run()

    assert (services.counters.skipped, services.counters.dead_lettered) == (0, 0)
    assert "Traceback" not in caplog.text


async def test_stop_worker_from_a_flush_stops_under_skip() -> None:
    task = make_task(Refused("flush"), make_services(policy=ErrorPolicy.SKIP))
    await processed(task, 0)

    with pytest.raises(StopAfterCommit, match=r"stopped in flush\(\) of task p\[0\]: PostgreSQL at db:5432"):
        await prepare(task)
