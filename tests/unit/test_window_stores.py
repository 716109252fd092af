"""Window and session stores on both backends, operation by operation against a plain-Python model:
reads over unflushed writes, commits and aborts, expiry, changelog restores, and the key layout."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from stores import (
    BufferedKeyValueStore,
    MemoryBackend,
    SessionView,
    StoreError,
    WindowByTimeView,
    WindowView,
    open_backend,
)
from stores.expiring import EXPIRY_STEPS
from stores.layout import (
    ENTRY,
    INDEX,
    MAX_TIME,
    MIN_TIME,
    STREAM_TIME_KEY,
    WINDOW_BY_TIME,
    session_entry,
    session_of_index,
    time_bytes,
    window_by_time,
    window_entry,
    window_entry_of_index,
    window_index,
    window_of_index,
)
from stores.serdes import BytesSerde

Kind = Literal["memory", "rocksdb"]
KINDS: list[Kind] = ["memory", "rocksdb"]
RETENTION = 100
EXPIRED_LAG = RETENTION // EXPIRY_STEPS  # how far behind the cutoff removed entries may lag
Address = tuple[Any, ...]  # windows: (key, start); sessions: (key, start, end)

# Keys that are prefixes of each other, some continuing as the times of the shorter one's entries do:
# their entries must never mix.
keys = st.sampled_from([b"", b"a", b"ab", b"a\x00", b"a" + time_bytes(0)[:7], b"a" + time_bytes(-1)[:7], b"\xff"])
times = st.one_of(
    st.integers(-250, 250),
    st.sampled_from([MIN_TIME, MIN_TIME + 1, -(10**15), 10**15, MAX_TIME - 1, MAX_TIME]),
)
values = st.one_of(st.integers(-(2**63), 2**64 - 1), st.text(max_size=4), st.lists(st.integers(0, 9), max_size=3))


def raw_store(kind: Kind, directory: Path, name: str) -> BufferedKeyValueStore:
    """The bytes store under a view, as the runtime opens it."""
    return BufferedKeyValueStore(
        open_backend(kind, directory / name), BytesSerde(), BytesSerde(), name=name, changelog=True
    )


class StoreMachine(RuleBasedStateMachine):
    """The rules window and session stores share: stream time and expiry, commits (the changelog
    records, then the flush), aborts, restores from the changelog, and reopening the store.

    The model holds what the store must show: every entry not expired, pending or committed.
    """

    kind: Kind  # set by `on_backend`

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp())
        self.raw = raw_store(self.kind, self.directory, "store")
        self.store = self.view(self.raw)
        self.entries: dict[Address, Any] = {}
        self.stream_time = -1
        self.committed: tuple[dict[Address, Any], int] = ({}, -1)
        self.changelog: list[tuple[bytes, bytes | None]] = []
        self.restores = 0

    # What differs by kind.
    def view(self, raw: BufferedKeyValueStore) -> Any:
        raise NotImplementedError

    def contents(self, store: Any) -> list[tuple[Any, ...]]:
        """Every entry the store shows, as `fetch_all` over all time gives them."""
        raise NotImplementedError

    def expected(self, entries: dict[Address, Any]) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def expires_by(self, address: Address) -> int:
        raise NotImplementedError

    def index_target(self, index: bytes) -> tuple[bytes, int]:
        """The entry an index key names, and the time it expires by."""
        raise NotImplementedError

    @property
    def cutoff(self) -> int:
        return self.stream_time - RETENTION

    def expired(self, address: Address) -> bool:
        return self.expires_by(address) < self.cutoff

    @rule(timestamp=times)
    def advance(self, timestamp: int) -> None:
        assert self.store.advance(timestamp) == max(self.stream_time, timestamp)
        if timestamp > self.stream_time:
            self.stream_time = timestamp
            self.entries = {address: value for address, value in self.entries.items() if not self.expired(address)}
            # Removed from the store, not only hidden, up to an eighth of the retention behind the cutoff.
            stored = [time for _, time in self.indexed()]
            assert all(time > self.cutoff - EXPIRED_LAG for time in stored), (stored, self.cutoff)

    @rule()
    def commit(self) -> None:
        self.store.write_stream_time()  # as the engine does before it takes the changes
        self.changelog.extend(self.raw.take_changes().items())
        self.raw.flush(len(self.changelog))
        self.committed = (dict(self.entries), self.stream_time)

    @rule()
    def abort(self) -> None:
        self.raw.discard()
        self.entries, self.stream_time = dict(self.committed[0]), self.committed[1]

    @rule()
    def restore_from_the_changelog(self) -> None:
        """A new store fed the committed changelog records, in two batches, shows the committed state."""
        self.restores += 1
        restored = raw_store(self.kind, self.directory, f"restored-{self.restores}")
        try:
            view = self.view(restored)
            assert view.stream_time == -1
            middle = len(self.changelog) // 2
            restored.restore(self.changelog[:middle], middle)
            restored.restore(self.changelog[middle:], len(self.changelog))
            entries, stream_time = self.committed
            assert view.stream_time == stream_time
            live = {address: value for address, value in entries.items()
                    if self.expires_by(address) >= stream_time - RETENTION}  # fmt: skip
            assert self.contents(view) == self.expected(live)
        finally:
            restored.close()

    @rule()
    def reopen(self) -> None:
        """Closing drops the pending writes; RocksDB keeps the committed ones, memory restores them."""
        self.raw.close()
        self.raw = raw_store(self.kind, self.directory, "store")
        if self.kind == "memory":
            self.raw.restore(self.changelog, len(self.changelog))
        self.store = self.view(self.raw)
        self.entries, self.stream_time = dict(self.committed[0]), self.committed[1]

    @invariant()
    def shows_the_model(self) -> None:
        assert self.store.stream_time == self.stream_time
        assert self.contents(self.store) == self.expected(self.entries)

    @invariant()
    def indexes_every_entry_once(self) -> None:
        stored = [key for key, _ in self.raw.range()]
        assert all(key.startswith((ENTRY, INDEX)) or key == STREAM_TIME_KEY for key in stored)
        entries = [key for key in stored if key.startswith(ENTRY)]
        assert sorted(entry for entry, _ in self.indexed()) == entries

    def indexed(self) -> Iterator[tuple[bytes, int]]:
        return (self.index_target(key) for key, _ in self.raw.prefix(INDEX))

    def teardown(self) -> None:
        self.raw.close()
        shutil.rmtree(self.directory)


class WindowMachine(StoreMachine):
    def view(self, raw: BufferedKeyValueStore) -> WindowView:
        return WindowView(raw, RETENTION, BytesSerde())

    def contents(self, store: WindowView) -> list[tuple[Any, ...]]:
        return list(store.fetch_all(MIN_TIME, MAX_TIME))

    def expected(self, entries: dict[Address, Any]) -> list[tuple[Any, ...]]:
        ordered = sorted(entries, key=lambda address: (address[1], address[0]))
        return [(key, start, entries[key, start]) for key, start in ordered]

    def expires_by(self, address: Address) -> int:
        return int(address[1])

    def index_target(self, index: bytes) -> tuple[bytes, int]:
        key, start = window_of_index(index)
        return window_entry(key, start), start

    @rule(key=keys, start=times, value=values)
    def put(self, key: bytes, start: int, value: Any) -> None:
        assert self.store.put(key, start, value) == (start >= self.cutoff)
        if start >= self.cutoff:
            self.entries[key, start] = value

    @rule(key=keys, start=times, value=values)
    def get_then_put(self, key: bytes, start: int, value: Any) -> None:
        """The operators' update: the put skips the index entry the get found."""
        assert self.store.get(key, start, "none") == self.entries.get((key, start), "none")
        self.put(key, start, value)

    @rule(key=keys, start=times)
    def delete(self, key: bytes, start: int) -> None:
        self.store.delete(key, start)
        self.entries.pop((key, start), None)

    @rule(key=keys, bounds=st.tuples(times, times))
    def fetch(self, key: bytes, bounds: tuple[int, int]) -> None:
        low, high = bounds
        expected = sorted(
            (start, value) for (k, start), value in self.entries.items() if k == key and low <= start <= high
        )
        assert list(self.store.fetch(key, low, high)) == expected

    @rule(bounds=st.tuples(times, times))
    def fetch_all(self, bounds: tuple[int, int]) -> None:
        low, high = bounds
        expected = [entry for entry in self.expected(self.entries) if low <= entry[1] <= high]
        assert list(self.store.fetch_all(low, high)) == expected

    @rule(bounds=st.tuples(times, times))
    def emit_and_delete(self, bounds: tuple[int, int]) -> None:
        """Deleting each window as `fetch_all` yields it (final results) skips none of the others."""
        low, high = bounds
        expected = [entry for entry in self.expected(self.entries) if low <= entry[1] <= high]
        seen = []
        for key, start, value in self.store.fetch_all(low, high):
            seen.append((key, start, value))
            self.delete(key, start)
        assert seen == expected

    @rule(bounds=st.tuples(times, times))
    def take_all(self, bounds: tuple[int, int]) -> None:
        """Final results: taken and deleted at once, the times then skipped by expiry (`advance` checks
        that every entry it should remove is still removed, also those written there again later)."""
        low, high = bounds
        expected = [entry for entry in self.expected(self.entries) if low <= entry[1] <= high]
        assert self.store.take_all(low, high) == expected
        for key, start, _ in expected:
            del self.entries[key, start]


class WindowByTimeMachine(WindowMachine):
    """The same model through a store laid out by time: no per-key range reads, one key per window."""

    def view(self, raw: BufferedKeyValueStore) -> WindowByTimeView:
        return WindowByTimeView(raw, RETENTION, BytesSerde())

    def indexed(self) -> Iterator[tuple[bytes, int]]:
        return ((entry, window_of_index(entry)[1]) for entry, _ in self.raw.prefix(WINDOW_BY_TIME))

    @invariant()
    def indexes_every_entry_once(self) -> None:
        stored = [key for key, _ in self.raw.range()]
        assert all(key.startswith(WINDOW_BY_TIME) or key == STREAM_TIME_KEY for key in stored)

    @rule(key=keys, bounds=st.tuples(times, times))
    def fetch(self, key: bytes, bounds: tuple[int, int]) -> None:
        with pytest.raises(TypeError, match="window_by_time store, laid out by time"):
            self.store.fetch(key, *bounds)


class SessionMachine(StoreMachine):
    def view(self, raw: BufferedKeyValueStore) -> SessionView:
        return SessionView(raw, RETENTION, BytesSerde())

    def contents(self, store: SessionView) -> list[tuple[Any, ...]]:
        return list(store.fetch_all(MIN_TIME, MAX_TIME))

    def expected(self, entries: dict[Address, Any]) -> list[tuple[Any, ...]]:
        ordered = sorted(entries, key=lambda address: (address[2], address[1], address[0]))
        return [(*address, entries[address]) for address in ordered]

    def expires_by(self, address: Address) -> int:
        return int(address[2])

    def index_target(self, index: bytes) -> tuple[bytes, int]:
        key, start, end = session_of_index(index)
        return session_entry(key, start, end), end

    @rule(key=keys, span=st.tuples(times, times), value=values)
    def put(self, key: bytes, span: tuple[int, int], value: Any) -> None:
        start, end = sorted(span)
        assert self.store.put(key, start, end, value) == (end >= self.cutoff)
        if end >= self.cutoff:
            self.entries[key, start, end] = value

    @rule(key=keys, earliest_end=times, latest_start=times, value=values)
    def find_then_put(self, key: bytes, earliest_end: int, latest_start: int, value: Any) -> None:
        """`find` as a session window does it; a session found and written again skips its index entry."""
        expected = sorted(
            ((start, end, v) for (k, start, end), v in self.entries.items()
             if k == key and end >= earliest_end and start <= latest_start),
            key=lambda session: (session[1], session[0]),
        )  # fmt: skip
        found = list(self.store.find(key, earliest_end, latest_start))
        assert found == expected
        if found:
            start, end, _ = found[-1]
            self.put(key, (start, end), value)

    @rule(key=keys, span=st.tuples(times, times))
    def delete(self, key: bytes, span: tuple[int, int]) -> None:
        start, end = sorted(span)
        self.store.delete(key, start, end)
        self.entries.pop((key, start, end), None)

    @rule(bounds=st.tuples(times, times))
    def fetch_all(self, bounds: tuple[int, int]) -> None:
        low, high = bounds
        expected = [entry for entry in self.expected(self.entries) if low <= entry[2] <= high]
        assert list(self.store.fetch_all(low, high)) == expected


# The memory store explores the model at length; RocksDB, slower per step, runs the same machine as a check
# that the real store agrees with it, on fewer examples of the same length.
MACHINE_SETTINGS: dict[Kind, settings] = {
    "memory": settings(max_examples=60, stateful_step_count=40, deadline=None),
    "rocksdb": settings(max_examples=20, stateful_step_count=40, deadline=None),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("machine", [WindowMachine, WindowByTimeMachine, SessionMachine])
def test_store_shows_what_the_model_holds(machine: type[StoreMachine], kind: Kind) -> None:
    on_backend = type(f"{machine.__name__}On{kind.title()}", (machine,), {"kind": kind})
    run_state_machine_as_test(on_backend, settings=MACHINE_SETTINGS[kind])


def memory_store() -> BufferedKeyValueStore:
    return BufferedKeyValueStore(MemoryBackend(), BytesSerde(), BytesSerde(), name="w", changelog=True)


def test_an_update_after_a_get_writes_only_the_window() -> None:
    raw = memory_store()
    windows = WindowView(raw, RETENTION)
    assert windows.get("k", 0) is None
    windows.put("k", 0, 1)
    assert len(raw.take_changes()) == 2, "a new window: its entry and its index entry"
    windows.put("k", 0, windows.get("k", 0) + 1)
    assert list(raw.take_changes().values()) == [msgpack.packb(2)], "an update: the entry alone"
    windows.put("k", 10, 1)
    windows.put("k", 0, 3)  # not read before: its index entry is written again, as it may be new
    assert len(raw.take_changes()) == 4
    assert list(windows.fetch("k", 0, 10)) == [(0, 3), (10, 1)]


def test_a_window_laid_out_by_time_is_one_key_from_its_first_write_to_its_deletion() -> None:
    raw = memory_store()
    windows = WindowByTimeView(raw, RETENTION)
    windows.put("k", 0, windows.get("k", 0, 0) + 1)
    windows.put("k", 0, windows.get("k", 0) + 1)
    windows.put("j", 0, 1)
    entries = [window_by_time(msgpack.packb(key), 0) for key in ("j", "k")]
    assert raw.take_changes() == {entries[1]: msgpack.packb(2), entries[0]: msgpack.packb(1)}
    for key, start, _ in windows.fetch_all(0, 0):
        windows.delete(key, start)
    assert raw.take_changes() == {entries[1]: None, entries[0]: None}
    assert list(windows.fetch_all(MIN_TIME, MAX_TIME)) == []


def test_a_store_holding_another_kinds_layout_is_refused() -> None:
    """A tumbling Aggregate's store written as kind window, then restored into kind window_by_time (or back)."""
    raw = memory_store()
    WindowView(raw, RETENTION).put("k", 0, 1)
    WindowView(raw, RETENTION).check_layout()
    with pytest.raises(StoreError, match="store 'w' holds entries laid out for another kind than window_by_time"):
        WindowByTimeView(raw, RETENTION).check_layout()
    raw = memory_store()
    WindowByTimeView(raw, RETENTION).put("k", 0, 1)
    WindowByTimeView(raw, RETENTION).check_layout()
    for other in (WindowView, SessionView):
        with pytest.raises(StoreError, match=f"another kind than {other.kind}.*--delete-state --delete-changelogs"):
            other(raw, RETENTION).check_layout()


def test_a_session_found_and_written_back_writes_only_its_entry() -> None:
    raw = memory_store()
    sessions = SessionView(raw, RETENTION)
    sessions.put("k", 0, 5, 1)
    raw.take_changes()
    [(start, end, count)] = sessions.find("k", 3, 3)
    sessions.put("k", start, end, count + 1)
    assert list(raw.take_changes().values()) == [msgpack.packb(2)]
    sessions.delete("k", 0, 5)
    sessions.put("k", 0, 9, 3)  # extended: a new end, so a new index entry
    assert len(raw.take_changes()) == 4
    assert list(sessions.find("k", 0, 100)) == [(0, 9, 3)]


def test_expired_windows_are_hidden_at_once_and_removed_every_eighth_of_the_retention() -> None:
    raw = memory_store()
    windows = WindowView(raw, 800)
    windows.advance(1)
    windows.put("k", 0, "w")
    windows.put("k", 100, "w")
    windows.advance(800)
    assert windows.get("k", 0) == "w"
    windows.advance(801)
    assert (windows.get("k", 0), list(windows.fetch_all(0, 100))) == (None, [("k", 100, "w")])
    assert not windows.put("k", 0, "late")
    assert len(list(raw.prefix(INDEX))) == 2, "removed only when the cutoff has moved on by 100 ms"
    windows.advance(900)
    assert [window_of_index(index) for index, _ in raw.prefix(INDEX)] == [(msgpack.packb("k"), 100)]
    assert raw.take_changes()[window_entry(msgpack.packb("k"), 0)] is None, "a tombstone for the changelog"


def test_default_serdes_are_msgpack_and_times_sort_as_numbers() -> None:
    windows = WindowView(memory_store(), RETENTION)
    starts = [-(2**40), -300, -1, 0, 1, 255, 256, 2**40]
    windows.advance(2**40)
    for start in reversed(starts):
        windows.put(("account", 7), start, {"count": start})
    assert windows.stream_time == 2**40
    assert list(windows.fetch(("account", 7), MIN_TIME, MAX_TIME)) == [(2**40, {"count": 2**40})]  # the rest expired
    lenient = WindowView(memory_store(), 2**50)
    for start in reversed(starts):
        lenient.put(("account", 7), start, {"count": start})
    assert list(lenient.fetch(("account", 7), MIN_TIME, MAX_TIME)) == [(start, {"count": start}) for start in starts]
    assert [start for _, start, _ in lenient.fetch_all(-300, 256)] == [-300, -1, 0, 1, 255, 256]


@settings(max_examples=200)
@given(st.lists(st.integers(MIN_TIME, MAX_TIME), min_size=2))
def test_time_bytes_sort_as_the_times(times: list[int]) -> None:
    assert sorted(times, key=time_bytes) == sorted(times)


def test_retention_and_session_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="retention_ms must be positive"):
        WindowView(memory_store(), 0)
    with pytest.raises(ValueError, match=r"cannot start \(5\) after it ends \(4\)"):
        SessionView(memory_store(), RETENTION).put("k", 5, 4, 1)


@given(key=st.binary(max_size=300), start=times)
def test_a_window_entry_and_its_index_entry_name_each_other(key: bytes, start: int) -> None:
    entry, index = window_entry(key, start), window_index(key, start)
    assert entry == ENTRY + len(key).to_bytes(4, "big") + key + time_bytes(start)
    assert index == INDEX + time_bytes(start) + key
    assert window_entry_of_index(index) == entry


def test_a_put_after_a_get_writes_under_the_key_as_it_is_then() -> None:
    """The key's bytes are reused from the `get` only for a key that cannot have changed since."""
    windows = WindowView(memory_store(), RETENTION)
    key = ["a"]
    windows.get(key, 100)
    key[0] = "b"
    windows.put(key, 100, 1)
    assert (windows.get(["a"], 100), windows.get(["b"], 100)) == (None, 1)
