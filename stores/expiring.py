"""What window and session stores share: an observed stream time, and the expiry it drives.

The stream time is an entry of the store itself (stores/layout.py), so it is committed, logged and
restored with the entries it expired. It moves with nearly every record, so it is written into the
store when the commit takes the store's changes (`write_stream_time`), not at each record.

Entries older than `stream_time - retention_ms` are hidden from reads at once, and removed (with their
index entries, so the changelog gets tombstones) by a scan of the keys in time order each time the
cutoff has moved on by an eighth of the retention: the per-record cost of `advance` stays a comparison,
and the store holds at most 9/8 of the retention.
"""

from __future__ import annotations

from collections.abc import Callable

from processors.serdes import Serde
from stores.errors import layout_refused
from stores.layout import MIN_TIME, STREAM_TIME, STREAM_TIME_KEY, WINDOW_BY_TIME, StoreKind, time_range
from stores.serdes import resolve_serde
from stores.store import BufferedKeyValueStore

EXPIRY_STEPS = 8
"""Expiry scans per retention period."""


class ExpiringStore:
    """A view over a bytes-keyed `BufferedKeyValueStore`, which keeps doing the buffering, changelog and restore.

    `kind` names the store kind it serves, `_foreign_tags` the ranges of tags its layout never writes.
    `by_time` is the tag of the keys in time order (stores/layout.py): a time index, whose keys name
    their entries by `entry_of_index`, or the entries themselves (`entry_of_index` None).
    """

    kind: StoreKind
    _foreign_tags: tuple[tuple[bytes, bytes | None], ...] = ((WINDOW_BY_TIME, None),)

    def __init__(
        self,
        store: BufferedKeyValueStore,
        retention_ms: int,
        key_serde: Serde | None,
        value_serde: Serde | None,
        by_time: bytes,
        entry_of_index: Callable[[bytes], bytes] | None,
    ) -> None:
        if retention_ms <= 0:
            raise ValueError(f"store '{store.name}': retention_ms must be positive, got {retention_ms}")
        self._store = store
        self._retention = retention_ms
        self._keys = key_serde or resolve_serde("msgpack")
        self._values = value_serde or resolve_serde("msgpack")
        self._by_time = by_time
        self._entry_of_index = entry_of_index
        self._expire_every = max(1, retention_ms // EXPIRY_STEPS)
        self._generation = -1  # below the store's: the first call reads the stream time
        self._stream_time = -1
        self._stream_time_written = True
        self._next_expiry = MIN_TIME
        self._expired_below: int | None = None
        # Times (inclusive) whose entries were all taken at once (`WindowStore.take_all`), so the expiry
        # scans that reach them need not step over the tombstones left there.
        self._emptied: tuple[int, int] | None = None
        # The entry last seen to exist (a window's `get`, a session `find` yielded): a `put` of it
        # need not write its index entry again, which saves a write and a changelog record.
        self._known: bytes | None = None

    @property
    def name(self) -> str:
        return self._store.name

    def check_layout(self) -> None:
        """Refuse a store that holds keys of another kind's layout (stores/layout.py): its processor
        declared another kind when they were written, and this kind would never read or expire them."""
        for low, high in self._foreign_tags:
            for _ in self._store.range(low, high):
                raise layout_refused(self.name, self.kind)

    @property
    def retention_ms(self) -> int:
        return self._retention

    @property
    def stream_time(self) -> int:
        """The largest timestamp observed (`advance`), or -1 before the first."""
        if self._generation != self._store.generation:
            self._reread()
        return self._stream_time

    def advance(self, timestamp: int) -> int:
        """Stream time becomes the larger of the two; entries past the retention leave. Returns it."""
        if self._generation != self._store.generation:
            self._reread()
        if timestamp > self._stream_time:
            self._stream_time = timestamp
            self._stream_time_written = False
            if timestamp - self._retention >= self._next_expiry:
                self._expire(timestamp - self._retention)
        return self._stream_time

    def write_stream_time(self) -> None:
        """Put the stream time into the store, when it moved since it was last put there: the engine calls
        this before a commit takes the store's changes."""
        if not self._stream_time_written and self._generation == self._store.generation:
            self._store.put(STREAM_TIME_KEY, STREAM_TIME.pack(self._stream_time))
        self._stream_time_written = True

    def _cutoff(self) -> int:
        """Entries below it (windows by start, sessions by end) have expired."""
        if self._generation != self._store.generation:
            self._reread()
        return self._stream_time - self._retention

    def _note_emptied(self, earliest: int, latest: int) -> None:
        """No entry is left at times `earliest..latest`: joined to the times known empty when the two meet."""
        emptied = self._emptied
        if emptied is not None and earliest <= emptied[1] + 1 and latest >= emptied[0] - 1:
            earliest, latest = min(earliest, emptied[0]), max(latest, emptied[1])
        self._emptied = (earliest, latest)

    def _refill(self, time: int) -> None:
        """An entry written at `time`: the times known empty no longer are, if they held it."""
        emptied = self._emptied
        if emptied is not None and emptied[0] <= time <= emptied[1]:
            self._emptied = None

    def _expire(self, cutoff: int) -> None:
        # From where the last scan ended, and around the times known empty: RocksDB would step over the
        # tombstones left there, one by one.
        earliest = MIN_TIME if self._expired_below is None else self._expired_below
        spans = [(earliest, cutoff - 1)]
        if self._emptied is not None:
            low, high = self._emptied
            spans = [(earliest, min(cutoff - 1, low - 1)), (max(earliest, high + 1), cutoff - 1)]
        store, entry_of_index = self._store, self._entry_of_index
        for first, last in spans:
            bounds = time_range(self._by_time, first, last)
            if bounds is None:
                continue
            for key, _ in list(store.range(*bounds)):
                if entry_of_index is not None:
                    store.delete(entry_of_index(key))
                store.delete(key)
        self._expired_below = cutoff
        self._next_expiry = cutoff + self._expire_every
        self._known = None

    def _reread(self) -> None:
        """The store changed under the view (restored, or an aborted transaction's writes dropped)."""
        stored = self._store.get(STREAM_TIME_KEY)
        self._stream_time = -1 if stored is None else int(STREAM_TIME.unpack(stored)[0])
        self._stream_time_written = True
        self._next_expiry = MIN_TIME  # what was removed is unknown: the next advance scans
        self._expired_below = None
        self._emptied = None
        self._generation = self._store.generation
        self._known = None
