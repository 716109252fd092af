"""Pause a partition's fetching while anything holds it, and resume it when the last hold is released.

Holds: a task whose queue reached its bound (released at the resume mark), a task still restoring
its stores, and the end of a bounded (`--until-caught-up`) run. The poll loop keeps polling while
partitions are paused, so however slow a processor is, the consumer keeps its group membership.

A task that orders several inputs by timestamp may wait for one it has nothing queued of: its queue
bound pauses only the inputs it has records of, and lets go of each as it runs out of them. A merge
processor's task, and one with broadcast inputs, bounds each input's queue on its own: a full queue
pauses its input alone, so the input the processor waits for is always fetched (its broadcast inputs
are paused the same way by their own reader).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Hashable, Iterable

from aiokafka import AIOKafkaConsumer, TopicPartition

from runtime.config import QueueConfig
from runtime.counters import Counters
from runtime.task.task import Task

log = logging.getLogger(__name__)

END_OF_RUN = "end of run"


class Backpressure:
    def __init__(self, consumer: AIOKafkaConsumer, bounds: QueueConfig, counters: Counters):
        self._consumer = consumer
        self._bounds = bounds
        self._counters = counters
        self._holds: dict[TopicPartition, set[Hashable]] = defaultdict(set)

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, holds in self._holds.items() if holds}

    def hold(self, tps: Iterable[TopicPartition], reason: Hashable) -> None:
        for tp in tps:
            holds = self._holds[tp]
            if not holds:
                self._consumer.pause(tp)
                self._counters.pauses += 1
                log.debug("paused %s (%s)", tp, reason)
            holds.add(reason)

    def release(self, tps: Iterable[TopicPartition], reason: Hashable) -> None:
        for tp in tps:
            holds = self._holds.get(tp)
            if not holds or reason not in holds:
                continue
            holds.discard(reason)
            if not holds:
                self._consumer.resume(tp)
                self._counters.resumes += 1
                log.debug("resumed %s", tp)

    def after_enqueue(self, task: Task) -> None:
        self._counters.max_queued = max(self._counters.max_queued, task.queued)
        if task.bounds_each_input:
            self.hold([tp for tp in task.inputs if task.queued_of(tp) >= self._bounds.pause_at], task.id)
        elif task.queued >= self._bounds.pause_at:
            self.hold(task.queued_inputs(), task.id)

    def after_dequeue(self, task: Task) -> None:
        if task.bounds_each_input:
            self.release([tp for tp in task.inputs if task.queued_of(tp) <= self._bounds.resume_at], task.id)
        elif task.queued <= self._bounds.resume_at:
            self.release(task.inputs, task.id)
        elif task.merges_inputs:
            queued = task.queued_inputs()
            self.release([tp for tp in task.inputs if tp not in queued], task.id)

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        """Revoked partitions: no longer ours to pause or resume."""
        for tp in tps:
            self._holds.pop(tp, None)
