"""Early results every N records of a window (`early: {every_records: N}`, emitting final results).

The records a window got since its last early result are counted in its stored aggregate, beside the
aggregation's own (`[since, aggregate]`): committed, logged and restored with it, so a restart neither
forgets nor double-counts them, and a session merging others adds theirs up, as Flink's `CountTrigger`
merges its count state. The count goes back to 0 with the record that makes it N, and that record sends
the window's result early.
"""

from __future__ import annotations

from typing import Any

from processors.windows.aggregations import Aggregation


class EveryRecords(Aggregation):
    def __init__(self, aggregation: Aggregation, every: int):
        self._aggregation = aggregation
        self._every = every

    def initial(self) -> list[Any]:
        return [0, self._aggregation.initial()]

    def add(self, aggregate: list[Any], value: Any, timestamp: int) -> list[Any]:
        since = aggregate[0] + 1
        return [0 if since >= self._every else since, self._aggregation.add(aggregate[1], value, timestamp)]

    def merge(self, first: list[Any], second: list[Any]) -> list[Any]:
        return [first[0] + second[0], self._aggregation.merge(first[1], second[1])]

    def result(self, aggregate: list[Any]) -> Any:
        return self._aggregation.result(aggregate[1])

    @staticmethod
    def is_due(added: list[Any]) -> bool:
        """Whether the record just added to this aggregate was the window's N-th since its last early result."""
        return added[0] == 0  # type: ignore[no-any-return]
