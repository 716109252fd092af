"""Pause a partition's fetching when a task's queue reaches its bound; resume at the resume mark.

The poll loop keeps polling while partitions are paused, so however slow a processor is, the
consumer keeps its group membership (no rebalance storms).
"""

from __future__ import annotations

import logging
from collections import defaultdict

from aiokafka import AIOKafkaConsumer, TopicPartition

from runtime.config import QueueConfig
from runtime.counters import Counters
from runtime.task import Task, TaskId

log = logging.getLogger(__name__)


class Backpressure:
    def __init__(self, consumer: AIOKafkaConsumer, bounds: QueueConfig, counters: Counters):
        self._consumer = consumer
        self._bounds = bounds
        self._counters = counters
        self._holders: dict[TopicPartition, set[TaskId]] = defaultdict(set)
        self._held_for_good: set[TopicPartition] = set()

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, holders in self._holders.items() if holders} | self._held_for_good

    def after_enqueue(self, task: Task) -> None:
        self._counters.max_queued = max(self._counters.max_queued, task.queued)
        if task.queued < self._bounds.pause_at:
            return
        for tp in task.inputs:
            holders = self._holders[tp]
            if not holders and tp not in self._held_for_good:
                self._consumer.pause(tp)
                self._counters.pauses += 1
                log.debug("paused %s: task %s holds %d records", tp, task.id, task.queued)
            holders.add(task.id)

    def after_dequeue(self, task: Task) -> None:
        if task.queued > self._bounds.resume_at:
            return
        for tp in task.inputs:
            holders = self._holders.get(tp)
            if not holders or task.id not in holders:
                continue
            holders.discard(task.id)
            if not holders and tp not in self._held_for_good:
                self._consumer.resume(tp)
                self._counters.resumes += 1
                log.debug("resumed %s", tp)

    def hold(self, tp: TopicPartition) -> None:
        """Stop fetching `tp` for good (it reached the end of a bounded run)."""
        if tp not in self._held_for_good and not self._holders.get(tp):
            self._consumer.pause(tp)
        self._held_for_good.add(tp)

    def forget(self, tps: set[TopicPartition]) -> None:
        """Revoked partitions: no longer ours to pause or resume."""
        for tp in tps:
            self._holders.pop(tp, None)
            self._held_for_good.discard(tp)
