"""What a window's values add up to: the built-in aggregations by name, and user-defined aggregators.

An aggregation keeps an **aggregate**, the state stored per window, and turns it into the **result**
that is emitted. Aggregates are stored, so they must be msgpack-serialisable: numbers, strings,
bytes, lists, maps and None (a tuple comes back as a list). `mean` keeps `[sum, count]`, `first` and
`last` keep `[timestamp, value]`, `list` keeps `[[timestamp, value], ...]`.

`first`, `last` and `list` go by the records' timestamps, not by their arrival, so an out-of-order
record takes its place in time; records of equal timestamps keep their arrival order.
"""

from __future__ import annotations

import bisect
import heapq
import importlib
from abc import ABC, abstractmethod
from typing import Any, Final, Protocol, runtime_checkable


@runtime_checkable
class Aggregator(Protocol):
    """A user-defined aggregation, named in the YAML as `package.module:Class`: constructed with no
    arguments, once per task. Its aggregate is also its result.

    `merge` combines the aggregates of two sessions that a record joined into one (it is called only
    for session windows), the earlier session's first. Values are added in arrival order, except in
    sliding windows, where a window's aggregate is built from its records in timestamp order.
    """

    def initial(self) -> Any:
        """The aggregate of a window without records."""
        ...

    def add(self, aggregate: Any, value: Any) -> Any:
        """The aggregate with one more value (the record's `field`, or its whole value)."""
        ...

    def merge(self, first: Any, second: Any) -> Any: ...


class Aggregation(ABC):
    """The processor's side of an aggregation; the built-ins also see each value's timestamp."""

    @abstractmethod
    def initial(self) -> Any: ...

    @abstractmethod
    def add(self, aggregate: Any, value: Any, timestamp: int) -> Any: ...

    @abstractmethod
    def merge(self, first: Any, second: Any) -> Any: ...

    def result(self, aggregate: Any) -> Any:
        return aggregate


class Count(Aggregation):
    def initial(self) -> int:
        return 0

    def add(self, aggregate: int, value: Any, timestamp: int) -> int:
        return aggregate + 1

    def merge(self, first: int, second: int) -> int:
        return first + second


class Sum(Aggregation):
    def initial(self) -> int:
        return 0

    def add(self, aggregate: Any, value: Any, timestamp: int) -> Any:
        return aggregate + value

    def merge(self, first: Any, second: Any) -> Any:
        return first + second


class Min(Aggregation):
    def initial(self) -> None:
        return None

    def add(self, aggregate: Any, value: Any, timestamp: int) -> Any:
        return value if aggregate is None or value < aggregate else aggregate

    def merge(self, first: Any, second: Any) -> Any:
        return first if second is None else self.add(first, second, 0)


class Max(Aggregation):
    def initial(self) -> None:
        return None

    def add(self, aggregate: Any, value: Any, timestamp: int) -> Any:
        return value if aggregate is None or value > aggregate else aggregate

    def merge(self, first: Any, second: Any) -> Any:
        return first if second is None else self.add(first, second, 0)


class Mean(Aggregation):
    """Keeps `[sum, count]`, which merge exactly; the result is their quotient."""

    def initial(self) -> list[Any]:
        return [0, 0]

    def add(self, aggregate: list[Any], value: Any, timestamp: int) -> list[Any]:
        return [aggregate[0] + value, aggregate[1] + 1]

    def merge(self, first: list[Any], second: list[Any]) -> list[Any]:
        return [first[0] + second[0], first[1] + second[1]]

    def result(self, aggregate: list[Any]) -> float | None:
        return aggregate[0] / aggregate[1] if aggregate[1] else None


class First(Aggregation):
    """The value of the earliest record; of records with equal timestamps, the one that came first."""

    def initial(self) -> None:
        return None

    def add(self, aggregate: list[Any] | None, value: Any, timestamp: int) -> list[Any]:
        return [timestamp, value] if aggregate is None or timestamp < aggregate[0] else aggregate

    def merge(self, first: list[Any] | None, second: list[Any] | None) -> list[Any] | None:
        return first if second is None or (first is not None and first[0] <= second[0]) else second

    def result(self, aggregate: list[Any] | None) -> Any:
        return None if aggregate is None else aggregate[1]


class Last(Aggregation):
    """The value of the latest record; of records with equal timestamps, the one that came last."""

    def initial(self) -> None:
        return None

    def add(self, aggregate: list[Any] | None, value: Any, timestamp: int) -> list[Any]:
        return [timestamp, value] if aggregate is None or timestamp >= aggregate[0] else aggregate

    def merge(self, first: list[Any] | None, second: list[Any] | None) -> list[Any] | None:
        return first if second is None or (first is not None and first[0] > second[0]) else second

    def result(self, aggregate: list[Any] | None) -> Any:
        return None if aggregate is None else aggregate[1]


class CappedList(Aggregation):
    """The values in timestamp order, at most `max_items` of them: the latest ones, so a window's
    state stays bounded however many records it gets."""

    def __init__(self, max_items: int):
        self.max_items = max_items

    def initial(self) -> list[Any]:
        return []

    def add(self, aggregate: list[list[Any]], value: Any, timestamp: int) -> list[list[Any]]:
        aggregate.insert(bisect.bisect_right(aggregate, timestamp, key=_timestamp), [timestamp, value])
        if len(aggregate) > self.max_items:
            del aggregate[0]
        return aggregate

    def merge(self, first: list[list[Any]], second: list[list[Any]]) -> list[list[Any]]:
        return list(heapq.merge(first, second, key=_timestamp))[-self.max_items :]

    def result(self, aggregate: list[list[Any]]) -> list[Any]:
        return [value for _, value in aggregate]


def _timestamp(entry: list[Any]) -> int:
    timestamp: int = entry[0]
    return timestamp


class Custom(Aggregation):
    """A user's `Aggregator`, which does not see timestamps."""

    def __init__(self, aggregator: Aggregator):
        self.aggregator = aggregator

    def initial(self) -> Any:
        return self.aggregator.initial()

    def add(self, aggregate: Any, value: Any, timestamp: int) -> Any:
        return self.aggregator.add(aggregate, value)

    def merge(self, first: Any, second: Any) -> Any:
        return self.aggregator.merge(first, second)


# The built-ins that take no argument; `list` takes its `max_items`.
SIMPLE: Final[dict[str, type[Aggregation]]] = {
    "count": Count,
    "sum": Sum,
    "min": Min,
    "max": Max,
    "mean": Mean,
    "first": First,
    "last": Last,
}
NEEDS_FIELD: Final = frozenset({"sum", "min", "max", "mean"})


def import_aggregator(path: str) -> type[Aggregator]:
    """The class named by `package.module:Class`, checked to have `initial` and `add`."""
    module_name, _, name = path.partition(":")
    if not module_name or not name:
        raise ImportError(f"'{path}' is not a built-in aggregation nor an import path like 'package.module:Class'")
    found = getattr(importlib.import_module(module_name), name, None)
    if found is None:
        raise ImportError(f"module '{module_name}' has no attribute '{name}'")
    if not isinstance(found, type) or not all(callable(getattr(found, method, None)) for method in ("initial", "add")):
        raise TypeError(f"'{path}' is not a class with initial() and add(aggregate, value) methods")
    return found
