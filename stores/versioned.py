"""A table with history (`history_ms`): each key's versions, so a stream record joins the value its key
had at the record's time, as Kafka Streams' versioned key-value store (KIP-889) gives it.

A view over a bytes-keyed `BufferedKeyValueStore` (stores/layout.py lays the entries out), so buffering,
flushing with the table's offset and discarding an aborted transaction's writes are that store's. A
key's latest version is one entry (`08 <key>`), read by a point lookup: a stream record that comes after
the table's updates costs what a plain table costs. The versions a later one replaced are keyed by the
time they stopped being valid (`06 <key> <valid to>`), so the version valid at a time is the first entry
at or after it, one seek.

The rules are KIP-889's. The store keeps its own observed stream time, the largest timestamp written to
it. History retention (`history_ms`) is how far back reads are exact: versions that stopped being valid
at or before `stream time - history_ms` (the cutoff) are dropped, but the one still valid at the cutoff
stays; a read as of a time before the cutoff gives nothing, unless the latest version is valid then
(the latest never expires). It is the grace period too: a write older than the cutoff is refused, and
one newer than that but older than the latest version takes its place in the history, without
replacing the latest. A deletion is a version too (a tombstone), valid until the next version.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

from processors.serdes import Serde
from stores.errors import layout_refused
from stores.layout import (
    LATEST_VERSION,
    MAX_TIME,
    MIN_TIME,
    STREAM_TIME,
    STREAM_TIME_KEY,
    VERSION,
    VERSION_INDEX,
    time_at,
    time_range,
    version_entry,
    version_index,
    version_of_index,
    versions_of,
)
from stores.ranges import prefix_end
from stores.serdes import resolve_serde
from stores.store import BufferedKeyValueStore

EXPIRE_STEP = 10_000
"""Versions expired per store and commit; the rest follow at the next commits (reads never see them)."""

_VALID_FROM = struct.Struct(">q")
_HAS_VALUE = b"\x01"
_HEAD = _VALID_FROM.size + len(_HAS_VALUE)
_LATEST_END = prefix_end(LATEST_VERSION)


class VersionedStore:
    """The engine's side of a table with history: it writes the topic's records as versions (`put`,
    `restore`), expires them at each commit and keeps its stream time; processors read it through
    `VersionedTableView`."""

    def __init__(
        self,
        store: BufferedKeyValueStore,
        history_ms: int,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
    ) -> None:
        if history_ms.__class__ is not int or history_ms <= 0:
            raise ValueError(f"table '{store.name}': history_ms must be a positive int, not {history_ms!r}")
        self._store = store
        self.history_ms = history_ms
        self._keys = key_serde or resolve_serde("msgpack")
        self._values = value_serde or resolve_serde("msgpack")
        self._generation = -1  # below the store's: the first call reads the stored stream time
        self._stream_time = MIN_TIME
        self._written_time = MIN_TIME
        self._expired_below = MIN_TIME

    @property
    def name(self) -> str:
        return self._store.name

    @property
    def stream_time(self) -> int:
        """The largest timestamp written to the store (MIN_TIME before the first)."""
        if self._generation != self._store.generation:
            self._reread()
        return self._stream_time

    @property
    def cutoff(self) -> int:
        """Reads as of a time before it, and writes older than it, are beyond the history."""
        stream_time = self.stream_time
        return MIN_TIME if stream_time == MIN_TIME else stream_time - self.history_ms

    # Writes: the engine's, from the table's topic.

    def write_records(self, records: Iterable[Any]) -> None:
        """The topic's records (`key`, `value` in bytes, `timestamp`), each a version of its key; a
        record without a value deletes its key from its timestamp on."""
        put = self.put_encoded
        for record in records:
            put(record.key, record.timestamp, record.value)

    def restore(self, records: Iterable[Any], next_offset: int) -> None:
        """The topic's records read by a restore, written with the offset after them in one write."""
        self.write_records(records)
        self.write_stream_time()
        self._store.flush(next_offset)

    def put_encoded(self, key: bytes, timestamp: int, value: bytes | None) -> bool:
        """A version of `key` valid from `timestamp` (`None`: a deletion). False, and nothing written, when
        it is older than the history: KIP-889's grace period."""
        if timestamp < self.cutoff:
            return False
        self._stream_time = max(self._stream_time, timestamp)
        store = self._store
        version = _VALID_FROM.pack(timestamp) + (_HAS_VALUE + value if value is not None else b"")
        latest_entry = LATEST_VERSION + key
        latest = store.get(latest_entry)
        if latest is None:
            store.put(latest_entry, version)
            if value is None:
                store.put(version_index(key, timestamp), b"")
            return True
        latest_from = _valid_from(latest)
        if timestamp >= latest_from:
            if timestamp > latest_from:  # the latest becomes history, valid until this one
                store.put(version_entry(key, timestamp), latest)
                store.put(version_index(key, timestamp), b"")
            elif value is None:
                store.put(version_index(key, timestamp), b"")
            store.put(latest_entry, version)
            return True
        self._insert_past(key, timestamp, version, latest_from)
        return True

    def _insert_past(self, key: bytes, timestamp: int, version: bytes, latest_from: int) -> None:
        """A version older than the latest: it ends where the version after it starts, and a version valid
        at its time now ends at it."""
        store = self._store
        following = self._first_ending_after(key, timestamp)
        if following is None:  # older than every version: valid until the earliest
            store.put(version_entry(key, latest_from), version)
            store.put(version_index(key, latest_from), b"")
            return
        ends, stored = following
        starts = _valid_from(stored)
        if starts > timestamp:  # before the earliest past version
            store.put(version_entry(key, starts), version)
            store.put(version_index(key, starts), b"")
        elif starts == timestamp:  # the same time: replaces it
            store.put(version_entry(key, ends), version)
        else:  # splits it: the older part ends at this one, which ends where it did
            store.put(version_entry(key, timestamp), stored)
            store.put(version_index(key, timestamp), b"")
            store.put(version_entry(key, ends), version)

    def _first_ending_after(self, key: bytes, timestamp: int) -> tuple[int, bytes] | None:
        """The past version of `key` that ends first after `timestamp`: (its end, its stored bytes)."""
        prefix = versions_of(key)
        bounds = time_range(prefix, timestamp + 1, MAX_TIME)
        if bounds is None:
            return None
        for entry, stored in self._store.range(*bounds):
            return time_at(entry, len(prefix)), stored
        return None

    # Reads.

    def get(self, key: Any, default: Any = None) -> Any:
        """The latest value of `key` (`default` when it has none, or its latest version is a deletion)."""
        latest = self._store.get(LATEST_VERSION + self._keys.serialize(key))
        return (
            default if latest is None or len(latest) == _VALID_FROM.size else self._values.deserialize(latest[_HEAD:])
        )

    def get_as_of(self, key: Any, timestamp: int, default: Any = None) -> Any:
        """The value of `key`'s latest version valid from `timestamp` or earlier; `default` when that is a
        deletion, when there is none, or when `timestamp` is older than the history and the latest
        version is younger than it."""
        key_bytes = self._keys.serialize(key)
        latest = self._store.get(LATEST_VERSION + key_bytes)
        if latest is not None and _valid_from(latest) <= timestamp:
            return self._decoded(latest, default)
        if timestamp < self.cutoff:
            return default
        following = self._first_ending_after(key_bytes, timestamp)
        if following is None or _valid_from(following[1]) > timestamp:
            return default
        return self._decoded(following[1], default)

    def range(self, start: Any = None, end: Any = None) -> Iterator[tuple[Any, Any]]:
        """Latest values, decoded, with `start <= key < end` by encoded key bytes; `None` leaves a side open."""
        lower = LATEST_VERSION if start is None else LATEST_VERSION + self._keys.serialize(start)
        upper = _LATEST_END if end is None else LATEST_VERSION + self._keys.serialize(end)
        return self._live(self._store.range(lower, upper))

    def prefix(self, prefix: bytes | str) -> Iterator[tuple[Any, Any]]:
        """Latest values, decoded, whose encoded key starts with `prefix` (UTF-8 when a `str`), in key order."""
        raw = LATEST_VERSION + (prefix.encode() if isinstance(prefix, str) else prefix)
        return self._live(self._store.range(raw, prefix_end(raw)))

    def approximate_count(self) -> int:
        """The backend's estimate of its entries: every key's latest version and the history besides."""
        return self._store.approximate_count()

    # The engine's upkeep.

    def expire(self, limit: int = EXPIRE_STEP) -> int:
        """Drop up to `limit` versions that ended at or before the cutoff, in time order (the engine calls
        this at each commit): a version still valid at the cutoff stays, and a key whose latest version
        is a deletion from before the cutoff goes. Returns how many index entries it took."""
        cutoff = self.cutoff
        bounds = time_range(VERSION_INDEX, self._expired_below, cutoff)
        if bounds is None:
            return 0
        store = self._store
        due = list(islice(store.range(*bounds), limit))
        for index, _ in due:
            key, time = version_of_index(index)
            store.delete(version_entry(key, time))
            latest = store.get(LATEST_VERSION + key)
            if latest is not None and len(latest) == _VALID_FROM.size and _valid_from(latest) == time:
                store.delete(LATEST_VERSION + key)
            store.delete(index)
        # A full step stops within a time, which more entries may share; a write at the cutoff itself (not
        # refused) may still end a version there, so the next scan starts at it.
        self._expired_below = version_of_index(due[-1][0])[1] if len(due) == limit else cutoff
        return len(due)

    def write_stream_time(self) -> None:
        """Put the stream time into the store when it moved since it was last put there, so a restart
        keeps the history's cutoff: the engine calls this before a commit flushes the store."""
        now = self.stream_time
        if now > self._written_time:
            self._store.put(STREAM_TIME_KEY, STREAM_TIME.pack(now))
            self._written_time = now

    def layout_fits(self) -> bool:
        """Whether the store holds only this layout's keys (a table that had no history when it was
        written holds the topic's keys as they are)."""
        foreign: tuple[tuple[bytes | None, bytes | None], ...] = (
            (None, STREAM_TIME_KEY),
            (STREAM_TIME_KEY + b"\x00", VERSION),
            (_LATEST_END, None),
        )
        return not any(True for low, high in foreign for _ in islice(self._store.range(low, high), 1))

    def check_layout(self) -> None:
        if not self.layout_fits():
            raise layout_refused(self.name, "table with history_ms")

    def _decoded(self, version: bytes, default: Any) -> Any:
        return default if len(version) == _VALID_FROM.size else self._values.deserialize(version[_HEAD:])

    def _live(self, pairs: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[Any, Any]]:
        at, decode_key, decode_value = len(LATEST_VERSION), self._keys.deserialize, self._values.deserialize
        for entry, version in pairs:
            if len(version) > _VALID_FROM.size:
                yield decode_key(entry[at:]), decode_value(version[_HEAD:])

    def _reread(self) -> None:
        """The store changed under the view (restored, or an aborted transaction's writes dropped)."""
        stored = self._store.get(STREAM_TIME_KEY)
        self._stream_time = self._written_time = MIN_TIME if stored is None else int(STREAM_TIME.unpack(stored)[0])
        self._expired_below = MIN_TIME  # what was removed is unknown: the next expiry scans from the start
        self._generation = self._store.generation


class VersionedTableView:
    """What `ctx.table(name)` hands a processor for a table with history: reads only."""

    def __init__(self, versions: VersionedStore):
        self._versions = versions

    @property
    def name(self) -> str:
        return self._versions.name

    @property
    def history_ms(self) -> int | None:
        return self._versions.history_ms

    def get(self, key: Any, default: Any = None) -> Any:
        return self._versions.get(key, default)

    def get_as_of(self, key: Any, timestamp: int, default: Any = None) -> Any:
        return self._versions.get_as_of(key, timestamp, default)

    def range(self, start: Any = None, end: Any = None) -> Iterator[tuple[Any, Any]]:
        return self._versions.range(start, end)

    def prefix(self, prefix: bytes | str) -> Iterator[tuple[Any, Any]]:
        return self._versions.prefix(prefix)

    def approximate_count(self) -> int:
        return self._versions.approximate_count()


def _valid_from(version: bytes) -> int:
    return int(_VALID_FROM.unpack_from(version)[0])
