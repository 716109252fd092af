"""The stores a processor sees: what `ctx.store(name)` and `ctx.global_store(name)` hand it.

Interfaces, so that a processor (and its tests) depend on what a store does, not on the engine's
classes: the runtime's stores satisfy them, and so does any fake with the same methods.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol


class ReadOnlyStore(Protocol):
    """A table a processor reads: a global store, or the read side of its own store.

    Keys and values go through the store's serdes. Range and prefix reads follow the order of the
    encoded key bytes: the natural order for `str` and `bytes` keys; with msgpack (the default) only
    non-negative integers sort numerically, and strings sort by length first.
    """

    @property
    def name(self) -> str: ...

    def get(self, key: Any, default: Any = None) -> Any:
        """The value of `key`, or `default` when it has none."""
        ...

    def range(self, start: Any = None, end: Any = None) -> Iterator[tuple[Any, Any]]:
        """Decoded pairs with `start <= key < end` by encoded key bytes; `None` leaves a side open."""
        ...

    def prefix(self, prefix: bytes | str) -> Iterator[tuple[Any, Any]]:
        """Decoded pairs whose encoded key starts with `prefix` (UTF-8 when a `str`), in key order."""
        ...

    def approximate_count(self) -> int:
        """An estimate of the number of keys; writes since the last commit are not counted."""
        ...


class KeyValueStore(ReadOnlyStore, Protocol):
    """A task's own store: its writes are read back at once (also by range and prefix reads; a write
    made while iterating does not show in that iteration) and are committed, with its changelog,
    together with the offsets of the records that made them."""

    def put(self, key: Any, value: Any) -> None: ...

    def delete(self, key: Any) -> None: ...
