"""The window store a processor gets from `ctx.window_store(name)`: values by (key, window start).

A view over a bytes-keyed `BufferedKeyValueStore` (stores/layout.py says how the entries are laid out), so
writes are buffered until the commit, read back at once, logged and restored as that store's are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from processors.serdes import Serde
from stores.expiring import ExpiringStore
from stores.layout import (
    INDEX,
    StoreKind,
    entries_of,
    time_at,
    time_range,
    window_entry,
    window_entry_of_index,
    window_index,
    window_of_index,
)
from stores.store import BufferedKeyValueStore

# Keys that cannot change between two calls: only these are recognised by identity (`_address`).
_IMMUTABLE_KEYS = frozenset({str, bytes, int, float, bool, type(None)})
_NO_KEY = object()


class WindowView(ExpiringStore):
    """Windows that start before `stream_time - retention_ms` have expired: reads skip them, a `put`
    into one is refused, and `advance` removes them.

    The usual update, `get` then `put` of the same window, costs one read and one encoding of the
    key: the window last addressed is kept with its bytes for the `put` or `delete` of it that
    follows (also the `delete` of a window `fetch_all` just yielded), and the time index entry is
    written only for a window the `get` did not find.
    """

    # The key of a window's value, and the keys in time order with the entry each names (stores/layout.py).
    _entry = staticmethod(window_entry)
    _time_order: tuple[bytes, Callable[[bytes], bytes] | None] = (INDEX, window_entry_of_index)
    kind: StoreKind = "window"

    def __init__(
        self,
        store: BufferedKeyValueStore,
        retention_ms: int,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
    ) -> None:
        super().__init__(store, retention_ms, key_serde, value_serde, *self._time_order)
        # (key, start, key bytes, entry) of the window last addressed.
        self._addressed: tuple[Any, int, bytes, bytes] = (_NO_KEY, 0, b"", b"")

    def get(self, key: Any, start: int, default: Any = None) -> Any:
        """The value of `key`'s window that starts at `start`, or `default`."""
        if start < self._cutoff():
            return default
        key_bytes = self._keys.serialize(key)
        entry = self._entry(key_bytes, start)
        self._addressed = (key, start, key_bytes, entry)  # for the `put` that usually follows
        value = self._store.get(entry)
        if value is None:
            return default
        self._known = entry
        return self._values.deserialize(value)

    def put(self, key: Any, start: int, value: Any) -> bool:
        """Write `key`'s window starting at `start`; False (and nothing written) when it has expired."""
        if start < self._cutoff():
            return False
        key_bytes, entry = self._address(key, start)
        store = self._store
        store.put(entry, self._values.serialize(value))
        self._refill(start)
        if entry != self._known:
            store.put(window_index(key_bytes, start), b"")
            self._known = entry
        return True

    def delete(self, key: Any, start: int) -> None:
        key_bytes, entry = self._address(key, start)
        self._store.delete(entry)
        self._store.delete(window_index(key_bytes, start))
        if entry == self._known:
            self._known = None

    def _address(self, key: Any, start: int) -> tuple[bytes, bytes]:
        """The key's bytes and the window's entry: those of the window last addressed when it is the
        same key and start objects (the key of a type that cannot have changed since)."""
        last_key, last_start, key_bytes, entry = self._addressed
        if key is not last_key or start is not last_start or key.__class__ not in _IMMUTABLE_KEYS:
            key_bytes = self._keys.serialize(key)
            entry = self._entry(key_bytes, start)
            self._addressed = (key, start, key_bytes, entry)
        return key_bytes, entry

    def fetch(self, key: Any, time_from: int, time_to: int) -> Iterator[tuple[int, Any]]:
        """`key`'s windows with `time_from <= start <= time_to`, as (start, value), by start."""
        prefix = entries_of(self._keys.serialize(key))
        bounds = time_range(prefix, max(time_from, self._cutoff()), time_to)
        if bounds is None:
            return iter(())
        decode, at = self._values.deserialize, len(prefix)
        return ((time_at(entry, at), decode(value)) for entry, value in self._store.range(*bounds))

    def take_all(self, time_from: int, time_to: int) -> list[tuple[Any, int, Any]]:
        """`fetch_all`'s windows, each deleted as it is taken (as final results are emitted). The store
        then knows those times hold nothing, and its expiry does not read them again."""
        taken = []
        for key, start, value in self.fetch_all(time_from, time_to):
            self.delete(key, start)
            taken.append((key, start, value))
        earliest = max(time_from, self._cutoff())
        if earliest <= time_to:
            self._note_emptied(earliest, time_to)
        return taken

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[tuple[Any, int, Any]]:
        """Every key's windows with `time_from <= start <= time_to`, as (key, start, value), by start
        (then by encoded key).

        Which windows is fixed by the call; each value is read when its window is reached, so a
        window deleted meanwhile is skipped.
        """
        bounds = time_range(INDEX, max(time_from, self._cutoff()), time_to)
        if bounds is None:
            return iter(())
        return self._windows([index for index, _ in self._store.range(*bounds)])

    def _windows(self, indexes: list[bytes]) -> Iterator[tuple[Any, int, Any]]:
        get, decode_key, decode_value = self._store.get, self._keys.deserialize, self._values.deserialize
        for index in indexes:
            entry = window_entry_of_index(index)
            value = get(entry)
            if value is not None:
                key_bytes, start = window_of_index(index)
                key = decode_key(key_bytes)
                self._addressed = (key, start, key_bytes, entry)  # for its `delete`, when that follows
                yield key, start, decode_value(value)
