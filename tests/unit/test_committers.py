"""Step 2 of the commit protocol, one committer per guarantee, with fake Kafka clients."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import (
    CommitFailedError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaTimeoutError,
    ProducerFenced,
)

from processors.context import Context
from processors.processor import Processor
from processors.record import Record
from runtime.config.telemetry import TelemetryConfig
from runtime.counters import Counters
from runtime.errors import StopWithoutCommit, TaskLost
from runtime.guarantees.consumer_commits import AtLeastOnce, AtMostOnce
from runtime.guarantees.transactions import ExactlyOnce
from runtime.task.commits import TaskCommit
from runtime.task.task import Task, TaskPhase
from runtime.telemetry import Telemetry
from tests.support.engine_fakes import (
    IN,
    OUT,
    FakeConsumer,
    FakeOutputs,
    FakeState,
    fake_outputs,
    make_services,
    make_task,
    raw,
    until_idle,
)

pytestmark = pytest.mark.anyio

TP0, TP1 = TopicPartition(IN, 0), TopicPartition(IN, 1)
OFF = Telemetry(TelemetryConfig(), "app")


class Forward(Processor):
    """Sends each record on, and notes the offsets the group had committed when it saw the record."""

    def __init__(self, consumer: FakeConsumer | None = None):
        self.consumer = consumer
        self.committed_when_processed: list[list[dict[TopicPartition, int]]] = []

    def process(self, record: Record, ctx: Context) -> None:
        if self.consumer is not None:
            self.committed_when_processed.append(list(self.consumer.commits))
        ctx.send(OUT, record.value)


def task_commit(offsets: dict[TopicPartition, int], task: Task | None = None) -> TaskCommit:
    return TaskCommit(task if task is not None else make_task(Forward()), offsets)


# At-least-once


def at_least_once(consumer: FakeConsumer, outputs: FakeOutputs, counters: Counters) -> AtLeastOnce:
    return AtLeastOnce(consumer, outputs.as_outputs(), counters, OFF)


async def test_at_least_once_commits_offsets_after_the_outputs_are_acknowledged_and_only_those_changed() -> None:
    log: list[str] = []
    consumer, outputs, counters = FakeConsumer(log), FakeOutputs(log), Counters()
    committer = at_least_once(consumer, outputs, counters)
    first, second = task_commit({TP0: 5}), task_commit({TP1: 3})

    committed = await committer.commit([first, second])
    await committer.commit([task_commit({TP0: 5}), task_commit({TP1: 4})])
    await committer.commit([task_commit({TP0: 5}), task_commit({TP1: 4})])

    assert committed.durable == [first, second] and committed.lost == []
    assert consumer.commits == [{TP0: 5, TP1: 3}, {TP1: 4}]
    assert log == ["wait_acked", "consumer commit"] * 2 + ["wait_acked"]
    assert counters.commits == 2


@pytest.mark.parametrize(
    "error", [CommitFailedError(), IllegalStateError("no longer assigned"), KafkaConnectionError()]
)
async def test_a_rejected_offset_commit_is_counted_not_raised_and_retried_next_time(error: Exception) -> None:
    consumer, counters = FakeConsumer(), Counters()
    committer = at_least_once(consumer, FakeOutputs(), counters)
    consumer.commit_failure = error

    await committer.commit([task_commit({TP0: 5})])
    await committer.commit([task_commit({TP0: 5})])

    assert consumer.commits == [{TP0: 5}]  # not taken for committed by the failed attempt
    assert (counters.failed_commits, counters.commits) == (1, 1)


async def test_at_least_once_stops_without_commit_when_outputs_failed() -> None:
    consumer, outputs = FakeConsumer(), FakeOutputs()
    outputs.ack_failure = KafkaTimeoutError("batch expired")
    committer = at_least_once(consumer, outputs, Counters())

    with pytest.raises(StopWithoutCommit, match="producing outputs failed: KafkaTimeoutError"):
        await committer.commit([task_commit({TP0: 5})])

    assert consumer.commits == []


# At-most-once


async def test_at_most_once_commits_a_batch_before_processing_it_and_not_again_at_commit() -> None:
    consumer, outputs, counters = FakeConsumer(), FakeOutputs(), Counters()
    committer = AtMostOnce(consumer, outputs.as_outputs(), counters, OFF)
    processor = Forward(consumer)
    task = make_task(processor, make_services(commit_before_processing=committer.commit_before_processing))
    task.enqueue(TP0, [raw(offset, b"{}") for offset in (7, 8)])
    actor = asyncio.create_task(task.run())
    await until_idle(task)
    task.request_stop()
    await actor

    committed = await committer.commit([task_commit(dict(task.next_offsets), task)])

    assert processor.committed_when_processed == [[{TP0: 9}], [{TP0: 9}]]
    assert consumer.commits == [{TP0: 9}]
    assert [c.task for c in committed.durable] == [task]


# Exactly-once

GROUP = "custom-group"


def exactly_once(consumer: FakeConsumer, counters: Counters, *tasks: Task, from_latest: bool = False) -> ExactlyOnce:
    """The committer, owning the producers of `tasks`: each task was built with the outputs `outputs_for`
    made, through a producer with the task's transactional id."""
    producers = {f"app-{task.id.processor}-{task.id.partition}": task.outputs for task in tasks}
    committer = ExactlyOnce(consumer, "app", GROUP, from_latest, counters, OFF, producers.__getitem__)
    for task in tasks:
        assert committer.outputs_for(task.id) is task.outputs
    return committer


def transactional_task(log: list[str] | None = None, state: FakeState | None = None, name: str = "p") -> Task:
    task = make_task(Forward(), outputs=FakeOutputs(log), state=state, inputs=[TP0, TP1], name=name)
    task.phase = TaskPhase.RUNNING
    return task


def producer_calls(task: Task) -> list[tuple[str, Any]]:
    return fake_outputs(task).producer.calls


async def claimed(consumer: FakeConsumer, counters: Counters, *tasks: Task) -> ExactlyOnce:
    consumer.committed_offsets = {TP0: 10, TP1: 20}
    committer = exactly_once(consumer, counters, *tasks)
    for task in tasks:
        await committer.claim(task)
        producer_calls(task).clear()
    consumer.seeks.clear()
    return committer


async def test_a_claim_fences_the_previous_owner_begins_and_moves_the_task_to_its_committed_offsets() -> None:
    consumer = FakeConsumer()
    consumer.committed_offsets = {TP0: 10}
    consumer.beginnings = {TP1: 3}
    task = transactional_task()
    task.enqueue(TP0, [raw(4, b"{}")])  # fetched before the claim, from a position the last owner moved past

    await exactly_once(consumer, Counters(), task).claim(task)

    assert fake_outputs(task).producer.names() == ["start", "begin_transaction"]
    assert consumer.seeks == [(TP0, 10), (TP1, 3)]
    assert task.next_offsets == {TP0: 10, TP1: 3}
    assert task.queued == 0


async def test_a_claim_without_committed_offsets_starts_at_the_end_when_reading_from_latest() -> None:
    consumer = FakeConsumer()
    consumer.ends = {TP0: 50, TP1: 60}
    task = transactional_task()

    await exactly_once(consumer, Counters(), task, from_latest=True).claim(task)

    assert task.next_offsets == {TP0: 50, TP1: 60}


async def test_a_claim_fenced_by_a_newer_owner_loses_the_task() -> None:
    counters = Counters()
    task = transactional_task()
    fake_outputs(task).producer.failures["start"] = ProducerFenced()

    with pytest.raises(TaskLost, match=r"task p\[0\] was taken over by another worker"):
        await exactly_once(FakeConsumer(), counters, task).claim(task)

    assert counters.fenced_tasks == 1


async def test_a_commit_sends_the_changed_offsets_to_the_consumer_group_and_begins_the_next_transaction() -> None:
    consumer, counters = FakeConsumer(), Counters()
    task = transactional_task()
    committer = await claimed(consumer, counters, task)
    fake_outputs(task).append(OUT, None, b"{}")
    done = task_commit({TP0: 12, TP1: 20}, task)

    committed = await committer.commit([done])

    assert producer_calls(task) == [
        ("send_offsets_to_transaction", ({TP0: 12}, GROUP)),  # the consumer's group, not the app id's
        ("commit_transaction", None),
        ("begin_transaction", None),
    ]
    assert fake_outputs(task).sent == 1  # the outputs went out inside the transaction
    assert committed.durable == [done]
    assert counters.commits == 1


async def test_a_task_with_nothing_new_is_not_committed() -> None:
    consumer, counters = FakeConsumer(), Counters()
    task = transactional_task()
    committer = await claimed(consumer, counters, task)

    committed = await committer.commit([task_commit({TP0: 10, TP1: 20}, task)])

    assert producer_calls(task) == []
    assert committed.durable == [] and committed.lost == []  # nothing to flush to the stores either
    assert counters.commits == 0


async def test_a_task_with_only_store_writes_is_committed() -> None:
    consumer, counters = FakeConsumer(), Counters()
    state = FakeState("p", [])
    task = transactional_task(state=state)
    committer = await claimed(consumer, counters, task)
    state.has_unflushed_writes = True

    committed = await committer.commit([task_commit({TP0: 10, TP1: 20}, task)])

    assert [name for name, _ in producer_calls(task)] == ["commit_transaction", "begin_transaction"]
    assert len(committed.durable) == 1


async def test_a_failed_transaction_is_aborted_and_its_work_redone_from_the_committed_offsets() -> None:
    consumer, counters = FakeConsumer(), Counters()
    state = FakeState("p", [])
    task = transactional_task(state=state)
    committer = await claimed(consumer, counters, task)
    task.next_offsets = {TP0: 15, TP1: 20}
    fake_outputs(task).producer.failures["commit_transaction"] = KafkaConnectionError()

    committed = await committer.commit([task_commit({TP0: 15, TP1: 20}, task)])

    assert [name for name, _ in producer_calls(task)] == [
        "send_offsets_to_transaction", "commit_transaction", "abort_transaction", "begin_transaction",
    ]  # fmt: skip
    assert committed.durable == [] and committed.lost == []
    assert consumer.seeks == [(TP0, 10), (TP1, 20)]
    assert task.next_offsets == {TP0: 10, TP1: 20}
    assert state.discarded
    assert (counters.aborted_transactions, counters.commits) == (1, 0)


@pytest.mark.parametrize("fenced_at", ["commit", "abort"])
async def test_a_fenced_commit_loses_the_task(fenced_at: str) -> None:
    consumer, counters = FakeConsumer(), Counters()
    task = transactional_task()
    committer = await claimed(consumer, counters, task)
    failures = fake_outputs(task).producer.failures
    if fenced_at == "commit":
        failures["commit_transaction"] = ProducerFenced()
    else:  # the commit failed, and the abort that follows finds the task fenced
        failures["commit_transaction"] = KafkaConnectionError()
        failures["abort_transaction"] = ProducerFenced()

    committed = await committer.commit([task_commit({TP0: 11, TP1: 20}, task)])
    again = await committer.commit([task_commit({TP0: 12, TP1: 20}, task)])

    assert committed.lost == [task] and committed.durable == []
    assert again.lost == [task]  # forgotten: it never commits again
    assert counters.fenced_tasks == 1
    assert fake_outputs(task).producer.names()[-1] == (
        "commit_transaction" if fenced_at == "commit" else "abort_transaction"
    )


async def test_release_aborts_only_a_transaction_with_work_in_it() -> None:
    consumer, counters = FakeConsumer(), Counters()
    clean, dirty = transactional_task(name="clean"), transactional_task(name="dirty")
    committer = await claimed(consumer, counters, clean, dirty)
    fake_outputs(dirty).append(OUT, None, b"{}")

    await committer.release(clean)
    await committer.release(dirty)

    assert fake_outputs(clean).producer.names() == ["stop"]
    assert fake_outputs(dirty).producer.names() == ["abort_transaction", "stop"]
    assert fake_outputs(dirty).discarded == 1
    assert counters.aborted_transactions == 1
