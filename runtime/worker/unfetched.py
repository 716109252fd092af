"""Whether Kafka holds records of a partition that the consumer has not handed over yet: what a task
ordering several inputs by timestamp waits for, up to `max_task_idle_ms`, when it has none of one.

The consumer's position is the offset after the last record `getmany()` handed over (past transaction
markers and aborted records too), and the end is the high watermark of the last fetch response: the
records of a transaction still open count, as they are read once it commits. aiokafka offers the
position only through an `async` call that waits when it is unknown, so it is read from the
consumer's partition state (runtime/kafka/aiokafka_internals.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from aiokafka import AIOKafkaConsumer, TopicPartition

from runtime.kafka.aiokafka_internals import position_and_highwater


class Unfetched:
    """Called with an input partition; `run_ends` are a bounded run's end offsets, past which nothing is
    waited for."""

    def __init__(self, consumer: AIOKafkaConsumer, run_ends: Mapping[TopicPartition, int] | None):
        self._consumer = consumer
        self._run_ends = run_ends

    def __call__(self, tp: TopicPartition) -> bool:
        """True also while the position or the end is not known yet (the partition was not fetched)."""
        known = position_and_highwater(self._consumer, tp)
        if known is None:
            return False  # not assigned (any more): there is nothing to wait for
        position, end = known
        if position is None or end is None:
            return True
        if self._run_ends is not None and tp in self._run_ends:
            end = min(end, self._run_ends[tp])
        return position < end
