"""Several named aggregations of one window (`aggregations:` in the YAML), kept as one aggregate.

The aggregate is a list of each aggregation's aggregate, in the order of their names, so a window costs
one store read and one write per record however many aggregations it has, and msgpack keeps it as it is.
The value added is a list too: what each aggregation reads of the record, in the same order.
"""

from __future__ import annotations

from typing import Any

from processors.windows.aggregations import Aggregation


class SeveralAggregations(Aggregation):
    def __init__(self, aggregations: dict[str, Aggregation]):
        self._names = list(aggregations)
        self._parts = list(aggregations.values())

    def initial(self) -> list[Any]:
        return [part.initial() for part in self._parts]

    def add(self, aggregate: list[Any], value: list[Any], timestamp: int) -> list[Any]:
        return [part.add(kept, read, timestamp) for part, kept, read in zip(self._parts, aggregate, value, strict=True)]

    def merge(self, first: list[Any], second: list[Any]) -> list[Any]:
        return [part.merge(earlier, later) for part, earlier, later in zip(self._parts, first, second, strict=True)]

    def result(self, aggregate: list[Any]) -> dict[str, Any]:
        return {name: part.result(kept) for name, part, kept in zip(self._names, self._parts, aggregate, strict=True)}
