"""The read side of a store, for stores a processor may look into but never write (global stores)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from stores.store import BufferedKeyValueStore


class ReadOnlyView:
    """A view of a store without `put` and `delete`: only the runtime writes what it mirrors."""

    def __init__(self, store: BufferedKeyValueStore):
        self._store = store

    @property
    def name(self) -> str:
        return self._store.name

    def get(self, key: Any, default: Any = None) -> Any:
        return self._store.get(key, default)

    def range(self, start: Any = None, end: Any = None) -> Iterator[tuple[Any, Any]]:
        """Decoded pairs with `start <= key < end` by encoded key bytes; `None` leaves a side open."""
        return self._store.range(start, end)

    def prefix(self, prefix: bytes | str) -> Iterator[tuple[Any, Any]]:
        return self._store.prefix(prefix)

    def approximate_count(self) -> int:
        return self._store.approximate_count()


class TableView(ReadOnlyView):
    """A table without history: each key's latest value only."""

    history_ms: int | None = None

    def get_as_of(self, key: Any, timestamp: int, default: Any = None) -> Any:
        raise TypeError(
            f"table '{self.name}' keeps each key's latest value only: give it history_ms in the app YAML "
            "to read it as of a time"
        )
