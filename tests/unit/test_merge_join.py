"""Seed 001's one-to-many merge join on the engine's real task, without a broker: rows of one data partition
and the transactions they belong to arrive in random interleavings and chunks, each input's queue
bounded on its own (pausing and resuming it as the poll loop would), and the joined rows must equal a
plain-Python join of the whole input."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest
from aiokafka import TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.joins import MergeJoin
from processors.joins.merge_join import UNMATCHED
from runtime.config import QueueConfig
from runtime.counters import Counters
from runtime.task.assembly import build_task
from runtime.task.task import Task, TaskId
from runtime.worker.backpressure import Backpressure
from tests.support.engine_fakes import IN, OUT, FakeConsumer, FakeOutputs, make_services, raw, running

DATA, TRANSACTIONS = TopicPartition(IN, 0), TopicPartition("other", 0)
PARAMS = {"data": IN, "transactions": "other", "data_id": "tx", "transaction_id": "id", "output": OUT}

Row = tuple[int, int]  # (transaction id, row number)


def row_value(row: Row) -> dict[str, Any]:
    return {"tx": row[0], "row": row[1]}


def transaction_value(tx: int) -> dict[str, Any]:
    return {"id": tx, "lsn": tx * 10}


@st.composite
def transactions_and_rows(draw: st.DrawFn) -> tuple[list[int], list[Row]]:
    """Transactions in id order (gaps allowed), each with 0 to 5 rows in this data partition, in order."""
    ids = sorted(draw(st.sets(st.integers(1, 200), min_size=1, max_size=25)))
    rows = [(tx, n) for tx in ids for n in range(draw(st.integers(0, 5)))]
    return ids, rows


class Merge:
    """A task of `MergeJoin` fed as the poll loop and the broadcast reader would feed it, under bounds."""

    def __init__(self, pause_at: int, resume_at: int):
        self.consumer = FakeConsumer()
        self.holds = Backpressure(self.consumer, QueueConfig(pause_at=pause_at, resume_at=resume_at), Counters())
        services = make_services()
        dequeues = services.on_dequeue

        self.turn_ended = asyncio.Event()

        def after_dequeue(task: Task) -> None:
            self.holds.after_dequeue(task)
            dequeues(task)
            self.turn_ended.set()

        services.on_dequeue = after_dequeue
        self.outputs = FakeOutputs()
        self.task = build_task(TaskId("join", 0), MergeJoin(), "app", PARAMS, frozenset({OUT}), [DATA, TRANSACTIONS],
                               self.outputs.as_outputs(), services, None)  # fmt: skip
        self.services = services

    def deliver(self, tp: TopicPartition, records: list[Any]) -> None:
        self.task.enqueue(tp, records)
        self.holds.after_enqueue(self.task)

    def paused(self, tp: TopicPartition) -> bool:
        return tp in self.holds.paused()

    def joined(self) -> list[Any]:
        return [json.loads(value) for topic, _, value in self.outputs.appended if topic == OUT]


async def run_merge(ids: list[int], rows: list[Row], pause_at: int, resume_at: int, moves: list[tuple[int, int]]
                    ) -> Merge:  # fmt: skip
    """Each move delivers up to `size` records of the input `which` names (0: data, 1: transactions), when
    it is not paused, or lets the task run (2); then the rest, as fetching allows."""
    merge = Merge(pause_at, resume_at)
    waiting = {
        DATA: [raw(offset, json.dumps(row_value(row)).encode(), IN) for offset, row in enumerate(rows)],
        TRANSACTIONS: [raw(offset, json.dumps(transaction_value(tx)).encode(), "other") for offset, tx in
                       enumerate(ids)],
    }  # fmt: skip
    async with running(merge.task):

        async def step(tp: TopicPartition | None, size: int) -> None:
            if tp is not None and waiting[tp] and not merge.paused(tp):
                merge.deliver(tp, waiting[tp][:size])
                del waiting[tp][:size]
            await asyncio.sleep(0)

        for which, size in moves:
            await step([DATA, TRANSACTIONS, None][which], size)
        # Then until every row is joined; transactions no row is left for may stay queued (and paused).
        for _ in range(10 * (len(rows) + len(ids)) + 100):
            if merge.task.next_offsets.get(DATA, 0) == len(rows):
                break
            await step(DATA, 7)
            await step(TRANSACTIONS, 3)
        else:
            raise AssertionError(f"stuck: {len(waiting[DATA])} rows and {len(waiting[TRANSACTIONS])} transactions "
                                 f"not taken, {merge.holds.paused()} paused")  # fmt: skip
    return merge


async def until_taken(merge: Merge, rows: int) -> None:
    """Until the task took `rows` data rows (it runs in the same event loop: each pass lets it go on)."""
    async with asyncio.timeout(5):
        while merge.task.next_offsets.get(DATA, 0) < rows:
            merge.turn_ended.clear()
            await merge.turn_ended.wait()


@settings(max_examples=120, deadline=None)
@given(
    data=transactions_and_rows(),
    bounds=st.tuples(st.integers(1, 6), st.integers(0, 5)).filter(lambda b: b[1] < b[0]),
    moves=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 6)), max_size=80),
)
def test_every_row_is_joined_with_its_transaction_whatever_the_interleaving_and_bounds(
    data: tuple[list[int], list[Row]], bounds: tuple[int, int], moves: list[tuple[int, int]]
) -> None:
    ids, rows = data
    merge = asyncio.run(run_merge(ids, rows, *bounds, moves))
    by_id = {tx: transaction_value(tx) for tx in ids}
    assert merge.joined() == [{"data": row_value(row), "transaction": by_id[row[0]]} for row in rows]


def test_both_queues_pause_at_their_bound_and_resume_and_the_join_goes_through() -> None:
    ids = list(range(1, 41))
    rows = [(tx, n) for tx in ids for n in range(3)]
    data_first = [(0, 10)] * 20  # the rows fill their queue before any transaction comes
    merge = asyncio.run(run_merge(ids, rows, 4, 1, data_first + [(1, 10)] * 20))
    assert merge.consumer.paused.count(DATA) > 1 and merge.consumer.paused.count(TRANSACTIONS) > 1
    assert Counter(merge.consumer.paused) == Counter(merge.consumer.resumed)
    assert len(merge.joined()) == len(rows)


def test_rows_sent_again_after_their_transaction_passed_go_unmatched_and_do_not_block_the_join() -> None:
    """Seed 001's duplicates: the connector restarted after row B1 and sent A1, A's commit and B1 again."""
    ids = [1, 1, 2]  # A's commit twice, then B's
    rows = [(1, 1), (2, 1), (1, 1), (2, 1)]
    merge = asyncio.run(run_merge(ids, rows, 100, 10, []))
    a, b = transaction_value(1), transaction_value(2)
    assert merge.joined() == [
        {"data": row_value((1, 1)), "transaction": a},
        {"data": row_value((2, 1)), "transaction": b},
        {"data": row_value((2, 1)), "transaction": b},  # B's commit was still the head: joined again
    ]
    assert merge.services.counters.by_processor["join"][UNMATCHED] == 1  # the second A1


@pytest.mark.parametrize("broken", ["row", "transaction"])
def test_a_record_without_its_id_goes_to_the_error_policy_and_the_join_goes_on(broken: str) -> None:
    merge = Merge(100, 10)
    rows = [{"tx": 1, "row": 0}, {"row": 1} if broken == "row" else {"tx": 2, "row": 1}, {"tx": 2, "row": 2}]
    transactions = [{"id": 1}, {"lsn": 5} if broken == "transaction" else {"id": 2}, {"id": 2}]

    async def go() -> None:
        async with running(merge.task):
            merge.deliver(DATA, [raw(n, json.dumps(v).encode(), IN) for n, v in enumerate(rows)])
            merge.deliver(TRANSACTIONS, [raw(n, json.dumps(v).encode(), "other") for n, v in enumerate(transactions)])
            await until_taken(merge, 3)

    asyncio.run(go())
    assert [joined["data"]["row"] for joined in merge.joined()] == ([0, 2] if broken == "row" else [0, 1, 2])
    assert merge.services.counters.skipped == 1


def test_a_row_that_cannot_be_decoded_goes_to_the_policy_at_the_head_and_its_offset_is_passed() -> None:
    merge = Merge(100, 10)
    rows = [json.dumps({"tx": 1, "row": 0}).encode(), b"{not json", json.dumps({"tx": 1, "row": 2}).encode()]

    async def go() -> None:
        async with running(merge.task):
            merge.deliver(TRANSACTIONS, [raw(0, json.dumps({"id": 1}).encode(), "other")])
            merge.deliver(DATA, [raw(n, value, IN) for n, value in enumerate(rows)])
            await until_taken(merge, 3)

    asyncio.run(go())
    assert [joined["data"]["row"] for joined in merge.joined()] == [0, 2]
    assert merge.services.counters.skipped == 1
    assert merge.task.next_offsets[DATA] == 3
