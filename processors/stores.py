"""The stores a processor sees: what `ctx.store(name)` and `ctx.global_store(name)` hand it.

Interfaces, so that a processor (and its tests) depend on what a store does, not on the engine's
classes: the runtime's stores satisfy them, and so does any fake with the same methods.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable


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


class Table(ReadOnlyStore, Protocol):
    """A table of the processor (`ctx.table(name)`): `get` gives each key's latest value; a table with
    `history_ms` in the app YAML also keeps each key's earlier versions, for `get_as_of`."""

    @property
    def history_ms(self) -> int | None:
        """How far back, in ms of the table's stream time, `get_as_of` is exact; None: no history."""
        ...

    def get_as_of(self, key: Any, timestamp: int, default: Any = None) -> Any:
        """The value `key` had at `timestamp`: its latest version with a timestamp at or before it.
        `default` when that is a deletion or there is none, or when `timestamp` is older than the
        table's stream time minus `history_ms` and the latest version is younger than it (KIP-889's
        rule). A table without `history_ms` refuses it (TypeError naming the setting)."""
        ...


class KeyValueStore(ReadOnlyStore, Protocol):
    """A task's own store: its writes are read back at once (also by range and prefix reads; a write
    made while iterating does not show in that iteration) and are committed, with its changelog,
    together with the offsets of the records that made them.

    A store with `ttl_ms` in the app YAML expires its keys by the task's stream time: a key put when
    stream time is `t` is gone, for every read, once stream time reaches `t + ttl_ms`, and its changelog
    gets a tombstone for it. Stream time, not the wall clock, so that a replay or a restore expires the
    same keys (docs/configuration.md, "Key-value stores with a TTL").
    """

    def put(self, key: Any, value: Any, ttl_ms: int | None = None) -> None:
        """Write `key`. `ttl_ms` (a store with `ttl_ms` only) overrides the store's TTL for this write; a
        put replaces a key's expiry as well as its value."""
        ...

    def delete(self, key: Any) -> None: ...


@runtime_checkable
class TtlStore(KeyValueStore, Protocol):
    """A key-value store with `ttl_ms` (`ctx.store(name)` gives one for such a store): the stream time its
    expiry goes by is the task's, or the one the store was committed with when that is later (a task that
    has just started on a restored store)."""

    @property
    def stream_time(self) -> int: ...

    @property
    def ttl_ms(self) -> int:
        """The TTL of a `put` that names none."""
        ...


class WindowStore(Protocol):
    """A task's store of per-key values for fixed-size time windows (`ctx.window_store(name)`).

    An entry is addressed by (key, window start in ms). Reads return entries in window-start order.
    The store keeps its own **observed stream time**: the largest timestamp handed to `advance`.
    Windows that start before `stream_time - retention_ms` have expired: `advance` removes them
    (and their changelog gets tombstones), and a `put` into one is ignored, so the store's size
    levels off however long the app runs. Like a key-value store, writes are read back at once and
    are committed with the offsets of the records that made them; the observed stream time too.
    """

    @property
    def name(self) -> str: ...

    @property
    def retention_ms(self) -> int: ...

    @property
    def stream_time(self) -> int:
        """The largest timestamp observed (`advance`), or -1 before the first."""
        ...

    def advance(self, timestamp: int) -> int:
        """Observe a record's timestamp: stream time becomes the larger of the two (it never goes back),
        and windows older than the retention are removed. Returns the stream time."""
        ...

    def get(self, key: Any, start: int, default: Any = None) -> Any:
        """The value of `key`'s window that starts at `start`, or `default`."""
        ...

    def put(self, key: Any, start: int, value: Any) -> bool:
        """Write `key`'s window starting at `start`; False (and nothing written) when it has expired."""
        ...

    def delete(self, key: Any, start: int) -> None: ...

    def fetch(self, key: Any, time_from: int, time_to: int) -> Iterator[tuple[int, Any]]:
        """`key`'s windows with `time_from <= start <= time_to`, as (start, value), by start."""
        ...

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[tuple[Any, int, Any]]:
        """Every key's windows with `time_from <= start <= time_to`, as (key, start, value), by start
        (then by encoded key)."""
        ...

    def take_all(self, time_from: int, time_to: int) -> list[tuple[Any, int, Any]]:
        """What `fetch_all` gives, each window deleted as it is taken: the final results of windows that
        closed. The store then knows those times hold nothing, and its expiry does not read them again."""
        ...


class SessionStore(Protocol):
    """A task's store of per-key sessions (`ctx.session_store(name)`): values for variable-length
    time spans (start, end), both in ms and inclusive, as session windows merge them.

    It keeps an observed stream time like `WindowStore`; sessions that end before
    `stream_time - retention_ms` are removed by `advance`, and a `put` of one is ignored.
    """

    @property
    def name(self) -> str: ...

    @property
    def retention_ms(self) -> int: ...

    @property
    def stream_time(self) -> int:
        """The largest timestamp observed (`advance`), or -1 before the first."""
        ...

    def advance(self, timestamp: int) -> int:
        """As `WindowStore.advance`, for sessions' ends."""
        ...

    def find(self, key: Any, earliest_end: int, latest_start: int) -> Iterator[tuple[int, int, Any]]:
        """`key`'s sessions with `end >= earliest_end` and `start <= latest_start`, as
        (start, end, value), by end: those a record within the gap of them joins (or merges)."""
        ...

    def put(self, key: Any, start: int, end: int, value: Any) -> bool:
        """Write `key`'s session (start, end); False (and nothing written) when it has expired."""
        ...

    def delete(self, key: Any, start: int, end: int) -> None: ...

    def fetch_all(self, earliest_end: int, latest_end: int) -> Iterator[tuple[Any, int, int, Any]]:
        """Every key's sessions with `earliest_end <= end <= latest_end`, as (key, start, end, value),
        by end (then by start, then by encoded key)."""
        ...
