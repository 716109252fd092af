"""The key-value store a processor gets from `ctx.store(name)`.

Writes wait in a pending buffer until the engine flushes them, with the changelog offset they
reach, in one atomic backend write; under exactly-once it flushes only after the transaction
commits and discards the buffer when it aborts, so the backend never holds uncommitted state.
Reads see the buffer laid over the backend, so a processor always reads its own writes.

A store with a changelog also collects the latest value of each key written since the engine last
took them: at each commit those become the changelog records, one per key however often it was
written in between (as Kafka Streams' store cache does), so a hot key costs one changelog record
per commit interval, not one per update.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from sortedcontainers import SortedList  # type: ignore[import-untyped]

from processors.serdes import Serde
from stores.backend import Backend, Change
from stores.errors import layout_refused
from stores.layout import STREAM_TIME_KEY
from stores.ranges import overlay, prefix_end
from stores.serdes import resolve_serde

ENTRY_BYTES = 170
"""What a buffered write takes besides its key's and value's bytes: the two objects' headers and its
entries in the pending buffer and the changelog's (measured: 200 bytes a write of 14 + 5 bytes)."""


class BufferedKeyValueStore:
    """Keys and values go through the store's serdes (msgpack unless configured).

    Range and prefix reads follow the order of the encoded key bytes. That is the natural order
    for `str` and `bytes` keys; with msgpack only non-negative integers sort numerically, and
    strings sort by length first, so prefix reads are meant for `str` and `bytes` key serdes.
    """

    def __init__(
        self,
        backend: Backend,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        *,
        name: str = "store",
        changelog: bool = False,
    ) -> None:
        self.name = name
        self._backend = backend
        self._keys = key_serde or resolve_serde("msgpack")
        self._values = value_serde or resolve_serde("msgpack")
        self._pending: dict[bytes, bytes | None] = {}
        # The pending keys in order, built by the first range read after a flush and kept up from then
        # on, so a range read costs its range, not a sort of the whole buffer (window and session
        # stores read a range per record). Keys new since the last range read wait in `_unordered` and
        # join it at the next one, all at once: one at a time, they cost a microsecond each.
        self._pending_order: SortedList | None = None
        self._unordered: list[bytes] = []
        # The same writes, kept until taken for the changelog (`None` when there is no changelog).
        self._unlogged: dict[bytes, bytes | None] | None = {} if changelog else None
        # Counts the changes of contents that do not go through `put` and `delete` (discard, restore,
        # wipe), so a view that keeps what it read (window and session stores) knows to read again.
        self.generation = 0

    @property
    def pending_count(self) -> int:
        """Keys written since the last flush; the engine flushes or commits before it grows too far."""
        return len(self._pending)

    @property
    def buffered_bytes(self) -> int:
        """An estimate of the memory the pending writes take, at no cost per write: their count by the
        size of the last one written (in a store, writes tend to be alike)."""
        pending = self._pending
        if not pending:
            return 0
        key, value = next(reversed(pending.items()))
        return len(pending) * (ENTRY_BYTES + len(key) + (len(value) if value is not None else 0))

    def changelog_offset(self, source: int = 0) -> int | None:
        """The next changelog offset to restore from (as of the last flush or restore)."""
        return self._backend.changelog_offset(source)

    def get(self, key: Any, default: Any = None) -> Any:
        key_bytes = self._keys.serialize(key)
        pending = self._pending
        value = pending[key_bytes] if key_bytes in pending else self._backend.get(key_bytes)
        if value is None:
            return default
        return self._values.deserialize(value)

    def put(self, key: Any, value: Any, ttl_ms: int | None = None) -> None:
        if ttl_ms is not None:
            raise TypeError(
                f"store '{self.name}' has no ttl_ms in the app YAML, so its keys never expire: give it ttl_ms "
                "(the default TTL) to put a key with one"
            )
        key_bytes = self._keys.serialize(key)
        value_bytes = self._values.serialize(value)
        if self._pending_order is not None and key_bytes not in self._pending:
            self._unordered.append(key_bytes)
        self._pending[key_bytes] = value_bytes
        if self._unlogged is not None:
            self._unlogged[key_bytes] = value_bytes

    def delete(self, key: Any) -> None:
        key_bytes = self._keys.serialize(key)
        if self._pending_order is not None and key_bytes not in self._pending:
            self._unordered.append(key_bytes)
        self._pending[key_bytes] = None
        if self._unlogged is not None:
            self._unlogged[key_bytes] = None

    def check_layout(self) -> None:
        """Refuse a store laid out as a key-value store with a TTL, or a window or session store (stores/layout.py):
        its keys would be read as garbage, and none would ever expire."""
        if self.holds_stream_time():
            raise layout_refused(self.name, "key_value without ttl_ms")

    def holds_stream_time(self) -> bool:
        """Whether the store holds the stream time of a layout that keeps one (stores/layout.py)."""
        return self._backend.get(STREAM_TIME_KEY) is not None

    def write_encoded(self, key_bytes: bytes, value_bytes: bytes | None) -> None:
        """A write of bytes already encoded (by the topic a table mirrors); `None` deletes."""
        if self._pending_order is not None and key_bytes not in self._pending:
            self._unordered.append(key_bytes)
        self._pending[key_bytes] = value_bytes
        if self._unlogged is not None:
            self._unlogged[key_bytes] = value_bytes

    def take_back(self, key_bytes: bytes) -> bool:
        """Take back the write of `key_bytes` made since the last flush, if any: the key is left as the
        backend and the changelog last had it, and needs no tombstone. False when there was none."""
        if self._pending.pop(key_bytes, False) is False:
            return False
        if self._unlogged is not None:
            self._unlogged.pop(key_bytes, None)
        self._pending_order = None  # rebuilt by the next range read
        self._unordered = []
        return True

    def take_changes(self) -> dict[bytes, bytes | None]:
        """The latest value of each key written since the last call (`None`: deleted), for the changelog."""
        changes = self._unlogged or {}
        if self._unlogged is not None:
            self._unlogged = {}
        return changes

    def range(self, start: Any = None, end: Any = None) -> Iterator[tuple[Any, Any]]:
        """Decoded pairs with `start <= key < end` by encoded key bytes; `None` leaves a side open.

        Writes made while iterating do not show in the iteration.
        """
        lower = None if start is None else self._keys.serialize(start)
        upper = None if end is None else self._keys.serialize(end)
        return self._decoded(self._merged(lower, upper))

    def prefix(self, prefix: bytes | str) -> Iterator[tuple[Any, Any]]:
        """Decoded pairs whose encoded key starts with `prefix` (UTF-8 when a `str`), in key order."""
        raw = prefix.encode() if isinstance(prefix, str) else prefix
        return self._decoded(self._merged(raw, prefix_end(raw)))

    def committed_get(self, key_bytes: bytes) -> Any:
        """The value of an encoded key as the last commit left it (`None`: absent), without the writes
        buffered since: what a query from outside the task may see."""
        value = self._backend.get(key_bytes)
        return None if value is None else self._values.deserialize(value)

    def committed_range(self, lower: bytes | None, upper: bytes | None, limit: int) -> list[tuple[Any, Any]]:
        """At most `limit` decoded pairs with `lower <= key < upper` by encoded key bytes (`None` leaves a side
        open), as the last commit left them."""
        pairs: list[tuple[bytes, bytes]] = []
        for key, value in self._backend.items(lower, upper):
            if len(pairs) == limit:
                break
            pairs.append((key, value))
        return list(self._decoded(iter(pairs)))

    def approximate_count(self) -> int:
        """The backend's estimate of its key count; writes not yet flushed are not counted."""
        return self._backend.approximate_count()

    def flush(self, changelog_offset: int | None = None) -> None:
        """Write the pending buffer and the changelog offset it reaches, atomically."""
        if self._pending or changelog_offset is not None:
            self._backend.write(self._pending.items(), changelog_offset)
        self._pending = {}
        self._pending_order = None
        self._unordered = []

    def discard(self) -> None:
        """Drop the pending buffer, e.g. when its exactly-once transaction aborted."""
        self.generation += 1
        self._pending = {}
        self._pending_order = None
        self._unordered = []
        if self._unlogged is not None:
            self._unlogged = {}

    def restore(self, changes: Iterable[Change], next_offset: int, source: int = 0) -> None:
        """Apply raw source records and the offset after them in one write; they are not changes to log."""
        if self._pending:
            raise RuntimeError(f"store '{self.name}': restore with {len(self._pending)} unflushed writes")
        self.generation += 1
        self._backend.write(changes, next_offset, source)

    def wipe(self) -> None:
        """Drop all state and the offset, without changelog records: only before a full restore."""
        self.discard()
        self._backend.wipe()

    def close(self) -> None:
        """Close the backend; unflushed writes are dropped, as they were never committed."""
        self.discard()
        self._backend.close()

    def _merged(self, lower: bytes | None, upper: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        order, pending = self._pending_order, self._pending
        if order is None:
            order = self._pending_order = SortedList(pending)
        elif self._unordered:
            order.update(self._unordered)
            self._unordered = []
        changes = [(key, pending[key]) for key in order.irange(lower, upper, inclusive=(True, False))]
        return overlay(self._backend.items(lower, upper), changes)

    def _decoded(self, pairs: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[Any, Any]]:
        decode_key, decode_value = self._keys.deserialize, self._values.deserialize
        for key, value in pairs:
            yield decode_key(key), decode_value(value)
