"""The window store of kind `window_by_time`: a window store without per-key range reads, laid out in
time order (stores/layout.py), for operators that read windows across keys by time and never a key's
windows over a range, as tumbling and hopping aggregations do.

Its entries are their own time index: a window costs one key (and one changelog record) where the
`window` kind writes two, and the windows that close or expire are one range read that yields their
values, where the `window` kind reads the index and then each entry.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from stores.layout import ENTRY, TTL_ENTRY, WINDOW_BY_TIME, time_range, window_by_time, window_of_index
from stores.windows import WindowView


class WindowByTimeView(WindowView):
    """A `WindowView` whose `fetch` (a key's windows over a range) is refused: nothing orders a key's
    windows together. `fetch_all` yields the windows and values as they are when it is called."""

    _entry = staticmethod(window_by_time)
    _time_order = (WINDOW_BY_TIME, None)
    kind = "window_by_time"
    _foreign_tags = ((ENTRY, WINDOW_BY_TIME), (TTL_ENTRY, None))

    def put(self, key: Any, start: int, value: Any) -> bool:
        if start < self._cutoff():
            return False
        self._store.put(self._address(key, start)[1], self._values.serialize(value))
        self._refill(start)
        return True

    def delete(self, key: Any, start: int) -> None:
        self._store.delete(self._address(key, start)[1])

    def fetch(self, key: Any, time_from: int, time_to: int) -> Iterator[tuple[int, Any]]:
        raise TypeError(
            f"store '{self.name}' is a window_by_time store, laid out by time with no per-key order: it reads "
            "windows across keys (fetch_all), not a key's over a range (fetch), which a store of kind window does"
        )

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[tuple[Any, int, Any]]:
        bounds = time_range(WINDOW_BY_TIME, max(time_from, self._cutoff()), time_to)
        if bounds is None:
            return iter(())
        return self._windows_by_time(self._store.range(*bounds))

    def _windows_by_time(self, entries: Iterable[tuple[bytes, bytes]]) -> Iterator[tuple[Any, int, Any]]:
        decode_key, decode_value = self._keys.deserialize, self._values.deserialize
        for entry, value in entries:
            key_bytes, start = window_of_index(entry)
            key = decode_key(key_bytes)
            self._addressed = (key, start, key_bytes, entry)  # for its `delete`, when that follows
            yield key, start, decode_value(value)
