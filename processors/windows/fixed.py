"""Tumbling and hopping windows: one aggregate per (key, window start) in a window store, updated as each
record arrives."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from processors.stores import WindowStore
from processors.windows.aggregations import Aggregation
from processors.windows.definitions import Hopping, Tumbling
from processors.windows.windowing import WindowResult, hashable

_ABSENT = object()


class FixedWindows:
    def __init__(self, windows: Tumbling | Hopping, aggregation: Aggregation, store: WindowStore, final: bool):
        self._windows = windows
        self._aggregation = aggregation
        self._store = store
        self._final = final
        self._updates: dict[tuple[Hashable, int], tuple[Any, Any]] = {}

    def add(self, key: Any, value: Any, timestamp: int, stream_time: int) -> str | None:
        windows, aggregation, store = self._windows, self._aggregation, self._store
        added = False
        for window in windows.windows_for(timestamp):
            if stream_time >= windows.close_time(window):
                continue
            aggregate = store.get(key, window.start, _ABSENT)
            if aggregate is _ABSENT:
                aggregate = aggregation.initial()
            aggregate = aggregation.add(aggregate, value, timestamp)
            store.put(key, window.start, aggregate)
            if not self._final:
                self._updates[(hashable(key), window.start)] = (key, aggregate)
            added = True
        if added:
            return None
        last = windows.windows_for(timestamp)[-1]
        return f"window [{last.start}, {last.end}), the last that holds it, closed at {windows.close_time(last)}"

    def close(self, previous: int, stream_time: int) -> list[WindowResult]:
        """Windows close at start + size + grace: those starting in this range closed now. Each is emitted
        and deleted in one step, so the commit that holds its result also holds its deletion."""
        if not self._final or previous < 0:
            return []
        lead = self._windows.size_ms + self._windows.grace_ms
        earliest, latest = previous - lead + 1, stream_time - lead
        step = self._windows.advance_ms if isinstance(self._windows, Hopping) else self._windows.size_ms
        if earliest + -earliest % step > latest:  # no window starts in the range: no need to read the store
            return []
        closed = list(self._store.fetch_all(earliest, latest))
        for key, start, _ in closed:
            self._store.delete(key, start)
        size = self._windows.size_ms
        return [WindowResult(key, start, start + size, aggregate) for key, start, aggregate in closed]

    def take_updates(self) -> list[WindowResult]:
        size = self._windows.size_ms
        updates = [WindowResult(key, start, start + size, aggregate) for (_, start), (key, aggregate) in
                   self._updates.items()]  # fmt: skip
        self._updates.clear()
        return updates
