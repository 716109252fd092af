"""The task actor without a broker: its per-record loops, its turn, its commit preparation and lifecycle.

Every loop test runs with telemetry off (`_process_batch`) and on (`_process_batch_observed`, with
each record traced, each span dropped, or metrics only), so the two loops cannot drift apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any

import pytest
from aiokafka import TopicPartition

from processors.context import Context
from processors.processor import Processor
from processors.record import Record
from runtime.config import ErrorPolicy
from runtime.errors import StopAfterCommit
from runtime.task.failures import RecordFailed
from runtime.task.task import Checkpoint, Task, TaskPhase
from runtime.telemetry import Telemetry
from tests.unit.engine_fakes import (
    DEAD,
    IN,
    OUT,
    FakeOutputs,
    FakeState,
    fake_outputs,
    make_services,
    make_task,
    raw,
    telemetry_variant,
    until_idle,
)

pytestmark = pytest.mark.anyio

TP = TopicPartition(IN, 0)
OTHER = TopicPartition("other", 0)


@pytest.fixture(params=["off", "traced", "dropped", "metrics"])
def telemetry(request: pytest.FixtureRequest) -> Iterator[Telemetry]:
    telemetry = telemetry_variant(request.param)
    yield telemetry
    telemetry.shutdown()


def value(n: int, **extra: Any) -> bytes:
    return json.dumps({"n": n, **extra}).encode()


def records(*offsets: int) -> list[Any]:
    return [raw(offset, value(offset)) for offset in offsets]


def sent(outputs: FakeOutputs, topic: str = OUT) -> list[Any]:
    """What reached the output path for `topic`, decoded (dead letters keep their original bytes)."""
    return [v if topic == DEAD else json.loads(v) for t, _, v in outputs.appended if t == topic]


class Forward(Processor):
    """Sends each record's value on; a value marked `fail` raises after sending, so its output must not
    escape. The async variant can hold a record at a gate until the test opens it."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.gates: dict[int, asyncio.Event] = {}
        self.reached = asyncio.Event()

    def forward(self, record: Record, ctx: Context) -> None:
        self.seen.append(record.offset)
        ctx.send(OUT, record.value, key=record.key)
        if record.value.get("fail"):
            raise ValueError(f"cannot forward offset {record.offset}")

    def process(self, record: Record, ctx: Context) -> Awaitable[None] | None:
        self.forward(record, ctx)
        return None


class AsyncForward(Forward):
    async def process(self, record: Record, ctx: Context) -> None:
        gate = self.gates.get(record.offset)
        if gate is not None:
            self.reached.set()
            await gate.wait()
        self.forward(record, ctx)


@pytest.fixture(params=[Forward, AsyncForward], ids=["sync", "async"])
def forward(request: pytest.FixtureRequest) -> Forward:
    processor: Forward = request.param()
    return processor


@contextlib.asynccontextmanager
async def running(task: Task) -> AsyncIterator[None]:
    """The task's actor in the background; stopped (and its failure raised) on leaving."""
    actor = asyncio.create_task(task.run())
    try:
        yield
    finally:
        task.request_stop()
        await actor


@pytest.mark.parametrize("policy", [ErrorPolicy.SKIP, ErrorPolicy.DEAD_LETTER])
async def test_only_records_whose_process_returned_release_their_outputs(
    telemetry: Telemetry, forward: Forward, policy: ErrorPolicy
) -> None:
    services = make_services(telemetry, policy)
    task = make_task(forward, services)
    undecodable = b"{not json"
    task.enqueue(TP, [raw(0, value(0)), raw(1, value(1, fail=True)), raw(2, value(2)), raw(3, undecodable)])

    async with running(task):
        await until_idle(task)

    outputs, counters = fake_outputs(task), services.counters
    assert sent(outputs) == [{"n": 0}, {"n": 2}]
    assert forward.seen == [0, 1, 2]
    assert task.next_offsets == {TP: 4}  # past the undecodable record too
    assert counters.processed == 2
    if policy is ErrorPolicy.SKIP:
        assert (counters.skipped, counters.dead_lettered, sent(outputs, DEAD)) == (2, 0, [])
    else:
        assert (counters.skipped, counters.dead_lettered) == (0, 2)
        assert sent(outputs, DEAD) == [value(1, fail=True), undecodable]


async def test_a_failing_record_under_fail_stops_the_task_before_its_offset(
    telemetry: Telemetry, forward: Forward
) -> None:
    services = make_services(telemetry, ErrorPolicy.FAIL)
    task = make_task(forward, services)
    task.enqueue(TP, [raw(0, value(0)), raw(1, value(1, fail=True)), raw(2, value(2))])

    with pytest.raises(RecordFailed, match=r"processing failed in processor 'p' for record in\[0\]@1: ValueError"):
        await task.run()

    assert forward.seen == [0, 1]
    assert task.next_offsets == {TP: 1}  # a commit after the failure covers record 0, not 1
    assert sent(fake_outputs(task)) == [{"n": 0}]
    assert services.counters.processed == 1


async def test_an_undecodable_record_under_fail_stops_the_task_before_its_offset(
    telemetry: Telemetry, forward: Forward
) -> None:
    task = make_task(forward, make_services(telemetry, ErrorPolicy.FAIL))
    task.enqueue(TP, [raw(0, value(0)), raw(1, b"\xff"), raw(2, value(2))])

    with pytest.raises(RecordFailed, match=r"deserialization failed in processor 'p' for record in\[0\]@1"):
        await task.run()

    assert forward.seen == [0]
    assert task.next_offsets == {TP: 1}
    assert sent(fake_outputs(task)) == [{"n": 0}]


async def test_next_offsets_follow_each_input_and_a_bounded_run_stops_at_its_end(
    telemetry: Telemetry, forward: Forward
) -> None:
    task = make_task(forward, make_services(telemetry), inputs=[TP, OTHER], end_offsets={OTHER: 12})
    task.enqueue(TP, records(5, 6))
    task.enqueue(OTHER, [raw(offset, value(offset), topic="other") for offset in (10, 11, 12, 13)])

    async with running(task):
        await until_idle(task)

    assert forward.seen == [5, 6, 10, 11]
    assert task.next_offsets == {TP: 7, OTHER: 12}
    assert task.queued == 0


async def test_a_commit_takes_the_turn_after_the_current_record_and_the_rest_follows_in_order(
    telemetry: Telemetry,
) -> None:
    processor = AsyncForward()
    gate = processor.gates[1] = asyncio.Event()
    task = make_task(processor, make_services(telemetry))
    task.enqueue(TP, records(0, 1, 2, 3))
    task.enqueue(TP, records(4, 5))
    seen_by_commit: list[Any] = []

    async def commit() -> None:
        gate.set()  # record 1 resumes only once this waits for the turn: it is the batch's last
        async with task.commit_turn():
            checkpoint = await task.prepare_commit()
            seen_by_commit.extend([list(processor.seen), checkpoint, task.queued, sent(fake_outputs(task))])

    async with running(task):
        await processor.reached.wait()
        await commit()
        await until_idle(task)

    assert seen_by_commit == [[0, 1], Checkpoint(task, {TP: 2}), 4, [{"n": 0}, {"n": 1}]]
    assert processor.seen == [0, 1, 2, 3, 4, 5]
    assert sent(fake_outputs(task)) == [{"n": n} for n in range(6)]
    assert task.next_offsets == {TP: 6}
    assert task.queued == 0


async def test_request_stop_ends_the_batch_after_the_record_in_flight_and_drops_the_queue(
    telemetry: Telemetry,
) -> None:
    processor = AsyncForward()
    gate = processor.gates[1] = asyncio.Event()
    task = make_task(processor, make_services(telemetry))
    task.enqueue(TP, records(0, 1, 2))
    task.enqueue(TP, records(3))
    actor = asyncio.create_task(task.run())
    await processor.reached.wait()

    task.request_stop()
    gate.set()
    await actor

    assert processor.seen == [0, 1]
    assert task.next_offsets == {TP: 2}
    assert task.queued == 0
    assert sent(fake_outputs(task)) == [{"n": 0}, {"n": 1}]


class Ticking(Processor):
    """Sends a tick every millisecond from a punctuation, which then raises when `fails`."""

    def __init__(self, fails: bool, asynchronous: bool):
        self.fails = fails
        self.asynchronous = asynchronous
        self.ticks = 0
        self.ticked = asyncio.Event()
        self.ctx: Context | None = None

    def init(self, ctx: Context) -> None:
        self.ctx = ctx
        ctx.schedule(1, self.tick_async if self.asynchronous else self.tick)

    def process(self, record: Record, ctx: Context) -> None:
        pass

    def tick(self) -> None:
        assert self.ctx is not None
        self.ticks += 1
        self.ctx.send(OUT, {"tick": self.ticks})
        self.ticked.set()
        if self.fails:
            raise ConnectionError("the tick's target is down")

    async def tick_async(self) -> None:
        self.tick()


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("fails", [False, True], ids=["ok", "failing"])
async def test_punctuations_release_their_outputs_unless_they_fail_under_skip(fails: bool, asynchronous: bool) -> None:
    processor = Ticking(fails, asynchronous)
    services = make_services(policy=ErrorPolicy.SKIP)
    task = make_task(processor, services)

    async with running(task):
        await processor.ticked.wait()

    assert processor.ticks >= 1
    if fails:
        assert sent(fake_outputs(task)) == []
        assert services.counters.skipped == processor.ticks
    else:
        assert sent(fake_outputs(task)) == [{"tick": n} for n in range(1, processor.ticks + 1)]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
async def test_a_failing_punctuation_under_fail_stops_the_task(asynchronous: bool) -> None:
    processor = Ticking(True, asynchronous)
    task = make_task(processor, make_services(policy=ErrorPolicy.FAIL))

    with pytest.raises(StopAfterCommit, match=r"failed in a punctuation\(\) of task p\[0\]: ConnectionError"):
        await task.run()

    assert sent(fake_outputs(task)) == []


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


async def prepare(task: Task) -> Checkpoint | None:
    async with task.commit_turn():
        return await task.prepare_commit()


async def test_prepare_commit_awaits_the_flush_and_releases_what_it_sent(buffering: Buffering) -> None:
    log: list[str] = []
    task = make_task(buffering, state=FakeState("p", log))
    await processed(task, 0, 1)
    assert sent(fake_outputs(task)) == []

    assert await prepare(task) == Checkpoint(task, {TP: 2})

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
    assert await prepare(task) == Checkpoint(task, {TP: 2})
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
