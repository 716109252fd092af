"""Records from the future, without a broker: the bound on how far ahead of the wall clock an event time
may be, the log of stream-time jumps, and a task's records beyond the bound going to the deserialization
policy, on each of the per-record loop's paths, without moving stream time."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from aiokafka import TopicPartition

from processors.context import Context
from processors.merge import MergeProcessor
from processors.processor import Processor
from processors.record import Record
from runtime.config import ConfigError, ErrorPolicy, parse_app
from runtime.config.processors import ConcurrencyConfig, ConcurrencyOrder
from runtime.task.context import NEVER
from runtime.task.event_time_bounds import AheadGuard, EventTimeAhead, StreamTimeJumps, moment, span
from runtime.task.failures import RecordFailed
from runtime.task.task import TaskServices
from runtime.telemetry import Telemetry
from tests.support.engine_fakes import (
    DEAD,
    IN,
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
NOW = 1_790_000_000_000  # 2026-09-21T14:13:20Z
MINUTE, HOUR = 60_000, 3_600_000
YEAR_3000 = 32_503_680_000_000  # 3000-01-01T00:00:00Z
AHEAD = 15 * MINUTE


class WallClock:
    """Stands still at `now`, and counts how often it is read."""

    def __init__(self, now: int = NOW) -> None:
        self.now = now
        self.reads = 0
        self.seconds = 0.0

    def monotonic(self) -> float:
        return self.seconds

    def epoch_ms(self) -> int:
        self.reads += 1
        return self.now


def guard(clock: WallClock, max_ahead_ms: int | None = AHEAD) -> AheadGuard:
    return AheadGuard("p", max_ahead_ms, clock, StreamTimeJumps())


def test_the_alarm_is_the_lower_of_the_bound_and_a_jump_of_max_ahead() -> None:
    clock = WallClock()
    bounds = guard(clock)

    assert bounds.start(NOW - HOUR) == NOW - HOUR + AHEAD  # a jump that large would reach `judge`
    assert bounds.start(NOW + 5) == NOW + AHEAD  # the bound: the wall clock plus max_ahead
    assert bounds.start(-1) == AHEAD - 1  # no record yet: the first one is judged
    assert clock.reads == 3


def test_a_time_beyond_the_bound_is_refused_naming_how_far_ahead_it_is() -> None:
    bounds = guard(WallClock())
    bounds.start(NOW - 1)

    with pytest.raises(EventTimeAhead) as refused:
        bounds.judge(raw(7, value(7)), NOW + AHEAD + 1, NOW - 1)

    assert str(refused.value) == (
        f"event time {NOW + AHEAD + 1} (2026-09-21T14:28:20.001Z) is 0:15:00.001000 ahead of the wall clock "
        "(2026-09-21T14:13:20.000Z): more than max_ahead (0:15:00) of topic 'in'"
    )
    with pytest.raises(EventTimeAhead, match=r"\(3000-01-01T00:00:00\.000Z\) is 355482 days, 9:46:40 ahead"):
        bounds.judge(raw(8, value(8)), YEAR_3000, NOW - 1)


def test_a_time_within_the_bound_moves_the_alarm_on_and_never_past_the_bound() -> None:
    bounds = guard(WallClock())
    bounds.start(NOW - HOUR)

    assert bounds.judge(raw(0, value(0)), NOW - HOUR + AHEAD + 1, NOW - HOUR) == NOW - HOUR + 2 * AHEAD + 1
    assert bounds.alarm == NOW - HOUR + 2 * AHEAD + 1
    assert bounds.judge(raw(1, value(1)), NOW + AHEAD, NOW - HOUR + AHEAD + 1) == NOW + AHEAD  # the bound itself


def test_without_a_bound_nothing_is_judged_and_the_clock_is_not_read() -> None:
    clock = WallClock()
    bounds = guard(clock, None)

    assert bounds.start(NOW) == NEVER
    assert clock.reads == 0


def test_a_jump_of_more_than_max_ahead_is_logged_with_the_records_position(caplog: pytest.LogCaptureFixture) -> None:
    bounds = guard(WallClock())
    bounds.start(NOW - HOUR)

    with caplog.at_level(logging.WARNING):
        bounds.judge(raw(0, value(0)), -1 + AHEAD + 5, -1)  # the first record moves stream time from nothing
        bounds.judge(raw(41, value(41)), NOW, NOW - HOUR)

    assert [entry.getMessage() for entry in caplog.records] == [
        "stream time of processor 'p' jumped 1:00:00 in one record, from 2026-09-21T13:13:20.000Z to "
        "2026-09-21T14:13:20.000Z, at record in[0]@41: more than max_ahead (0:15:00) of topic 'in'; windows "
        "and de-duplication close on it"
    ]


def test_jumps_are_logged_at_most_once_a_minute_counting_those_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    jumps = StreamTimeJumps()
    record = raw(3, value(3))

    with caplog.at_level(logging.WARNING):
        for second in (0.0, 1.0, 30.0, 59.9, 60.0, 61.0, 200.0):
            jumps.jumped(second, "p", record, NOW - HOUR, NOW, AHEAD)

    lines = [entry.getMessage() for entry in caplog.records]
    assert len(lines) == 3
    assert lines[0].endswith("close on it")
    assert lines[1].endswith("close on it (3 more since the last such line)")
    assert lines[2].endswith("close on it (1 more since the last such line)")


def test_times_no_calendar_holds_are_written_as_numbers() -> None:
    assert moment(NOW) == "2026-09-21T14:13:20.000Z"
    assert moment(1 << 62) == f"{1 << 62} ms since the epoch"
    assert span(1 << 62) == f"{1 << 62} ms"


def app_reading(topic: dict[str, Any]) -> dict[str, Any]:
    """An app whose one processor reads topic `in`, set up as `topic` says."""
    processor = {"name": "p", "class": "tests.support.apps:Echo", "inputs": ["in"], "outputs": ["out"]}
    return {"app_id": "a", "topics": {"in": topic, "out": {}}, "processors": [processor]}


@pytest.mark.parametrize(
    ("given", "expected"), [(None, 900_000), ("1h", 3_600_000), ("30s", 30_000), (2500, 2500), ("none", None)]
)
def test_max_ahead_is_a_duration_per_topic_fifteen_minutes_unless_set(given: Any, expected: int | None) -> None:
    topic: dict[str, Any] = {} if given is None else {"max_ahead": None if given == "none" else given}
    assert parse_app(app_reading(topic)).topics["in"].max_ahead == expected


@pytest.mark.parametrize(("given", "problem"), [("soon", "is not a duration"), (-1, "greater than or equal to 0")])
def test_a_max_ahead_that_is_no_duration_is_refused_at_its_path(given: object, problem: str) -> None:
    with pytest.raises(ConfigError, match=rf"topics\.in\.max_ahead.*{problem}"):
        parse_app(app_reading({"max_ahead": given}))


@pytest.fixture(params=["off", "traced", "metrics"])
def telemetry(request: pytest.FixtureRequest) -> Iterator[Telemetry]:
    telemetry = telemetry_variant(request.param)
    yield telemetry
    telemetry.shutdown()


class Seen(Processor):
    """Notes each record's offset, timestamp and the stream time it sees."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int, int]] = []

    def process(self, record: Record, ctx: Context) -> None:
        self.seen.append((record.offset, record.timestamp, ctx.stream_time))


class SeenAsync(Seen):
    async def process(self, record: Record, ctx: Context) -> None:  # type: ignore[override]
        super().process(record, ctx)


class SeenChosen(Seen, MergeProcessor):
    def choose(self, heads: Mapping[str, Record]) -> str | None:
        return next(iter(heads), None)


# Ordinary records, the year 3000 at offset 2, an hour ahead at offset 4.
TIMES = [NOW - 3000, NOW - 2000, YEAR_3000, NOW - 1000, NOW + HOUR, NOW]
ORDINARY = [(0, NOW - 3000, NOW - 3000), (1, NOW - 2000, NOW - 2000), (3, NOW - 1000, NOW - 1000), (5, NOW, NOW)]


def timed() -> list[Any]:
    return [raw(offset, value(offset), timestamp=at) for offset, at in enumerate(TIMES)]


def bounded(services: TaskServices, max_ahead_ms: int | None = AHEAD) -> WallClock:
    clock = WallClock()
    services.clock, services.max_ahead_ms = clock, {IN: max_ahead_ms}
    return clock


@pytest.mark.parametrize("policy", [ErrorPolicy.SKIP, ErrorPolicy.DEAD_LETTER])
async def test_records_from_the_future_go_to_the_deserialization_policy_and_never_move_stream_time(
    telemetry: Telemetry, policy: ErrorPolicy, caplog: pytest.LogCaptureFixture
) -> None:
    processor = Seen()
    services = make_services(telemetry, policy)
    clock = bounded(services)
    task = make_task(processor, services)
    task.enqueue(TP, timed())

    with caplog.at_level(logging.WARNING):
        async with running(task):
            await until_idle(task)

    assert processor.seen == ORDINARY
    assert task.context.stream_time == NOW
    assert task.next_offsets == {TP: 6}
    assert clock.reads == 1  # once for the batch
    what = "skipped" if policy is ErrorPolicy.SKIP else "dead-lettered"
    refusals = [entry.getMessage() for entry in caplog.records if entry.getMessage().startswith(what)]
    assert [refusal.split(" (")[0] for refusal in refusals] == [f"{what} record in[0]@2", f"{what} record in[0]@4"]
    assert all("failed in 'p'): EventTimeAhead(\"event time" in refusal for refusal in refusals)
    assert "is 1:00:00 ahead of the wall clock" in refusals[1]
    if policy is ErrorPolicy.SKIP:
        assert (services.counters.skipped, services.counters.dead_lettered) == (2, 0)
    else:
        assert (services.counters.skipped, services.counters.dead_lettered) == (0, 2)
        assert sent(fake_outputs(task), DEAD) == [value(2), value(4)]


async def test_under_fail_a_record_from_the_future_stops_the_task_naming_it() -> None:
    processor = Seen()
    services = make_services(policy=ErrorPolicy.FAIL)
    bounded(services)
    task = make_task(processor, services)
    task.enqueue(TP, timed())

    with pytest.raises(
        RecordFailed,
        match=r"deserialization failed in processor 'p' for record in\[0\]@2: EventTimeAhead: event time "
        rf"{YEAR_3000} \(3000-01-01T00:00:00\.000Z\) is .* ahead of the wall clock",
    ):
        await task.run()

    assert processor.seen == ORDINARY[:2]
    assert task.next_offsets == {TP: 2}


async def test_without_a_bound_a_record_from_the_future_moves_stream_time_as_in_kafka_streams() -> None:
    processor = Seen()
    services = make_services()
    bounded(services, None)
    task = make_task(processor, services)
    task.enqueue(TP, timed())

    async with running(task):
        await until_idle(task)

    assert [(offset, stream_time) for offset, _, stream_time in processor.seen][2:] == [
        (2, YEAR_3000),
        (3, YEAR_3000),
        (4, YEAR_3000),
        (5, YEAR_3000),
    ]


@pytest.mark.parametrize("kind", ["concurrent", "chosen", "async"])
async def test_every_path_of_the_loop_refuses_records_from_the_future(kind: str) -> None:
    processor: Seen = {"concurrent": SeenAsync, "chosen": SeenChosen, "async": SeenAsync}[kind]()
    services = make_services(policy=ErrorPolicy.DEAD_LETTER)
    bounded(services)
    concurrency = ConcurrencyConfig(max_in_flight=4, order=ConcurrencyOrder.NONE) if kind == "concurrent" else None
    task = make_task(processor, services, concurrency=concurrency)
    task.enqueue(TP, timed())

    async with running(task):
        await until_idle(task)

    assert sorted(processor.seen) == ORDINARY
    assert task.next_offsets == {TP: 6}
    assert sent(fake_outputs(task), DEAD) == [value(2), value(4)]


async def test_the_wall_clock_is_read_once_per_batch() -> None:
    services = make_services()
    clock = bounded(services)
    task = make_task(Seen(), services)
    for start in (0, 100, 200):
        task.enqueue(
            TP, [raw(offset, value(offset), timestamp=NOW - 1000 + offset) for offset in range(start, start + 100)]
        )

    async with running(task):
        await until_idle(task)

    assert task.next_offsets == {TP: 300}
    assert clock.reads == 3
