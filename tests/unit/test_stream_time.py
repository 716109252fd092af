"""A task's stream time and its stream-time punctuations, without a broker."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from aiokafka import TopicPartition

from processors.context import Context
from processors.processor import Processor
from processors.record import Record
from runtime.config import ErrorPolicy
from runtime.errors import StopAfterCommit
from runtime.telemetry import Telemetry
from tests.support.engine_fakes import (
    IN,
    OUT,
    fake_outputs,
    make_services,
    make_task,
    raw,
    running,
    sent,
    telemetry_variant,
    until_idle,
    value,
)

pytestmark = pytest.mark.anyio

TP = TopicPartition(IN, 0)


@pytest.fixture(params=["off", "traced", "metrics"])
def telemetry(request: pytest.FixtureRequest) -> Iterator[Telemetry]:
    telemetry = telemetry_variant(request.param)
    yield telemetry
    telemetry.shutdown()


def timed(*timestamps: int, start: int = 0) -> list[object]:
    """Records at offsets from `start` with these Kafka timestamps."""
    return [raw(start + i, value(start + i), timestamp=t) for i, t in enumerate(timestamps)]


class Clock(Processor):
    """Notes the stream time in `init` and as each record sees it; with `every_ms`, a stream-time
    punctuation notes the stream time and the records processed before it, and sends a tick."""

    def __init__(self, every_ms: int | None = None, fails: bool = False):
        self.every_ms = every_ms
        self.fails = fails
        self.at_init = 0
        self.seen: list[tuple[int, int]] = []  # (record timestamp, stream time in process)
        self.fired: list[tuple[int, int]] = []  # (stream time, records processed so far)
        self.ticked = asyncio.Event()
        self.ctx: Context | None = None

    def init(self, ctx: Context) -> None:
        self.ctx = ctx
        self.at_init = ctx.stream_time
        if self.every_ms is not None:
            ctx.schedule(self.every_ms, self.tick, time="stream_time")

    def process(self, record: Record, ctx: Context) -> None:
        self.seen.append((record.timestamp, ctx.stream_time))

    def tick(self) -> None:
        assert self.ctx is not None
        self.fired.append((self.ctx.stream_time, len(self.seen)))
        self.ctx.send(OUT, {"tick": self.ctx.stream_time})
        self.ticked.set()
        if self.fails:
            raise ConnectionError("the tick's target is down")


async def test_stream_time_is_the_largest_timestamp_processed_and_never_goes_back(telemetry: Telemetry) -> None:
    clock = Clock()
    task = make_task(clock, make_services(telemetry))
    task.enqueue(TP, timed(50, 20, 70))
    task.enqueue(TP, [raw(3, b"{not json", timestamp=900), *timed(60, 71, start=4)])

    async with running(task):
        await until_idle(task)

    assert clock.at_init == -1
    # It includes the record being processed; an undecodable record (at 900) does not move it.
    assert clock.seen == [(50, 50), (20, 50), (70, 70), (60, 70), (71, 71)]
    assert task._context.stream_time == 71


async def test_a_stream_time_punctuation_fires_after_the_record_that_reaches_its_time(telemetry: Telemetry) -> None:
    clock = Clock(every_ms=10)
    task = make_task(clock, make_services(telemetry))
    # Due at 0 (the first record), then at each multiple of 10 that stream time reaches.
    task.enqueue(TP, timed(5, 8, 12, 12, 9, 19, 35, 30, 40, 41))

    async with running(task):
        await until_idle(task)

    assert clock.fired == [(5, 1), (12, 3), (35, 7), (40, 9)]  # 35 jumped over 20 and 30: once
    assert sent(fake_outputs(task)) == [{"tick": t} for t, _ in clock.fired]


async def test_a_stream_time_punctuation_does_not_fire_while_stream_time_stands_still() -> None:
    clock = Clock(every_ms=10)
    task = make_task(clock, make_services())
    task.enqueue(TP, timed(10))  # the last record brings the punctuation: it fires without waiting for more

    async with running(task):
        async with asyncio.timeout(5):
            await clock.ticked.wait()
        task.enqueue(TP, timed(10, 15, 19, 3, start=1))
        await until_idle(task)
        await asyncio.sleep(0.05)  # wall-clock time passes; stream time does not

    assert clock.fired == [(10, 1)]


async def test_a_stream_time_punctuation_scheduled_later_is_due_at_the_next_multiple() -> None:
    class LateClock(Clock):
        def process(self, record: Record, ctx: Context) -> None:
            super().process(record, ctx)
            if len(self.seen) == 2:
                ctx.schedule(100, self.tick, time="stream_time")

    clock = LateClock()
    task = make_task(clock, make_services())
    task.enqueue(TP, timed(130, 150, 199))
    task.enqueue(TP, timed(200, 250, 305, start=3))

    async with running(task):
        await until_idle(task)

    assert clock.fired == [(200, 4), (305, 6)]


@pytest.mark.parametrize("policy", [ErrorPolicy.SKIP, ErrorPolicy.FAIL])
async def test_a_failing_stream_time_punctuation_is_handled_as_a_wall_clock_one(policy: ErrorPolicy) -> None:
    clock = Clock(every_ms=10, fails=True)
    services = make_services(policy=policy)
    task = make_task(clock, services)
    task.enqueue(TP, timed(5, 15, 25))

    if policy is ErrorPolicy.FAIL:
        with pytest.raises(StopAfterCommit, match=r"failed in a punctuation of task p\[0\]: ConnectionError"):
            await task.run()
        assert clock.fired == [(5, 1)]
    else:
        async with running(task):
            await until_idle(task)
        assert clock.fired == [(5, 1), (15, 2), (25, 3)]
        assert services.counters.skipped == 3
    assert sent(fake_outputs(task)) == []  # nothing of a failed punctuation escapes


def test_schedule_refuses_an_unknown_kind_of_time() -> None:
    task = make_task(Clock())

    with pytest.raises(ValueError, match="time must be 'wall_clock' or 'stream_time', not 'event_time'"):
        task._context.schedule(10, lambda: None, time="event_time")  # type: ignore[arg-type]


async def test_going_back_to_the_committed_offsets_goes_back_to_their_stream_time() -> None:
    clock = Clock(every_ms=10)
    task = make_task(clock, make_services())

    async with running(task):
        task.enqueue(TP, timed(5, 12))
        await until_idle(task)
        async with task.commit_turn():  # as exactly-once commits: prepare, then committed
            checkpoint = await task.prepare_commit()
            assert checkpoint is not None
            task.committed(checkpoint.offsets)
        task.enqueue(TP, timed(25, 28, start=2))
        await until_idle(task)
        assert clock.fired == [(5, 1), (12, 2), (25, 3)]
        async with task.commit_turn():  # the transaction was aborted: back to the committed offsets
            task.rewind(checkpoint.offsets)
        assert task._context.stream_time == 12
        task.enqueue(TP, timed(25, 28, start=2))  # processed again, as the first time
        await until_idle(task)

    assert clock.fired == [(5, 1), (12, 2), (25, 3), (25, 5)]
    assert clock.seen[2:] == [(25, 25), (28, 28), (25, 25), (28, 28)]
