"""The session store a processor gets from `ctx.session_store(name)`: values by (key, start, end).

A view over a bytes-keyed `BufferedKeyValueStore`, as the window store is (stores/windows.py); a key's
sessions are one range in end order, so `find` is one range scan.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from processors.serdes import Serde
from stores.expiring import ExpiringStore
from stores.layout import (
    INDEX,
    MAX_TIME,
    TIME_SIZE,
    entries_of,
    session_entry,
    session_index,
    session_of_index,
    time_at,
    time_range,
)
from stores.store import BufferedKeyValueStore


def _entry_of_index(index: bytes) -> bytes:
    return session_entry(*session_of_index(index))


class SessionView(ExpiringStore):
    """Sessions that end before `stream_time - retention_ms` have expired: reads skip them, a `put`
    of one is refused, and `advance` removes them.

    A `put` of the session a `find` just yielded (a record inside it) writes no index entry; any
    other writes one, as merges and extensions give a session a new end anyway.
    """

    kind = "session"

    def __init__(
        self,
        store: BufferedKeyValueStore,
        retention_ms: int,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
    ) -> None:
        super().__init__(store, retention_ms, key_serde, value_serde, INDEX, _entry_of_index)

    def find(self, key: Any, earliest_end: int, latest_start: int) -> Iterator[tuple[int, int, Any]]:
        """`key`'s sessions with `end >= earliest_end` and `start <= latest_start`, as (start, end, value),
        by end (then by start)."""
        prefix = entries_of(self._keys.serialize(key))
        bounds = time_range(prefix, max(earliest_end, self._cutoff()), MAX_TIME)
        if bounds is None:
            return iter(())
        return self._found(len(prefix), self._store.range(*bounds), latest_start)

    def _found(
        self, at: int, entries: Iterator[tuple[bytes, bytes]], latest_start: int
    ) -> Iterator[tuple[int, int, Any]]:
        decode = self._values.deserialize
        for entry, value in entries:
            start = time_at(entry, at + TIME_SIZE)
            if start <= latest_start:
                self._known = entry
                yield start, time_at(entry, at), decode(value)

    def put(self, key: Any, start: int, end: int, value: Any) -> bool:
        """Write `key`'s session (start, end); False (and nothing written) when it has expired."""
        if start > end:
            raise ValueError(f"store '{self.name}': a session cannot start ({start}) after it ends ({end})")
        if end < self._cutoff():
            return False
        key_bytes = self._keys.serialize(key)
        entry = session_entry(key_bytes, start, end)
        store = self._store
        store.put(entry, self._values.serialize(value))
        if entry != self._known:
            store.put(session_index(key_bytes, start, end), b"")
            self._known = entry
        return True

    def delete(self, key: Any, start: int, end: int) -> None:
        key_bytes = self._keys.serialize(key)
        entry = session_entry(key_bytes, start, end)
        self._store.delete(entry)
        self._store.delete(session_index(key_bytes, start, end))
        if entry == self._known:
            self._known = None

    def fetch_all(self, earliest_end: int, latest_end: int) -> Iterator[tuple[Any, int, int, Any]]:
        """Every key's sessions with `earliest_end <= end <= latest_end`, as (key, start, end, value), by
        end (then by start, then by encoded key).

        Which sessions is fixed by the call; each value is read when its session is reached, so a
        session deleted meanwhile is skipped.
        """
        bounds = time_range(INDEX, max(earliest_end, self._cutoff()), latest_end)
        if bounds is None:
            return iter(())
        return self._sessions([index for index, _ in self._store.range(*bounds)])

    def _sessions(self, indexes: list[bytes]) -> Iterator[tuple[Any, int, int, Any]]:
        get, decode_key, decode_value = self._store.get, self._keys.deserialize, self._values.deserialize
        for index in indexes:
            key_bytes, start, end = session_of_index(index)
            value = get(session_entry(key_bytes, start, end))
            if value is not None:
                yield decode_key(key_bytes), start, end, decode_value(value)
