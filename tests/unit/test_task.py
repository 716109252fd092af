"""The task actor without a broker: its per-record loops, its turn and its punctuations.

Every loop test runs with telemetry off and on (each record traced, each span dropped, or metrics
only): `RecordLoop.process` takes both, and a sampled record leaves it for the shared step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterator
from typing import Any

import pytest
from aiokafka import TopicPartition

from processors.context import Context
from processors.processor import Processor
from processors.record import Record
from runtime.config import ErrorPolicy
from runtime.errors import StopAfterCommit
from runtime.task.commits import TaskCommit
from runtime.task.failures import RecordFailed
from runtime.telemetry import Telemetry
from tests.support.engine_fakes import (
    DEAD,
    IN,
    OUT,
    fake_outputs,
    make_services,
    make_task,
    raw,
    records,
    running,
    sent,
    telemetry_variant,
    until_idle,
    value,
)

pytestmark = pytest.mark.anyio

TP = TopicPartition(IN, 0)
OTHER = TopicPartition("other", 0)


@pytest.fixture(params=["off", "traced", "dropped", "metrics"])
def telemetry(request: pytest.FixtureRequest) -> Iterator[Telemetry]:
    telemetry = telemetry_variant(request.param)
    yield telemetry
    telemetry.shutdown()


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


async def test_a_task_stopped_by_a_failing_record_is_never_marked_caught_up_past_it(
    telemetry: Telemetry, forward: Forward
) -> None:
    """A bounded run marks a task caught up when it is idle and the consumer's position passed the end:
    a task whose actor ended on a failure is idle, its records dropped, and must keep the offset before
    the failed record, or the commit that follows the failure would skip it."""
    task = make_task(forward, make_services(telemetry, ErrorPolicy.FAIL))
    task.enqueue(TP, [raw(0, value(0, fail=True)), raw(1, value(1))])
    with pytest.raises(RecordFailed):
        await task.run()

    task.mark_caught_up(TP, 2)

    assert task.idle and task.running
    assert task.next_offsets.get(TP, 0) == 0


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
            task_commit = await task.prepare_commit()
            seen_by_commit.extend([list(processor.seen), task_commit, task.queued, sent(fake_outputs(task))])

    async with running(task):
        await processor.reached.wait()
        await commit()
        await until_idle(task)

    assert seen_by_commit == [[0, 1], TaskCommit(task, {TP: 2}), 4, [{"n": 0}, {"n": 1}]]
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

    with pytest.raises(StopAfterCommit, match=r"failed in a punctuation of task p\[0\]: ConnectionError"):
        await task.run()

    assert sent(fake_outputs(task)) == []
