"""The key-value store with a TTL that a processor gets from `ctx.store(name)` when the store has `ttl_ms`.

Entries expire by the task's **stream time**, never by the wall clock: an entry put at stream time `t`
with a TTL of `ttl_ms` lives while stream time is below `t + ttl_ms`. Stream time comes from the records
themselves, so an expiry is the same when the records are processed again after a crash, after an
aborted transaction, and on a store restored from its changelog; the wall clock would expire different
keys on each run.

The store keeps the stream time it last saw as an entry of its own (stores/layout.py), committed and
logged with the entries, so a restored store hides the same expired entries as the original before the
task has processed a record. Reads compare an entry's expiry with the stream time and never return an
expired entry; `expire` (at each commit) deletes the expired ones in expiry order, a bounded number at
a time, so their changelog gets tombstones in the transaction of the commit that expired them.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import Any, Protocol

from processors.serdes import Serde
from stores.errors import layout_refused
from stores.layout import (
    MAX_TIME,
    MIN_TIME,
    STREAM_TIME,
    STREAM_TIME_KEY,
    TTL_ENTRY,
    TTL_INDEX,
    StoreKind,
    time_range,
    ttl_index,
    ttl_of_index,
)
from stores.ranges import prefix_end
from stores.serdes import resolve_serde
from stores.store import BufferedKeyValueStore

EXPIRE_STEP = 10_000
"""Expired entries deleted per store and commit, or twice the puts since the last commit when that is more
(a store taking more new keys than this per commit would otherwise pile expired ones up): the rest follow
at the next commits, hidden from reads meanwhile (and after a restore, as the committed stream time hides
them too)."""

_ENTRIES_END = prefix_end(TTL_ENTRY)
_EXPIRY_SIZE = STREAM_TIME.size


class StreamClock(Protocol):
    """What tells a store the task's stream time: the task's context."""

    @property
    def stream_time(self) -> int: ...


class _NoRecordsYet:
    stream_time = -1


class TtlView:
    """A view over a bytes-keyed `BufferedKeyValueStore`, which keeps doing the buffering, changelog and
    restore; it reads and writes as `processors.KeyValueStore` does, and `put` takes a TTL."""

    kind: StoreKind = "key_value"

    def __init__(
        self,
        store: BufferedKeyValueStore,
        ttl_ms: int,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        clock: StreamClock | None = None,
    ) -> None:
        self._store = store
        self._ttl = _checked_ttl(store.name, ttl_ms)
        self._keys = key_serde or resolve_serde("msgpack")
        self._values = value_serde or resolve_serde("msgpack")
        self._clock: StreamClock = clock or _NoRecordsYet()
        self._generation = -1  # below the store's: the first call reads the stored stream time
        self._stored_time = -1
        self._written_time = -1
        self._expired_below = MIN_TIME
        self._puts = 0  # since the last `expire`

    @property
    def name(self) -> str:
        return self._store.name

    @property
    def ttl_ms(self) -> int:
        """The store's default TTL, for a `put` that names none."""
        return self._ttl

    @property
    def stream_time(self) -> int:
        """The task's stream time, or the one the store was committed with when that is later (a task
        that just started, on a restored store); -1 before any record."""
        if self._generation != self._store.generation:
            self._reread()
        clock_time = self._clock.stream_time
        return clock_time if clock_time > self._stored_time else self._stored_time

    def get(self, key: Any, default: Any = None) -> Any:
        stored = self._store.get(TTL_ENTRY + self._keys.serialize(key))
        if stored is None or _expiry(stored) <= self.stream_time:
            return default
        return self._values.deserialize(stored[_EXPIRY_SIZE:])

    def put(self, key: Any, value: Any, ttl_ms: int | None = None) -> None:
        """Write `key`, to expire when stream time reaches the stream time now plus `ttl_ms` (the store's
        `ttl_ms` when None). A put of a key replaces its expiry as well as its value."""
        self._puts += 1
        ttl = self._ttl if ttl_ms is None else _checked_ttl(self.name, ttl_ms)
        expiry = min(self.stream_time + ttl, MAX_TIME)
        key_bytes = self._keys.serialize(key)
        entry = TTL_ENTRY + key_bytes
        store = self._store
        previous = store.get(entry)
        previous_expiry = None if previous is None else _expiry(previous)
        store.put(entry, STREAM_TIME.pack(expiry) + self._values.serialize(value))
        if previous_expiry != expiry:
            if previous_expiry is not None:
                self._unindex(key_bytes, previous_expiry)
            store.put(ttl_index(key_bytes, expiry), b"")

    def delete(self, key: Any) -> None:
        key_bytes = self._keys.serialize(key)
        entry = TTL_ENTRY + key_bytes
        previous = self._store.get(entry)
        if previous is not None:
            self._unindex(key_bytes, _expiry(previous))
            self._store.delete(entry)

    def range(self, start: Any = None, end: Any = None) -> Iterator[tuple[Any, Any]]:
        """Decoded live pairs with `start <= key < end` by encoded key bytes; `None` leaves a side open."""
        lower = TTL_ENTRY if start is None else TTL_ENTRY + self._keys.serialize(start)
        upper = _ENTRIES_END if end is None else TTL_ENTRY + self._keys.serialize(end)
        return self._live(self._store.range(lower, upper))

    def prefix(self, prefix: bytes | str) -> Iterator[tuple[Any, Any]]:
        """Decoded live pairs whose encoded key starts with `prefix` (UTF-8 when a `str`), in key order."""
        raw = TTL_ENTRY + (prefix.encode() if isinstance(prefix, str) else prefix)
        return self._live(self._store.range(raw, prefix_end(raw)))

    def approximate_count(self) -> int:
        """The backend's estimate, halved: each key has an index entry besides. Expired entries not yet
        deleted, and writes not yet committed, are not told apart."""
        return self._store.approximate_count() // 2

    def expire(self, limit: int | None = None) -> int:
        """Delete up to `limit` expired entries (`EXPIRE_STEP`'s rule by default), in expiry order (the engine
        calls this at each commit, before it takes the store's changes for the changelog). Returns how many
        it deleted."""
        if limit is None:
            limit = max(EXPIRE_STEP, 2 * self._puts)
        self._puts = 0
        now = self.stream_time
        bounds = time_range(TTL_INDEX, self._expired_below, now)
        if bounds is None:
            return 0
        store, deleted = self._store, 0
        due = list(islice(store.range(*bounds), limit))
        for index, _ in due:
            key_bytes, expiry = ttl_of_index(index)
            entry = TTL_ENTRY + key_bytes
            stored = store.get(entry)
            if stored is not None and _expiry(stored) == expiry:  # else the key was put again since
                store.delete(entry)
                deleted += 1
            store.delete(index)
        # A full step stops within an expiry time, which more entries may share.
        self._expired_below = ttl_of_index(due[-1][0])[1] if len(due) == limit else now + 1
        return deleted

    def write_stream_time(self) -> None:
        """Put the stream time into the store, when it moved since it was last put there: the engine calls
        this before a commit takes the store's changes."""
        now = self.stream_time
        if now > self._written_time:
            self._store.put(STREAM_TIME_KEY, STREAM_TIME.pack(now))
            self._written_time = now

    def check_layout(self) -> None:
        """Refuse a store that holds keys of another layout: a key-value store without `ttl_ms`, or a
        window or session store, when they were written."""
        foreign: tuple[tuple[bytes | None, bytes | None], ...] = (
            (None, STREAM_TIME_KEY),
            (STREAM_TIME_KEY + b"\x00", TTL_ENTRY),
            (prefix_end(TTL_INDEX), None),
        )
        for low, high in foreign:
            for _ in self._store.range(low, high):
                raise layout_refused(self.name, "key_value with ttl_ms")

    def _unindex(self, key_bytes: bytes, expiry: int) -> None:
        """Drop a key's index entry: taken back when it was written since the last commit (a key put at
        each record costs one index record per commit, not a tombstone per put), else deleted.

        An index entry taken back may stay behind in the backend or the changelog, when it was there
        before as well: expiry finds the key's entry holds another expiry, and deletes only it."""
        index = ttl_index(key_bytes, expiry)
        if not self._store.take_back(index):
            self._store.delete(index)

    def _live(self, pairs: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[Any, Any]]:
        now, at = self.stream_time, len(TTL_ENTRY)
        decode_key, decode_value = self._keys.deserialize, self._values.deserialize
        for entry, stored in pairs:
            if _expiry(stored) > now:
                yield decode_key(entry[at:]), decode_value(stored[_EXPIRY_SIZE:])

    def _reread(self) -> None:
        """The store changed under the view (restored, or an aborted transaction's writes dropped)."""
        stored = self._store.get(STREAM_TIME_KEY)
        self._stored_time = self._written_time = -1 if stored is None else int(STREAM_TIME.unpack(stored)[0])
        self._expired_below = MIN_TIME  # what was removed is unknown: the next expiry scans from the start
        self._generation = self._store.generation


def _expiry(stored: bytes) -> int:
    return int(STREAM_TIME.unpack_from(stored)[0])


def _checked_ttl(store: str, ttl_ms: Any) -> int:
    if ttl_ms.__class__ is not int or ttl_ms <= 0:
        raise ValueError(f"store '{store}': ttl_ms must be a positive int of milliseconds, not {ttl_ms!r}")
    return int(ttl_ms)
