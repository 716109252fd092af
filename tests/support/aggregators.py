"""User-defined aggregators for the tests (importable by path from an app YAML)."""

from __future__ import annotations

from typing import Any


class Distinct:
    """The distinct values, sorted: the same whatever order the values come in, and however sessions merge."""

    def initial(self) -> list[Any]:
        return []

    def add(self, aggregate: list[Any], value: Any) -> list[Any]:
        return sorted({*aggregate, value})

    def merge(self, first: list[Any], second: list[Any]) -> list[Any]:
        return sorted({*first, *second})


class Unmergeable:
    """Adds up values, but cannot merge two aggregates (so it cannot aggregate sessions)."""

    def initial(self) -> int:
        return 0

    def add(self, aggregate: int, value: int) -> int:
        return aggregate + value
