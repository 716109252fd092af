"""What is queued for a task, and the order it is taken in: one kind of intake per input order.

The poll loop (and the task's broadcast reader) hand over lists of records. A task with one input takes
them one list at a time, as a batch (`BatchIntake`); one with several takes them in timestamp order
across its inputs (`TimestampIntake`, `timestamp_order.py`), in runs of one partition's records; a merge
processor's task takes them as the processor chooses (`ChoiceIntake`, `choice_order.py`), one record at
a time. Each way goes through the task's record loop, and each `take` is one turn's worth: as many records
as were queued when it began, fewer when the batch is interrupted (a commit or a stop waits, a
punctuation falls due) or the order waits for an input.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition

from runtime.kafka.outputs import Outputs
from runtime.state.task_state import TaskState
from runtime.task.choice_order import ChoiceOrder
from runtime.task.commits import CommitBeforeProcessing
from runtime.task.record_loop import RecordLoop
from runtime.task.timestamp_order import TimestampOrder


class ChooseFailed(Exception):
    """A merge processor's `choose` raised `error`: the task stops, as for a failure of `init` or `close`."""

    def __init__(self, error: Exception):
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error


@dataclass(frozen=True)
class Admission:
    """Which records of a list handed over are processed, and what precedes them."""

    group_inputs: frozenset[TopicPartition]
    end_offsets: Mapping[TopicPartition, int] | None  # a bounded run's: records at or past them are not
    commit_before_processing: CommitBeforeProcessing | None  # at-most-once's

    async def admit(self, tp: TopicPartition, records: list[Any]) -> list[Any]:
        """The records of a list to be processed: a bounded run's only those below its end offsets;
        at-most-once commits the offsets of the group's inputs first."""
        end = self.end_offsets.get(tp) if self.end_offsets is not None else None
        if end is not None and records[-1].offset >= end:
            records = [raw for raw in records if raw.offset < end]
        if records and self.commit_before_processing is not None and tp in self.group_inputs:
            await self.commit_before_processing(tp, records)
        return records


class Intake(ABC):
    """The lists handed over, and a task's turn's worth of them taken through its record loop."""

    merges_inputs = False
    """Whether it takes several inputs in timestamp order (their queues are bounded together)."""
    bounds_each_input = False
    """Whether each input's queue is bounded alone, so the input a processor waits for is never paused."""

    def __init__(self, loop: RecordLoop, admission: Admission, outputs: Outputs):
        self.lists: deque[tuple[TopicPartition, list[Any]]] = deque()  # as handed over, not taken yet
        self.queued = 0
        self.busy = False
        self.stopping = False
        self._loop = loop
        self._admission = admission
        self._outputs = outputs

    def add(self, tp: TopicPartition, records: list[Any]) -> None:
        self.lists.append((tp, records))
        self.queued += len(records)

    def queued_of(self, tp: TopicPartition) -> int:
        """The records of one input queued here."""
        return sum(len(records) for queued_tp, records in self.lists if queued_tp == tp)

    def queued_inputs(self, inputs: list[TopicPartition]) -> list[TopicPartition]:
        """The inputs with records queued here."""
        return inputs if self.queued else []

    def has_work(self) -> bool:
        """Whether a turn now would take something (not when the order waits for an input)."""
        return bool(self.lists)

    def wait_ends(self) -> float | None:
        """While the order waits for an input: when it goes on without it."""
        return None

    def clear(self) -> None:
        self.lists.clear()
        self.queued = 0

    @abstractmethod
    async def take(self) -> None:
        """One turn's worth of what is queued, through the record loop."""


class BatchIntake(Intake):
    """One input: each list as it was handed over, as one batch."""

    async def take(self) -> None:
        if not self.lists:
            return
        tp, records = self.lists.popleft()
        self.busy = True
        rest: list[Any] = []
        try:
            admitted = await self._admission.admit(tp, records)
            if admitted:
                rest = await self._loop.process(tp, admitted)
            await self._outputs.flush(bool(self.lists))  # with more records queued, small batches fill on
        finally:
            self.busy = False
            if rest and not self.stopping:
                self.lists.appendleft((tp, rest))
            self.queued -= len(records) - len(rest)


class _OrderedIntake(Intake):
    """Several inputs, each with a queue of its own in `order`, which the lists handed over join."""

    def __init__(self, loop: RecordLoop, admission: Admission, outputs: Outputs, order: TimestampOrder | ChoiceOrder):
        super().__init__(loop, admission, outputs)
        self._order = order

    def queued_of(self, tp: TopicPartition) -> int:
        return self._order.queues[tp].count + super().queued_of(tp)

    def clear(self) -> None:
        super().clear()
        self._order.clear()

    async def _order_lists(self) -> int:
        """The lists handed over, admitted into the order's queues; how many records were not admitted."""
        dropped = 0
        while self.lists:
            tp, records = self.lists.popleft()
            admitted = await self._admission.admit(tp, records)
            dropped += len(records) - len(admitted)
            if admitted:
                self._order.add(tp, admitted)
        self.queued -= dropped
        return dropped


class TimestampIntake(_OrderedIntake):
    """Several inputs in timestamp order, in runs of one partition's records; a table's runs update its
    store instead of reaching the processor."""

    merges_inputs = True

    def __init__(
        self,
        loop: RecordLoop,
        admission: Admission,
        outputs: Outputs,
        order: TimestampOrder,
        state: TaskState | None,
    ):
        super().__init__(loop, admission, outputs, order)
        self._timestamps = order
        self._state = state
        # The inputs that are tables: their records update a store, never reach `process`.
        self._tables = frozenset(state.table_inputs()) if state is not None else frozenset()

    def add(self, tp: TopicPartition, records: list[Any]) -> None:
        if self.busy and not self._timestamps.queues[tp].count:
            self._loop.interrupted = True  # the run in flight ends, so that these are ordered in
        super().add(tp, records)

    def queued_inputs(self, inputs: list[TopicPartition]) -> list[TopicPartition]:
        waiting = {tp for tp, _ in self.lists}
        return [tp for tp, queue in self._timestamps.queues.items() if queue.count or tp in waiting]

    def has_work(self) -> bool:
        order = self._timestamps
        return bool(self.lists) or (bool(order.count) and order.wait_ends is None)

    def wait_ends(self) -> float | None:
        order = self._timestamps
        return order.wait_ends if order.count else None

    async def take(self) -> None:
        """Runs of records in timestamp order across the inputs, until the order has to wait for an
        input, or the batch is interrupted."""
        order, loop = self._timestamps, self._loop
        self.busy = True
        budget = self.queued
        try:
            while budget > 0 and not loop.interrupted:
                budget -= await self._order_lists()
                run = order.next_run(time.monotonic())
                if run is None:
                    break
                tp, records = run
                if tp in self._tables:
                    self._take_table_run(tp, records)
                    rest = []
                else:
                    rest = await loop.process(tp, records)
                if rest:
                    order.put_back(tp, rest)
                self.queued -= len(records) - len(rest)
                budget -= len(records) - len(rest)
            await self._outputs.flush(False)
        finally:
            self.busy = False

    def _take_table_run(self, tp: TopicPartition, records: list[Any]) -> None:
        """A table's records, in their place in timestamp order: the table then holds, for each record of
        the other inputs after them, the values as of that record's time."""
        assert self._state is not None, "a task with tables has a store for them"
        self._state.write_table(tp, records)
        self._loop.on_batch_done(tp, records[-1].offset + 1, 0)


class ChoiceIntake(_OrderedIntake):
    """A merge processor's inputs, one record at a time, as its `choose` picks them."""

    bounds_each_input = True

    def __init__(self, loop: RecordLoop, admission: Admission, outputs: Outputs, order: ChoiceOrder):
        super().__init__(loop, admission, outputs, order)
        self._choices = order
        self.choice_waits = False  # the processor chose to wait for a record not queued yet

    def has_work(self) -> bool:
        return bool(self.lists) or (bool(self._choices.count) and not self.choice_waits)

    async def take(self) -> None:
        """The records the processor chooses, one at a time, until it waits for a record not queued yet,
        or the batch is interrupted."""
        choices, loop = self._choices, self._loop
        self.busy = True
        budget = self.queued
        done: dict[TopicPartition, int] = {}  # the offset after the last record processed, of each input
        processed = 0
        try:
            await self._order_lists()
            try:
                while budget > 0 and not loop.interrupted:
                    before = choices.count
                    try:
                        chosen = choices.next()
                    except Exception as error:
                        raise ChooseFailed(error) from error
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
            await self._outputs.flush(False)
        finally:
            self.busy = False
