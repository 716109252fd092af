"""The poll loop: one consumer's fetches, handed as lists to the tasks that read each partition.

It keeps polling while partitions are paused, and a batch lets the event loop run every half second
(`runtime/task/pace.py`), so a slow processor never costs the group membership.
"""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer

from runtime.counters import Counters
from runtime.kafka.unparseable import getmany
from runtime.worker.assignment import Assignment
from runtime.worker.backpressure import Backpressure
from runtime.worker.bounded_run import BoundedRun
from runtime.worker.outcome import Outcome

POLL_TIMEOUT_MS = 100


async def poll(
    consumer: AIOKafkaConsumer,
    assignment: Assignment,
    backpressure: Backpressure,
    bounded_run: BoundedRun | None,
    outcome: Outcome,
    counters: Counters,
) -> None:
    """Until the worker stops, or a bounded run has processed every record present at its start."""
    subscribers = assignment.subscribers
    while not outcome.stopping:
        batches = await getmany(consumer, POLL_TIMEOUT_MS)
        for tp, records in batches.items():
            counters.consumed += len(records)
            for task in subscribers.get(tp, ()):
                task.enqueue(tp, records)
                backpressure.after_enqueue(task)
            if bounded_run is not None:
                bounded_run.after_fetch(tp, records)
        if bounded_run is not None and await bounded_run.finished():
            return
