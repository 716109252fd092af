"""What is queued for a task, and the order it is taken in.

The poll loop (and the task's broadcast reader) hand over lists of records. A task with one input takes
them one list at a time, as a batch; one with several takes them in timestamp order across its inputs
(`timestamp_order.py`), in runs of one partition's records; a merge processor's task takes them as the
processor chooses (`choice_order.py`), one record at a time. Each way goes through the task's record loop,
and each `take` is one turn's worth: as many records as were queued when it began, fewer when the batch
is interrupted (a commit or a stop waits, a punctuation falls due) or the order waits for an input.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiokafka import TopicPartition

from runtime.errors import StopAfterCommit
from runtime.task.choice_order import ChoiceOrder
from runtime.task.commits import CommitBeforeProcessing
from runtime.task.record_loop import RecordLoop
from runtime.task.timestamp_order import TimestampOrder

Order = TimestampOrder | ChoiceOrder | None


class Intake:
    def __init__(
        self,
        loop: RecordLoop,
        order: Order,
        group_inputs: frozenset[TopicPartition],
        end_offsets: Mapping[TopicPartition, int] | None,
        commit_before_processing: CommitBeforeProcessing | None,
        flush_outputs: Callable[[bool], Awaitable[None]],
        after_take: Callable[[], None],
        choose_failed: Callable[[Exception], StopAfterCommit],
        tables: frozenset[TopicPartition] = frozenset(),
        write_table: Callable[[TopicPartition, list[Any]], None] | None = None,
    ):
        self.lists: deque[tuple[TopicPartition, list[Any]]] = deque()  # as handed over, not ordered yet
        self.queued = 0
        self.busy = False
        self.stopping = False
        self.choice_waits = False  # the merge processor chose to wait for a record not queued yet
        self.order = order
        self._loop = loop
        self._group_inputs = group_inputs
        self._end_offsets = end_offsets
        self._commit_before_processing = commit_before_processing
        self._flush_outputs = flush_outputs
        self._after_take = after_take
        self._choose_failed = choose_failed
        self._tables = tables  # inputs that are tables: their records update a store, never reach `process`
        self._write_table = write_table

    def add(self, tp: TopicPartition, records: list[Any]) -> None:
        order = self.order
        if isinstance(order, TimestampOrder) and self.busy and not order.queues[tp].count:
            self._loop.interrupted = True  # the run in flight ends, so that these are ordered in
        # (A merge processor is asked again after each record: records that come meanwhile join their
        # queue at the next choice.)
        self.lists.append((tp, records))
        self.queued += len(records)

    def queued_of(self, tp: TopicPartition) -> int:
        """The records of one input queued here."""
        queued = self.order.queues[tp].count if self.order is not None else 0
        return queued + sum(len(records) for queued_tp, records in self.lists if queued_tp == tp)

    def queued_inputs(self, inputs: list[TopicPartition]) -> list[TopicPartition]:
        """The inputs with records queued here."""
        if not isinstance(self.order, TimestampOrder):
            return inputs if self.queued else []
        waiting = {tp for tp, _ in self.lists}
        return [tp for tp, queue in self.order.queues.items() if queue.count or tp in waiting]

    def has_work(self) -> bool:
        """Whether a turn now would take something (not when the order waits for an input)."""
        order = self.order
        if self.lists:
            return True
        if isinstance(order, TimestampOrder):
            return bool(order.count) and order.wait_ends is None
        if isinstance(order, ChoiceOrder):
            return bool(order.count) and not self.choice_waits
        return False

    def wait_ends(self) -> float | None:
        """While a timestamp order waits for an input: when it goes on without it."""
        order = self.order
        if isinstance(order, TimestampOrder) and order.count:
            return order.wait_ends
        return None

    def clear(self) -> None:
        self.lists.clear()
        if self.order is not None:
            self.order.clear()
        self.queued = 0

    async def take(self) -> None:
        order = self.order
        if isinstance(order, ChoiceOrder):
            await self._take_choices(order)
        elif isinstance(order, TimestampOrder):
            await self._take_runs(order)
        elif self.lists:
            await self._take_batch()

    async def _take_batch(self) -> None:
        tp, records = self.lists.popleft()
        self.busy = True
        rest: list[Any] = []
        try:
            admitted = await self._admit(tp, records)
            if admitted:
                rest = await self._loop.process(tp, admitted)
            await self._flush_outputs(bool(self.lists))  # with more records queued, small batches fill on
        finally:
            self.busy = False
            if rest and not self.stopping:
                self.lists.appendleft((tp, rest))
            self.queued -= len(records) - len(rest)
            self._after_take()

    async def _take_runs(self, merge: TimestampOrder) -> None:
        """Runs of records in timestamp order across the inputs, until the order has to wait for an
        input, or the batch is interrupted."""
        self.busy = True
        budget = self.queued
        try:
            while budget > 0 and not self._loop.interrupted:
                budget -= await self._order_lists(merge)
                run = merge.next_run(time.monotonic())
                if run is None:
                    break
                tp, records = run
                if tp in self._tables:
                    self._take_table_run(tp, records)
                    rest = []
                else:
                    rest = await self._loop.process(tp, records)
                if rest:
                    merge.put_back(tp, rest)
                self.queued -= len(records) - len(rest)
                budget -= len(records) - len(rest)
            await self._flush_outputs(False)
        finally:
            self.busy = False
            self._after_take()

    def _take_table_run(self, tp: TopicPartition, records: list[Any]) -> None:
        """A table's records, in their place in timestamp order: the table then holds, for each record of
        the other inputs after them, the values as of that record's time."""
        assert self._write_table is not None, "a task with tables has a store for them"
        self._write_table(tp, records)
        self._loop.on_batch_done(tp, records[-1].offset + 1, 0)

    async def _take_choices(self, choices: ChoiceOrder) -> None:
        """The records the processor chooses, one at a time, until it waits for a record not queued yet,
        or the batch is interrupted."""
        self.busy = True
        budget, loop = self.queued, self._loop
        done: dict[TopicPartition, int] = {}  # the offset after the last record processed, of each input
        processed = 0
        try:
            await self._order_lists(choices)
            try:
                while budget > 0 and not loop.interrupted:
                    before = choices.count
                    try:
                        chosen = choices.next()
                    except Exception as error:
                        raise self._choose_failed(error) from error
                    taken = before - choices.count  # the chosen record, and undecodable heads (to the policy)
                    self.queued -= taken
                    budget -= taken
                    if choices.passed:
                        for passed in choices.passed:
                            done[TopicPartition(passed.topic, passed.partition)] = passed.offset + 1
                        choices.passed.clear()
                    if chosen is None:
                        self.choice_waits = True
                        break
                    self.choice_waits = False
                    tp, raw, record = chosen
                    processed += await loop.process_chosen(raw, record)
                    done[tp] = raw.offset + 1
            finally:
                for tp, offset in done.items():  # offsets and outputs once per turn, as the batch loops do
                    loop.on_batch_done(tp, offset, processed)
                    processed = 0
            await self._flush_outputs(False)
        finally:
            self.busy = False
            self._after_take()

    async def _order_lists(self, order: TimestampOrder | ChoiceOrder) -> int:
        """The lists handed over, admitted into the order's queues; how many records were not admitted."""
        dropped = 0
        while self.lists:
            tp, records = self.lists.popleft()
            admitted = await self._admit(tp, records)
            dropped += len(records) - len(admitted)
            if admitted:
                order.add(tp, admitted)
        self.queued -= dropped
        return dropped

    async def _admit(self, tp: TopicPartition, records: list[Any]) -> list[Any]:
        """The records of a list to be processed: a bounded run's only those below its end offsets;
        at-most-once commits the offsets of the group's inputs first."""
        end = self._end_offsets.get(tp) if self._end_offsets is not None else None
        if end is not None and records[-1].offset >= end:
            records = [raw for raw in records if raw.offset < end]
        if records and self._commit_before_processing is not None and tp in self._group_inputs:
            await self._commit_before_processing(tp, records)
        return records
