"""`--until-caught-up`: process the records present at start, commit, and stop.

The end offsets are read once, at start. A partition is done when every task reading it has
processed up to its end (or the consumer's position passed it: the gap is compaction or transaction
markers); a partition another member holds is done when its committed offset reached the end. An
input this app also writes (one stage feeding the next) may grow meanwhile: once the outputs so far
are committed, its new end becomes the end of the run.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from runtime.config import AppConfig
from runtime.guarantees.commit import CommitCycle
from runtime.worker.assignment import Assignment
from runtime.worker.backpressure import END_OF_RUN, Backpressure

log = logging.getLogger(__name__)

CHECK_EVERY_S = 0.2


class BoundedRun:
    def __init__(
        self,
        config: AppConfig,
        consumer: AIOKafkaConsumer,
        end_offsets: dict[TopicPartition, int],
        backpressure: Backpressure,
        assignment: Assignment,
        commit_cycle: CommitCycle,
    ):
        self.end_offsets = end_offsets  # the tasks share this mapping
        self._config = config
        self._consumer = consumer
        self._backpressure = backpressure
        self._assignment = assignment
        self._commit_cycle = commit_cycle
        self._finished_elsewhere: set[TopicPartition] = set()
        self._last_check = 0.0

    def after_fetch(self, tp: TopicPartition, records: list[Any]) -> None:
        """Fetching a partition stops once its end is reached."""
        if records[-1].offset + 1 >= self.end_offsets.get(tp, 0):
            self._backpressure.hold([tp], END_OF_RUN)

    async def finished(self) -> bool:
        """Checked after every poll, at most every CHECK_EVERY_S."""
        if time.monotonic() - self._last_check < CHECK_EVERY_S:
            return False
        self._last_check = time.monotonic()
        if await self._caught_up() and not await self._internal_inputs_grew():
            log.info("caught up with the end offsets present at start")
            return True
        return False

    async def _caught_up(self) -> bool:
        """Every input partition, ours or not, is processed up to the end offsets taken at start."""
        assignment = self._consumer.assignment()
        if not assignment or not self._assignment.ready.is_set():
            return False
        for tp in assignment:
            end = self.end_offsets.get(tp, 0)
            tasks = self._assignment.subscribers.get(tp, [])
            # A task in a commit may yet go back to its last committed offsets (an aborted transaction).
            if not tasks or not all(task.idle and task.running and not task.turn.locked() for task in tasks):
                return False
            if all(task.next_offsets.get(tp, -1) >= end for task in tasks):
                continue
            position = await self._consumer.position(tp)
            if position >= end:
                for task in tasks:
                    task.mark_caught_up(tp, end)
                continue
            self._backpressure.release([tp], END_OF_RUN)  # gone back since its end was fetched: fetch again
            return False
        # Partitions another member holds (or a crashed one still holds until its session expires).
        for tp, end in self.end_offsets.items():
            if tp not in assignment and tp not in self._finished_elsewhere:
                committed = await self._consumer.committed(tp)
                if committed is None or committed < end:
                    return False
                self._finished_elsewhere.add(tp)
        return True

    async def _internal_inputs_grew(self) -> bool:
        internal = {topic for spec in self._config.processors for topic in spec.outputs} & set(
            self._config.input_topics()
        )
        if not internal:
            return False
        await self._commit_cycle.commit(list(self._assignment.tasks.values()))  # what they wrote so far
        tps = [tp for tp in self.end_offsets if tp.topic in internal]
        ends = await self._consumer.end_offsets(tps)
        grown = {tp: end for tp, end in ends.items() if end > self.end_offsets[tp]}
        if not grown:
            return False
        for tp in grown:  # records fetched past the old end were dropped: fetch them again
            if tp in self._consumer.assignment():
                self._consumer.seek(tp, self.end_offsets[tp])
        self.end_offsets.update(grown)
        self._finished_elsewhere -= set(grown)
        self._backpressure.release(grown, END_OF_RUN)
        log.info("inputs written by this app grew during the run: going on to %s", grown)
        return True
