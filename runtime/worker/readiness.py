"""What keeps a worker from being ready, in words: the `/ready` endpoint's reasons and the readiness metric.

A worker is ready once it has bootstrapped its global stores, got its partitions, and restored the
stores of its tasks, while Kafka is reachable and it is not stopping. It is read from the health
server's and the metrics exporter's threads, so it only reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from runtime.kafka.outages import OUTAGES
from runtime.task.task import Task, TaskPhase
from runtime.worker.outcome import Outcome

CONNECTING = "connecting to Kafka"
BOOTSTRAPPING = "bootstrapping the global stores"
JOINING = "waiting for partitions from the consumer group"


class Readiness:
    def __init__(self, outcome: Outcome, assigned: asyncio.Event):
        self._outcome = outcome
        self._assigned = assigned
        self.phase = CONNECTING  # until partitions are first assigned
        self.tasks: Callable[[], Iterable[Task]] = tuple
        self.records_to_restore: Callable[[], int] = lambda: 0

    @property
    def ready(self) -> bool:
        return not self.reasons()

    def reasons(self) -> list[str]:
        if self._outcome.stopping:
            return ["stopping"]
        reasons = []
        if not self._assigned.is_set():
            reasons.append(self.phase)
        starting = [task for task in list(self.tasks()) if task.phase in (TaskPhase.CREATED, TaskPhase.RESTORING)]
        if starting:
            reasons.append(
                f"restoring the stores of {len(starting)} tasks ({self.records_to_restore()} changelog records left)"
            )
        if OUTAGES.since is not None:
            reasons.append(f"Kafka unreachable for {OUTAGES.unreachable_for():.0f} s")
        return reasons
