"""The window store a processor gets from `ctx.window_store(name)`: values by (key, window start).

A view over a bytes-keyed `KeyValueStore` (stores/layout.py says how the entries are laid out), so
writes are buffered until the commit, read back at once, logged and restored as that store's are.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from processors.serdes import Serde
from stores.expiring import ExpiringStore
from stores.layout import INDEX, entries_of, time_at, time_range, window_entry, window_index, window_of_index
from stores.store import KeyValueStore


def _entry_of_index(index: bytes) -> bytes:
    return window_entry(*window_of_index(index))


class WindowStore(ExpiringStore):
    """Windows that start before `stream_time - retention_ms` have expired: reads skip them, a `put`
    into one is refused, and `advance` removes them.

    The usual update, `get` then `put` of the same window, costs one read: the time index entry is
    written only for a window the `get` did not find.
    """

    def __init__(
        self,
        store: KeyValueStore,
        retention_ms: int,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
    ) -> None:
        super().__init__(store, retention_ms, key_serde, value_serde, _entry_of_index)

    def get(self, key: Any, start: int, default: Any = None) -> Any:
        """The value of `key`'s window that starts at `start`, or `default`."""
        if start < self._cutoff():
            return default
        entry = window_entry(self._keys.serialize(key), start)
        value = self._store.get(entry)
        if value is None:
            return default
        self._known = entry
        return self._values.deserialize(value)

    def put(self, key: Any, start: int, value: Any) -> bool:
        """Write `key`'s window starting at `start`; False (and nothing written) when it has expired."""
        if start < self._cutoff():
            return False
        key_bytes = self._keys.serialize(key)
        entry = window_entry(key_bytes, start)
        store = self._store
        store.put(entry, self._values.serialize(value))
        if entry != self._known:
            store.put(window_index(key_bytes, start), b"")
            self._known = entry
        return True

    def delete(self, key: Any, start: int) -> None:
        key_bytes = self._keys.serialize(key)
        entry = window_entry(key_bytes, start)
        self._store.delete(entry)
        self._store.delete(window_index(key_bytes, start))
        if entry == self._known:
            self._known = None

    def fetch(self, key: Any, time_from: int, time_to: int) -> Iterator[tuple[int, Any]]:
        """`key`'s windows with `time_from <= start <= time_to`, as (start, value), by start."""
        prefix = entries_of(self._keys.serialize(key))
        bounds = time_range(prefix, max(time_from, self._cutoff()), time_to)
        if bounds is None:
            return iter(())
        decode, at = self._values.deserialize, len(prefix)
        return ((time_at(entry, at), decode(value)) for entry, value in self._store.range(*bounds))

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[tuple[Any, int, Any]]:
        """Every key's windows with `time_from <= start <= time_to`, as (key, start, value), by start
        (then by encoded key).

        Which windows is fixed by the call; each value is read when its window is reached, so a
        window deleted meanwhile is skipped.
        """
        bounds = time_range(INDEX, max(time_from, self._cutoff()), time_to)
        if bounds is None:
            return iter(())
        return self._windows(list(index for index, _ in self._store.range(*bounds)))

    def _windows(self, indexes: list[bytes]) -> Iterator[tuple[Any, int, Any]]:
        get, decode_key, decode_value = self._store.get, self._keys.deserialize, self._values.deserialize
        for index in indexes:
            key_bytes, start = window_of_index(index)
            value = get(window_entry(key_bytes, start))
            if value is not None:
                yield decode_key(key_bytes), start, decode_value(value)
