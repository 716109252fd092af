"""Sliding windows: the store keeps the records' values per (key, timestamp), and a window's aggregate
is built from the records it holds when it is emitted.

A sliding window is defined by the records around it, and a record that arrives out of order changes
which windows exist; keeping the records (for the retention only: until the last window that can hold
them has closed) makes every window exact whatever the order, with one store write per record. Emitting
final results, a window is aggregated once, when it closes, from the records that arrived before that.
Emitting updates, the windows a record changed are aggregated at the next commit, or when they close if
that comes first (later records must not reach a window that closed).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from typing import Any

from processors.stores import WindowStore
from processors.windows.aggregations import Aggregation
from processors.windows.definitions import Sliding, Window
from processors.windows.windowing import WindowResult, hashable

_PENDING = object()  # a changed window not aggregated yet


class SlidingWindows:
    def __init__(
        self, windows: Sliding, aggregation: Aggregation, store: WindowStore, final: bool, *, changes: bool = False
    ):
        self._windows = windows
        self._aggregation = aggregation
        self._store = store
        self._final = final
        self._tracks = not final or changes
        self.closes_every_ms = 1  # a window closes a fixed time after a record's: at any millisecond
        # Emitting updates: the windows changed since the last commit, as (key, aggregate) once aggregated
        # (else _PENDING), and the ones still pending by close time.
        self._updates: dict[tuple[Hashable, int], tuple[Any, Any]] = {}
        self._closing: list[tuple[int, int, Hashable, int]] = []
        self._sequence = itertools.count()

    def add(self, key: Any, value: Any, timestamp: int, stream_time: int) -> str | None:
        windows = self._windows
        if windows.is_late(timestamp, stream_time):
            last = Window(timestamp, timestamp + windows.time_difference_ms)
            return f"window [{last.start}, {last.end}], the last that can hold it, closed at {windows.close_time(last)}"
        values = self._store.get(key, timestamp) or []
        values.append(value)
        self._store.put(key, timestamp, values)
        if self._tracks:
            self._changed(key, timestamp, stream_time)
        return None

    def _changed(self, key: Any, timestamp: int, stream_time: int) -> None:
        """Mark the open windows that hold the record, and its right window once it holds a record."""
        difference = self._windows.time_difference_ms
        starts = {timestamp - difference}
        for neighbour, _ in self._store.fetch(key, timestamp - difference - 1, timestamp + difference + 1):
            if timestamp <= neighbour <= timestamp + difference:
                starts.add(neighbour - difference)  # the left window of a record at or after it
            if neighbour < timestamp:
                starts.add(neighbour + 1)  # the right window of a record before it
            if neighbour > timestamp:
                starts.add(timestamp + 1)  # its own right window is not empty
        name = hashable(key)
        for start in starts:
            close_time = self._windows.close_time(Window(start, start + difference))
            if stream_time < close_time and (name, start) not in self._updates:
                self._updates[(name, start)] = (key, _PENDING)
                heapq.heappush(self._closing, (close_time, next(self._sequence), name, start))

    def close(self, previous: int, stream_time: int) -> list[WindowResult]:
        if not self._final:
            self._aggregate_closing(stream_time)
            return []
        if previous < 0:
            return []
        difference, grace = self._windows.time_difference_ms, self._windows.grace_ms
        closed: dict[tuple[Hashable, int], Any] = {}
        # Left windows [t - d, t] close at t + 1 + grace; right windows [t + 1, t + 1 + d] at t + d + 2 + grace.
        for key, timestamp, _ in self._store.fetch_all(previous - grace, stream_time - grace - 1):
            closed[(hashable(key), timestamp - difference)] = key
        for key, timestamp, _ in self._store.fetch_all(
            previous - difference - grace - 1, stream_time - difference - grace - 2
        ):
            closed[(hashable(key), timestamp + 1)] = key
        results = []
        for (_, start), key in sorted(closed.items(), key=lambda item: item[0][1]):
            aggregate = self._aggregate(key, start)
            if aggregate is not None:
                results.append(WindowResult(key, start, start + difference, aggregate[0]))
        return results

    def _aggregate_closing(self, stream_time: int) -> None:
        """Windows changed since the last commit that close now are aggregated before later records come."""
        closing = self._closing
        while closing and closing[0][0] <= stream_time:
            _, _, name, start = heapq.heappop(closing)
            entry = self._updates.get((name, start))
            if entry is not None and entry[1] is _PENDING:
                aggregate = self._aggregate(entry[0], start)
                if aggregate is None:
                    del self._updates[(name, start)]
                else:
                    self._updates[(name, start)] = (entry[0], aggregate[0])

    def take_updates(self) -> list[WindowResult]:
        difference = self._windows.time_difference_ms
        updates = []
        for (_, start), (key, kept) in self._updates.items():
            built = self._aggregate(key, start) if kept is _PENDING else (kept,)
            if built is not None:
                updates.append(WindowResult(key, start, start + difference, built[0]))
        self._updates.clear()
        self._closing.clear()
        return updates

    def take_due(self) -> list[WindowResult]:
        """Sliding windows keep no aggregate, so no count of records: `every_records` is refused at load."""
        return []

    def _aggregate(self, key: Any, start: int) -> tuple[Any] | None:
        """The aggregate of the records in `[start, start + d]`, in timestamp order; None when it holds none."""
        aggregation = self._aggregation
        aggregate, empty = aggregation.initial(), True
        for timestamp, values in self._store.fetch(key, start, start + self._windows.time_difference_ms):
            for value in values:
                aggregate = aggregation.add(aggregate, value, timestamp)
                empty = False
        return None if empty else (aggregate,)
