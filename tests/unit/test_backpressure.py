"""Pausing and resuming a partition's fetching, as holds on it come and go."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import TopicPartition

from processors.context import Context
from processors.processor import Processor
from processors.record import Record
from runtime.config import QueueConfig
from runtime.counters import Counters
from runtime.task.task import Task
from runtime.worker.backpressure import END_OF_RUN, Backpressure
from tests.support.engine_fakes import IN, FakeConsumer, make_services, make_task, raw, running

TP0, TP1 = TopicPartition(IN, 0), TopicPartition(IN, 1)


class Idle(Processor):
    def process(self, record: Record, ctx: Context) -> None:
        pass


def backpressure(pause_at: int = 3, resume_at: int = 1) -> tuple[Backpressure, FakeConsumer, Counters]:
    consumer, counters = FakeConsumer(), Counters()
    return Backpressure(consumer, QueueConfig(pause_at=pause_at, resume_at=resume_at), counters), consumer, counters


def test_a_partition_resumes_only_when_its_last_hold_is_released_in_any_order() -> None:
    for first, second in (("restoring", END_OF_RUN), (END_OF_RUN, "restoring")):
        holds, consumer, counters = backpressure()
        holds.hold([TP0, TP1], "restoring")
        holds.hold([TP0], END_OF_RUN)
        assert consumer.paused == [TP0, TP1]  # once each, however many holds

        holds.release([TP0, TP1], first)
        assert holds.paused() == ({TP0} if first == "restoring" else {TP0, TP1})
        holds.release([TP0, TP1], second)

        assert holds.paused() == set()
        assert sorted(consumer.resumed) == [TP0, TP1]
        assert (counters.pauses, counters.resumes) == (2, 2)


def test_releasing_a_hold_that_is_not_there_changes_nothing() -> None:
    holds, consumer, _ = backpressure()
    holds.hold([TP0], "restoring")

    holds.release([TP0], "another reason")
    holds.release([TP1], "restoring")

    assert holds.paused() == {TP0}
    assert consumer.resumed == []


def test_forgotten_partitions_are_neither_paused_nor_resumed_any_more() -> None:
    holds, consumer, _ = backpressure()
    holds.hold([TP0, TP1], "restoring")

    holds.forget([TP0])
    holds.release([TP0, TP1], "restoring")

    assert holds.paused() == set()
    assert consumer.resumed == [TP1]


def test_a_task_pauses_its_inputs_at_its_bound_and_resumes_them_at_the_resume_mark() -> None:
    holds, consumer, counters = backpressure(pause_at=3, resume_at=1)
    task = make_task(Idle(), inputs=[TP0])

    task.enqueue(TP0, [raw(0, b"{}"), raw(1, b"{}")])
    holds.after_enqueue(task)
    assert holds.paused() == set()
    task.enqueue(TP0, [raw(2, b"{}")])
    holds.after_enqueue(task)
    assert holds.paused() == {TP0}
    assert counters.max_queued == 3

    task.intake.queued = 2  # as if the task had taken the rest
    holds.after_dequeue(task)
    assert holds.paused() == {TP0}
    task.intake.queued = 1  # as if the task had taken the rest
    holds.after_dequeue(task)
    assert holds.paused() == set()
    assert consumer.paused == consumer.resumed == [TP0]


def test_a_drained_queue_does_not_resume_a_partition_held_for_another_reason() -> None:
    holds, _, _ = backpressure(pause_at=1, resume_at=0)
    task = make_task(Idle(), inputs=[TP0])
    holds.hold([TP0], END_OF_RUN)
    task.enqueue(TP0, [raw(0, b"{}")])
    holds.after_enqueue(task)

    task.intake.queued = 0  # as if the task had taken the rest
    holds.after_dequeue(task)

    assert holds.paused() == {TP0}
    holds.release([TP0], END_OF_RUN)
    assert holds.paused() == set()


@pytest.mark.anyio
async def test_a_task_merging_inputs_pauses_only_those_it_has_records_of_and_never_one_it_waits_for() -> None:
    holds, _, _ = backpressure(pause_at=3, resume_at=1)
    other = TopicPartition("other", 0)
    waiting_for_other = asyncio.Event()

    def after_dequeue(task: Task) -> None:
        holds.after_dequeue(task)
        if task.queued == 2:  # 10, 11, then `other`'s 11: it waits for `other` before 12
            waiting_for_other.set()

    services = make_services(max_task_idle_s=60.0, unfetched={other}.__contains__)
    services.on_dequeue = after_dequeue
    task = make_task(Idle(), services, inputs=[TP0, other])
    task.enqueue(TP0, [raw(offset, b"{}", timestamp=10 + offset) for offset in range(4)])
    holds.after_enqueue(task)
    assert holds.paused() == {TP0}  # nothing of `other` is queued: the task may wait for it
    task.enqueue(other, [raw(0, b"{}", topic="other", timestamp=11)])
    holds.after_enqueue(task)
    assert holds.paused() == {TP0, other}

    async with running(task), asyncio.timeout(5):
        await waiting_for_other.wait()

    assert holds.paused() == {TP0}
