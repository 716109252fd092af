"""The order in which a merge processor's task processes its inputs' records: the processor's choice.

Each input partition's records wait in a `ChoiceQueue` of their own. The first record of each queue is
decoded once, when it comes to the head; the processor's `choose` sees those heads, keyed by topic,
and names the topic whose head it takes next, or None to wait for a record of an input that has none
queued. Each queue is bounded on its own (the task pauses and resumes each input's fetching by its
queue alone), so a queue that is full never stops the other one from filling: a merge that waits
for one input always gets its records.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiokafka import TopicPartition

from processors.record import Record

Decode = Callable[[TopicPartition, Any], "Record | None"]  # None: undecodable, handed to the policy
Choose = Callable[[Mapping[str, Record]], "str | None"]


class ChoiceQueue:
    """One input partition's records, oldest first, its head decoded."""

    def __init__(self, tp: TopicPartition):
        self.tp = tp
        self.raw: deque[Any] = deque()
        self.head: Record | None = None  # the first record of `raw`, decoded

    @property
    def count(self) -> int:
        return len(self.raw)

    def clear(self) -> None:
        self.raw.clear()
        self.head = None


class ChoiceOrder:
    """Asks the processor which head comes next."""

    def __init__(self, inputs: Sequence[TopicPartition], decode: Decode, choose: Choose):
        self.queues = {tp: ChoiceQueue(tp) for tp in inputs}
        self.count = 0  # records queued, over all inputs
        self.passed: list[Any] = []  # records that could not be decoded, handed to the policy since last asked
        self._by_topic = {tp.topic: self.queues[tp] for tp in inputs}
        self._each = list(self._by_topic.items())
        self._decode = decode
        self._choose = choose

    def add(self, tp: TopicPartition, records: list[Any]) -> None:
        self.queues[tp].raw.extend(records)
        self.count += len(records)

    def next(self) -> tuple[TopicPartition, Any, Record] | None:
        """The record chosen next, taken off its queue; None when the processor waits for more."""
        heads = {}
        for topic, queue in self._each:
            head = queue.head
            if head is None and queue.raw:
                head = self._head(queue)
            if head is not None:
                heads[topic] = head
        if not heads:
            return None
        topic = self._choose(heads)
        if topic is None:
            return None
        record = heads.get(topic)
        if record is None:
            raise ValueError(f"choose() returned {topic!r}, which is not one of the heads {sorted(heads)}")
        chosen = self._by_topic[topic]
        chosen.head = None
        self.count -= 1
        return chosen.tp, chosen.raw.popleft(), record

    def clear(self) -> None:
        for queue in self.queues.values():
            queue.clear()
        self.count = 0
        self.passed.clear()

    def _head(self, queue: ChoiceQueue) -> Record | None:
        """The queue's first record, decoded; records that cannot be decoded are handed to the policy."""
        while queue.head is None and queue.raw:
            queue.head = self._decode(queue.tp, queue.raw[0])
            if queue.head is None:
                self.passed.append(queue.raw.popleft())
                self.count -= 1
        return queue.head
