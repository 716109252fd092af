"""Count windows, as Quix Streams' `tumbling_count_window(count)` and `hopping_count_window(count, step)`:
each key's records in windows of `size` records, a new one every `step` records (every `size`: tumbling).

A window is known by how many of its key's records came before its first one, so it never depends on
time: it is full, and final, at its `size`-th record, and no record is ever late. Its `start` and `end`
are the smallest and largest timestamps of its records, both included, as Quix has them.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Final

from processors.stores import KeyValueStore
from processors.windows.aggregations import Aggregation
from processors.windows.windowing import WindowResult, hashable

# The store the `Aggregate` processor keeps count windows in: each key's open windows under the key, with
# nothing to expire by time.
COUNTED_STORE: Final = {"kind": "key_value"}


@dataclass(frozen=True, slots=True)
class Counted:
    """Windows of `size` records of a key, starting at its first record and every `step` records after."""

    size: int
    step: int

    def __post_init__(self) -> None:
        if self.size < 1 or self.step < 1:
            raise ValueError(f"size and step must be 1 or more, got size {self.size} and step {self.step}")
        if self.step > self.size:
            raise ValueError(f"step ({self.step}) must not exceed size ({self.size})")

    @classmethod
    def of(cls, size: int | None, step: int | None) -> Counted:
        """From the params: `step` defaults to `size`, which makes them tumbling."""
        if size is None:
            raise ValueError("count windows need size")
        return cls(size, size if step is None else step)

    def starts_window(self, seen: int) -> bool:
        """Whether a key's record that follows `seen` of its records starts a window."""
        return seen % self.step == 0


TIME_FIELDS: Final = frozenset({"size_ms", "advance_ms", "time_difference_ms", "gap_ms", "grace_ms"})


def count_field(kind: str, name: str, value: int | None, size: int | None) -> int | None:
    """A field of the `window` params, checked for what count windows take: `size`, and `step` up to
    `size` (given as `size`), and none of the time windows' durations; the others take neither."""
    if kind != "count":
        if name in TIME_FIELDS or value is None:
            return value
        raise ValueError(f"only count windows take {name}, a number of records")
    if name == "grace_ms":
        raise ValueError("count windows take no grace_ms: a window closes at its last record, and none is late")
    if name in TIME_FIELDS and value is not None:
        raise ValueError(f"count windows take size (and step), a number of records, not {name}")
    if name == "size" and value is None:
        raise ValueError("count windows need size: how many records of a key each window holds")
    if name == "step" and value is not None and size is not None and value > size:
        raise ValueError(f"step ({value}) must not exceed size ({size})")
    return value


class CountWindows:
    """A key's state is one store entry, `{"seen": records so far, "windows": [open windows]}`, each window
    `{"first": records of the key before it, "start": ms, "end": ms, "aggregate": ...}`: a record reads
    and writes that one entry, and sends the result of the window it fills in the same step, so the
    result, the window's removal and the record's offset commit together."""

    def __init__(self, windows: Counted, aggregation: Aggregation, store: KeyValueStore, final: bool):
        self._windows = windows
        self._aggregation = aggregation
        self._store = store
        self._final = final
        self._updates: dict[tuple[Hashable, int], WindowResult] = {}

    def add(self, key: Any, value: Any, timestamp: int) -> list[WindowResult]:
        """Add a record to its key's open windows (and the one it starts); emitting final results, the
        result of the window it filled."""
        state = self._store.get(key)
        if state is None:
            state = {"seen": 0, "windows": []}
        seen, windows = state["seen"], state["windows"]
        if self._windows.starts_window(seen):
            windows.append(
                {"first": seen, "start": timestamp, "end": timestamp, "aggregate": self._aggregation.initial()}
            )
        seen += 1
        add, size, full = self._aggregation.add, self._windows.size, []
        for window in windows:
            window["start"] = min(window["start"], timestamp)
            window["end"] = max(window["end"], timestamp)
            window["aggregate"] = add(window["aggregate"], value, timestamp)
            result = WindowResult(key, window["start"], window["end"], window["aggregate"])
            if not self._final:
                self._updates[(hashable(key), window["first"])] = result
            if seen - window["first"] == size:
                full.append(result)
        if full:
            del windows[: len(full)]  # the oldest windows are the ones that fill first
        self._store.put(key, {"seen": seen, "windows": windows})
        return full if self._final else []

    def take_updates(self) -> list[WindowResult]:
        """Emitting updates: the latest result of every window a record changed since the last call."""
        updates = list(self._updates.values())
        self._updates.clear()
        return updates
