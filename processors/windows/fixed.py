"""Tumbling and hopping windows: one aggregate per (key, window start) in a window store, updated as each
record arrives."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any

from processors.stores import WindowStore
from processors.windows.aggregations import Aggregation
from processors.windows.definitions import Hopping, Tumbling
from processors.windows.early import EveryRecords
from processors.windows.windowing import WindowResult, hashable

_ABSENT = object()
_AFTER_ALL_TIME = 2**63  # above every timestamp


class FixedWindows:
    """A window starting at `start` closes at `start + size + grace`, its definition's `close_time`. The
    one tumbling window that holds a record is found by arithmetic, without building the list of them."""

    def __init__(
        self,
        windows: Tumbling | Hopping,
        aggregation: Aggregation,
        store: WindowStore,
        final: bool,
        *,
        changes: bool = False,
        every_records: EveryRecords | None = None,
    ):
        self._windows = windows
        self._aggregation = every_records or aggregation
        self._store = store
        self._final = final
        self._tracks = not final or changes
        self._updates: dict[tuple[Hashable, int], tuple[Any, Any]] = {}
        self._every_records = every_records
        self._due: list[WindowResult] = []
        self._size = windows.size_ms
        self._lead = windows.size_ms + windows.grace_ms  # from a window's start to its close
        self._step = windows.advance_ms if isinstance(windows, Hopping) else windows.size_ms
        self._tumbling = isinstance(windows, Tumbling)
        # Windows start at multiples of the step, so they close at a multiple of the step plus the lead.
        self.closes_every_ms = math.gcd(self._step, self._lead)
        # Up to `_next_close` (exclusive) no window closes, as long as the stream time does not go back
        # below `_checked_to`, the stream time `close` last looked at: the stream time moves with nearly
        # every record, windows close once a window size.
        self._checked_to = _AFTER_ALL_TIME
        self._next_close = 0

    def add(self, key: Any, value: Any, timestamp: int, stream_time: int) -> str | None:
        if self._tumbling:
            start = timestamp - timestamp % self._size
            starts: Sequence[int] = (start,) if stream_time < start + self._lead else ()
        else:
            lead = self._lead
            holding = self._windows.windows_for(timestamp)
            starts = [window.start for window in holding if stream_time < window.start + lead]
        if not starts:
            return self._late(timestamp)
        aggregation, store = self._aggregation, self._store
        for start in starts:
            aggregate = store.get(key, start, _ABSENT)
            if aggregate is _ABSENT:
                aggregate = aggregation.initial()
            aggregate = aggregation.add(aggregate, value, timestamp)
            store.put(key, start, aggregate)
            if self._every_records is not None and self._every_records.is_due(aggregate):
                self._due.append(WindowResult(key, start, start + self._size, aggregate))
                if self._tracks:  # sent now: unchanged since its last early result
                    self._updates.pop((hashable(key), start), None)
            elif self._tracks:
                self._updates[(hashable(key), start)] = (key, aggregate)
        return None

    def _late(self, timestamp: int) -> str:
        windows = self._windows
        last = windows.windows_for(timestamp)[-1]
        return f"window [{last.start}, {last.end}), the last that holds it, closed at {windows.close_time(last)}"

    def close(self, previous: int, stream_time: int) -> list[WindowResult]:
        """Windows close at start + size + grace: those starting in this range closed now. Each is emitted
        and deleted in one step, so the commit that holds its result also holds its deletion."""
        if not self._final or previous < 0 or (previous >= self._checked_to and stream_time < self._next_close):
            return []
        lead, step = self._lead, self._step
        # From where the last close looked, when the stream time did not go back below it: what lies
        # between holds no window start, and ranges that meet let the store know its taken times as one
        # span (`take_all`).
        since = self._checked_to if previous >= self._checked_to else previous
        earliest, latest = since - lead + 1, stream_time - lead
        self._checked_to, self._next_close = stream_time, latest - latest % step + step + lead
        size = self._size
        return [
            WindowResult(key, start, start + size, aggregate)
            for key, start, aggregate in self._store.take_all(earliest, latest)
        ]

    def take_updates(self) -> list[WindowResult]:
        size = self._size
        updates = [
            WindowResult(key, start, start + size, aggregate) for (_, start), (key, aggregate) in self._updates.items()
        ]
        self._updates.clear()
        return updates

    def take_due(self) -> list[WindowResult]:
        due, self._due = self._due, []
        return due
