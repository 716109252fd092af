"""Timestamp order across a task's input partitions: the choice of runs alone, then tasks that merge
their inputs, without a broker."""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiokafka import TopicPartition

from processors.context import Context
from processors.processor import Processor
from processors.record import Record
from runtime.task.commits import TaskCommit
from runtime.task.event_time import field_reader
from runtime.task.timestamp_order import InputQueue, TimestampOrder
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
)
from tests.support.engine_fakes import value as json_value

pytestmark = pytest.mark.anyio

A, B, C = TopicPartition(IN, 0), TopicPartition("other", 0), TopicPartition("third", 0)


def at(topic: str, offset: int, timestamp: int, **fields: Any) -> Any:
    """A record of `topic` at `offset` with Kafka timestamp `timestamp`; its value names both."""
    return raw(offset, json_value(timestamp, topic=topic, **fields), topic=topic, timestamp=timestamp)


def order(
    queues: list[InputQueue], max_idle_s: float = 0.0, unfetched: Callable[[TopicPartition], bool] | None = None
) -> TimestampOrder:
    return TimestampOrder(queues, max_idle_s, unfetched or (lambda tp: False))


def queue(tp: TopicPartition, rank: int, *lists: list[int]) -> InputQueue:
    """An input queue whose records have these timestamps, in these lists; offsets count from 0."""
    found = InputQueue(tp, rank, operator.attrgetter("timestamp"))
    offset = 0
    for timestamps in lists:
        found.add([at(tp.topic, offset + i, t) for i, t in enumerate(timestamps)])
        offset += len(timestamps)
    return found


def runs(merge: TimestampOrder, now: float = 0.0) -> list[tuple[str, list[int]]]:
    """Every run until there is none: (topic, its records' timestamps)."""
    found = []
    while (run := merge.next_run(now)) is not None:
        tp, records = run
        found.append((tp.topic, [r.timestamp for r in records]))
    return found


def test_the_lowest_head_goes_first_across_three_partitions() -> None:
    merge = order([queue(A, 0, [1, 4, 7]), queue(B, 1, [2, 5, 8]), queue(C, 2, [3, 6, 9])])

    found = runs(merge)

    assert [t for _, timestamps in found for t in timestamps] == list(range(1, 10))
    assert [topic for topic, _ in found] == [IN, "other", "third"] * 3
    assert merge.count == 0


def test_a_run_holds_a_partitions_records_up_to_where_another_head_comes_first() -> None:
    merge = order([queue(A, 0, [10, 20], [30, 40, 60]), queue(B, 1, [5, 25, 50, 55])])

    assert runs(merge) == [
        ("other", [5]),
        (IN, [10, 20]),
        ("other", [25]),
        (IN, [30, 40]),
        ("other", [50, 55]),
        (IN, [60]),
    ]


@pytest.mark.parametrize("first", [A, B])
def test_equal_timestamps_go_to_the_input_listed_first(first: TopicPartition) -> None:
    second = B if first == A else A
    merge = order([queue(first, 0, [5, 5, 7]), queue(second, 1, [1, 5, 5, 6])])

    assert runs(merge) == [
        (second.topic, [1]),
        (first.topic, [5, 5]),
        (second.topic, [5, 5, 6]),
        (first.topic, [7]),
    ]


def test_records_out_of_order_within_a_partition_keep_their_offset_order() -> None:
    merge = order([queue(A, 0, [10, 3, 4, 30]), queue(B, 1, [20])])

    assert runs(merge) == [(IN, [10, 3, 4]), ("other", [20]), (IN, [30])]


def test_the_rest_of_an_interrupted_run_goes_first_again() -> None:
    merge = order([queue(A, 0, [1, 2, 3, 9]), queue(B, 1, [4, 5])])
    run = merge.next_run(0.0)
    assert run is not None and [r.timestamp for r in run[1]] == [1, 2, 3]

    merge.put_back(A, run[1][1:])  # only the first was processed

    assert merge.count == 5
    assert runs(merge) == [(IN, [2, 3]), ("other", [4, 5]), (IN, [9])]


def test_a_partition_empty_here_but_not_in_kafka_is_waited_for_until_the_idle_time_ends() -> None:
    asked: list[TopicPartition] = []

    def unfetched(tp: TopicPartition) -> bool:
        asked.append(tp)
        return bool(tp == B)

    merge = order([queue(A, 0, [1, 2]), queue(B, 1), queue(C, 2)], max_idle_s=1.0, unfetched=unfetched)

    assert merge.next_run(10.0) is None
    assert merge.wait_ends == 11.0
    assert merge.next_run(10.9) is None
    assert asked and set(asked) <= {B, C}
    assert runs(merge, now=11.0) == [(IN, [1, 2])]  # the wait ran out: on without B
    assert merge.wait_ends is None


def test_the_wait_starts_again_once_the_partition_had_records() -> None:
    empty_b = queue(B, 1)
    merge = order([queue(A, 0, [1], [7]), empty_b], max_idle_s=1.0, unfetched=lambda tp: tp == B)
    assert merge.next_run(0.0) is None
    assert merge.next_run(1.0) is not None  # A's 1, without B
    empty_b.add([at("other", 0, 3)])
    assert runs(merge, now=1.5) == [("other", [3])]  # B is there: no wait, and the wait is over

    assert merge.next_run(1.5) is None  # B is empty again, and Kafka still has records of it
    assert merge.wait_ends == 2.5


def test_no_partition_is_waited_for_when_kafka_has_nothing_more_of_it_or_without_idle_time() -> None:
    never_asked = order([queue(A, 0, [1]), queue(B, 1)], unfetched=lambda tp: pytest.fail("asked about lag"))
    caught_up = order([queue(A, 0, [1]), queue(B, 1)], max_idle_s=5.0)

    assert runs(never_asked) == runs(caught_up) == [(IN, [1])]


# A task that merges its inputs.


@pytest.fixture(params=["off", "traced", "dropped", "metrics"])
def telemetry(request: pytest.FixtureRequest) -> Iterator[Telemetry]:
    telemetry = telemetry_variant(request.param)
    yield telemetry
    telemetry.shutdown()


class Journal(Processor):
    """Notes each record as (topic, timestamp, offset) and sends its timestamp on; `gate` holds the
    record with that timestamp until the test opens it (the async variant)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int, int]] = []
        self.gate: tuple[int, asyncio.Event] | None = None
        self.reached = asyncio.Event()

    def note(self, record: Record, ctx: Context) -> None:
        self.seen.append((record.topic, record.timestamp, record.offset))
        ctx.send(OUT, {"t": record.timestamp})

    def process(self, record: Record, ctx: Context) -> None:
        self.note(record, ctx)


class AsyncJournal(Journal):
    async def process(self, record: Record, ctx: Context) -> None:  # type: ignore[override]
        if self.gate is not None and record.timestamp == self.gate[0]:
            self.reached.set()
            await self.gate[1].wait()
        self.note(record, ctx)


@pytest.fixture(params=[Journal, AsyncJournal], ids=["sync", "async"])
def journal(request: pytest.FixtureRequest) -> Journal:
    processor: Journal = request.param()
    return processor


async def test_a_task_processes_interleaved_inputs_in_timestamp_order(telemetry: Telemetry, journal: Journal) -> None:
    task = make_task(journal, make_services(telemetry), inputs=[A, B, C])
    task.enqueue(A, [at(IN, 0, 10), at(IN, 1, 40), at(IN, 2, 70)])
    task.enqueue(B, [at("other", 0, 20), at("other", 1, 50)])
    task.enqueue(C, [at("third", 0, 30), at("third", 1, 40), at("third", 2, 60)])
    task.enqueue(B, [at("other", 2, 80)])

    async with running(task):
        await until_idle(task)

    assert [t for _, t, _ in journal.seen] == [10, 20, 30, 40, 40, 50, 60, 70, 80]
    assert journal.seen[3:5] == [(IN, 40, 1), ("third", 40, 1)]  # the tie: the input listed first
    assert sent(fake_outputs(task)) == [{"t": t} for _, t, _ in journal.seen]
    assert task.next_offsets == {A: 3, B: 3, C: 3}
    assert task.queued == 0


async def test_a_task_orders_its_inputs_by_event_time_from_a_field(telemetry: Telemetry) -> None:
    journal = Journal()
    services = make_services(telemetry, timestamps={IN: field_reader("at"), "other": field_reader("at")})
    task = make_task(journal, services, inputs=[A, B])
    # Kafka's timestamps say the opposite of the event times.
    task.enqueue(A, [at(IN, 0, 100, at=3), at(IN, 1, 101, at=4)])
    task.enqueue(B, [at("other", 0, 1, at=1), at("other", 1, 2, at=5)])

    async with running(task):
        await until_idle(task)

    assert [(topic, t) for topic, t, _ in journal.seen] == [("other", 1), (IN, 3), (IN, 4), ("other", 5)]


async def test_a_commit_ends_a_run_after_its_current_record_and_the_order_goes_on(telemetry: Telemetry) -> None:
    journal = AsyncJournal()
    gate = asyncio.Event()
    journal.gate = (20, gate)
    task = make_task(journal, make_services(telemetry), inputs=[A, B])
    task.enqueue(A, [at(IN, 0, 10), at(IN, 1, 20), at(IN, 2, 30), at(IN, 3, 60)])
    task.enqueue(B, [at("other", 0, 40), at("other", 1, 50)])
    seen_by_commit: list[Any] = []

    async def commit() -> None:
        gate.set()  # the record at 20 goes on only once this waits for the turn: its run ends after it
        async with task.commit_turn():
            task_commit = await task.prepare_commit()
            seen_by_commit.extend([[t for _, t, _ in journal.seen], task_commit, task.queued])

    async with running(task):
        await journal.reached.wait()
        await commit()
        await until_idle(task)

    assert seen_by_commit == [[10, 20], TaskCommit(task, {A: 2}), 4]
    assert [t for _, t, _ in journal.seen] == [10, 20, 30, 40, 50, 60]
    assert task.next_offsets == {A: 4, B: 2}
    assert task.queued == 0


async def test_a_task_waits_for_an_input_kafka_still_has_records_of(telemetry: Telemetry) -> None:
    journal = Journal()
    lagging = {B}
    task = make_task(journal, make_services(telemetry, max_task_idle_s=60.0, unfetched=lagging.__contains__),
                     inputs=[A, B])  # fmt: skip
    task.enqueue(A, [at(IN, 0, 10), at(IN, 1, 30)])

    async with running(task):
        await asyncio.sleep(0.05)
        assert journal.seen == []  # B may hold earlier records
        assert not task.idle
        task.enqueue(B, [at("other", 0, 20)])
        lagging.clear()
        await until_idle(task)

    assert [t for _, t, _ in journal.seen] == [10, 20, 30]


async def test_a_task_goes_on_without_the_input_it_waits_for_once_the_idle_time_ran_out() -> None:
    journal = Journal()
    task = make_task(journal, make_services(max_task_idle_s=0.05, unfetched={B}.__contains__), inputs=[A, B])
    task.enqueue(A, [at(IN, 0, 10), at(IN, 1, 30)])

    async with running(task):
        await until_idle(task)

    assert [t for _, t, _ in journal.seen] == [10, 30]
    assert task.next_offsets == {A: 2}


async def test_a_rewound_task_forgets_what_it_had_queued_of_each_input() -> None:
    journal = Journal()
    task = make_task(journal, make_services(max_task_idle_s=60.0, unfetched={B}.__contains__), inputs=[A, B])
    task.enqueue(A, [at(IN, 5, 10)])

    async with running(task):
        await asyncio.sleep(0.02)  # it waits for B, A's record queued
        async with task.commit_turn():
            task.rewind({A: 3, B: 7})
        assert (task.queued, task.queued_inputs(), task.next_offsets) == (0, [], {A: 3, B: 7})
        task.enqueue(A, [at(IN, 3, 1)])
        task.enqueue(B, [at("other", 7, 2)])
        await until_idle(task)

    assert [(topic, offset) for topic, _, offset in journal.seen] == [(IN, 3), ("other", 7)]
    assert task.next_offsets == {A: 4, B: 8}


async def test_records_for_an_input_the_task_had_none_of_end_the_run_in_flight_to_be_ordered_in() -> None:
    journal = AsyncJournal()
    gate = asyncio.Event()
    journal.gate = (10, gate)
    task = make_task(journal, make_services(), inputs=[A, B])
    task.enqueue(A, [at(IN, 0, 10), at(IN, 1, 20), at(IN, 2, 30)])  # B has nothing: one run of all three

    async with running(task):
        await journal.reached.wait()
        task.enqueue(B, [at("other", 0, 15)])
        gate.set()
        await until_idle(task)

    assert [t for _, t, _ in journal.seen] == [10, 15, 20, 30]


async def test_a_record_whose_event_time_cannot_be_read_goes_to_the_policy_without_upsetting_the_order() -> None:
    journal = Journal()
    services = make_services(timestamps={IN: field_reader("at"), "other": field_reader("at")})
    task = make_task(journal, services, inputs=[A, B])
    task.enqueue(A, [at(IN, 0, 1, at=30), raw(1, b"{broken", topic=IN), at(IN, 2, 2, at=50)])
    task.enqueue(B, [at("other", 0, 3, at=20), at("other", 1, 4), at("other", 2, 5, at=40)])  # 1 has no `at`

    async with running(task):
        await until_idle(task)

    assert [(topic, t) for topic, t, _ in journal.seen] == [("other", 20), (IN, 30), ("other", 40), (IN, 50)]
    assert services.counters.skipped == 2
    assert task.next_offsets == {A: 3, B: 3}
