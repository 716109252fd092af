"""The versioned store of a table with history, on both backends: as-of reads, updates out of order,
deletions, KIP-889's expiry rule and grace period, and what a reopened store still knows."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stores import Backend, BufferedKeyValueStore, open_backend
from stores.serdes import RawSerde, StrSerde
from stores.versioned import VersionedStore, VersionedTableView

Kind = Literal["memory", "rocksdb"]
HISTORY = 100


@pytest.fixture(params=["memory", "rocksdb"])
def kind(request: pytest.FixtureRequest) -> Kind:
    kind: Kind = request.param
    return kind


@pytest.fixture
def new_backend(kind: Kind, tmp_path: Path) -> Iterator[Callable[[], Backend]]:
    opened: list[Backend] = []

    def make() -> Backend:
        backend = open_backend(kind, tmp_path / "db")
        opened.append(backend)
        return backend

    yield make
    for backend in opened:
        backend.close()


def versioned(backend: Backend, history_ms: int = HISTORY) -> VersionedStore:
    store = BufferedKeyValueStore(backend, RawSerde(), RawSerde(), name="profiles")
    return VersionedStore(store, history_ms, StrSerde(), StrSerde())


def put(store: VersionedStore, key: str, timestamp: int, value: str | None) -> bool:
    return store.put_encoded(key.encode(), timestamp, None if value is None else value.encode())


def test_a_read_as_of_a_time_gets_the_version_valid_then(new_backend: Callable[[], Backend]) -> None:
    store = versioned(new_backend())
    put(store, "k", 10, "a")
    put(store, "k", 20, "b")
    store._store.flush()  # some versions in the backend, the rest pending
    put(store, "k", 30, "c")
    assert [store.get_as_of("k", t) for t in (9, 10, 19, 20, 29, 30, 1000)] == [None, "a", "a", "b", "b", "c", "c"]
    assert store.get("k") == "c"
    assert store.get_as_of("other", 30) is None


def test_an_update_out_of_order_takes_its_place_in_history_and_leaves_the_latest(
    new_backend: Callable[[], Backend],
) -> None:
    store = versioned(new_backend())
    put(store, "k", 50, "latest")
    assert put(store, "k", 20, "older")  # before every version
    assert put(store, "k", 35, "between")  # splits "older"
    assert put(store, "k", 20, "older, again")  # the same time replaces it
    assert store.get("k") == "latest"
    assert [store.get_as_of("k", t) for t in (19, 20, 34, 35, 49, 50)] == [
        None, "older, again", "older, again", "between", "between", "latest",
    ]  # fmt: skip


def test_a_deletion_is_a_version_until_the_next_one(new_backend: Callable[[], Backend]) -> None:
    store = versioned(new_backend())
    put(store, "k", 10, "a")
    put(store, "k", 20, None)
    put(store, "k", 30, "c")
    put(store, "k", 25, None)  # out of order: no value from 25 until 30 either
    assert [store.get_as_of("k", t, "-") for t in (10, 20, 25, 29, 30)] == ["a", "-", "-", "-", "c"]
    put(store, "k", 40, None)
    assert store.get("k") is None
    assert put(store, "k", 35, "late") and store.get("k") is None, "an older update does not undo a later deletion"
    assert store.get_as_of("k", 36) == "late"
    assert list(store.range()) == []


def test_expiry_keeps_the_version_valid_at_the_cutoff(new_backend: Callable[[], Backend]) -> None:
    store = versioned(new_backend())
    for timestamp, value in [(0, "v0"), (10, "v10"), (20, "v20"), (130, "v130")]:
        put(store, "k", timestamp, value)
    put(store, "gone", 5, "x")
    put(store, "gone", 15, None)
    assert store.cutoff == 30
    store.expire()
    store._store.flush()
    # v0 and v10 ended before the cutoff; v20 is valid at it; the deletion of "gone" at 15 took its key.
    assert store.get_as_of("k", 30) == "v20"
    assert store.get_as_of("k", 29) is None, "older than the history: nothing, as KIP-889"
    assert store.get_as_of("k", 130) == "v130"
    assert store.get_as_of("k", 10**6) == "v130"
    stored = [key for key, _ in store._store.range()]
    assert not any(b"gone" in key for key in stored)
    assert sum(1 for key in stored if key.startswith(b"\x06")) == 1, "only v20 is left in the history"


def test_a_read_older_than_the_history_still_finds_a_latest_version_valid_then(
    new_backend: Callable[[], Backend],
) -> None:
    store = versioned(new_backend())
    put(store, "old", 0, "kept")
    put(store, "k", 500, "now")
    assert store.get_as_of("old", 1) == "kept", "the latest version never expires"
    assert store.get_as_of("k", 1) is None


def test_a_write_older_than_the_history_is_refused(new_backend: Callable[[], Backend]) -> None:
    store = versioned(new_backend())
    put(store, "k", 200, "now")
    assert not put(store, "k", 99, "too late")
    assert put(store, "k", 100, "just in time")
    assert store.get_as_of("k", 100) == "just in time"
    assert store.get_as_of("k", 99) is None


def test_a_reopened_store_keeps_its_stream_time_and_answers_as_before(tmp_path: Path) -> None:
    store = versioned(open_backend("rocksdb", tmp_path / "db"))
    put(store, "k", 10, "a")
    put(store, "k", 150, "b")
    store.write_stream_time()
    store._store.flush(7)
    store._store.close()
    reopened = versioned(open_backend("rocksdb", tmp_path / "db"))
    try:
        assert reopened.stream_time == 150 and reopened.cutoff == 50
        assert reopened.get_as_of("k", 60) == "a" and reopened.get_as_of("k", 49) is None
        assert not put(reopened, "k", 40, "too late")
        assert reopened._store.changelog_offset() == 7
    finally:
        reopened._store.close()


def test_an_aborted_transaction_leaves_the_stream_time_as_committed(new_backend: Callable[[], Backend]) -> None:
    store = versioned(new_backend())
    put(store, "k", 100, "a")
    store.write_stream_time()
    store._store.flush()
    put(store, "k", 900, "aborted")
    store._store.discard()
    assert store.stream_time == 100 and store.get("k") == "a"
    assert put(store, "k", 50, "within the history again")


def test_the_read_only_view_reads_latest_values_and_as_of() -> None:
    store = versioned(open_backend("memory"))
    put(store, "a", 1, "a1")
    put(store, "b", 1, "b1")
    put(store, "b", 5, None)
    view = VersionedTableView(store)
    assert view.history_ms == HISTORY and view.name == "profiles"
    assert list(view.range()) == [("a", "a1")] and list(view.prefix("a")) == [("a", "a1")]
    assert view.get("b", "none") == "none" and view.get_as_of("b", 4) == "b1"


@dataclass
class Model:
    """What KIP-889 says a versioned store answers, kept as every version ever accepted."""

    history: int
    stream_time: int | None = None

    def __post_init__(self) -> None:
        self.versions: dict[str, dict[int, str | None]] = {}

    def cutoff(self) -> int | None:
        return None if self.stream_time is None else self.stream_time - self.history

    def put(self, key: str, timestamp: int, value: str | None) -> bool:
        cutoff = self.cutoff()
        if cutoff is not None and timestamp < cutoff:
            return False
        self.stream_time = timestamp if self.stream_time is None else max(self.stream_time, timestamp)
        self.versions.setdefault(key, {})[timestamp] = value
        return True

    def get_as_of(self, key: str, timestamp: int) -> str | None:
        versions = self.versions.get(key, {})
        valid = [t for t in versions if t <= timestamp]
        if not valid:
            return None
        cutoff = self.cutoff()
        if cutoff is not None and timestamp < cutoff and max(valid) != max(versions):
            return None
        return versions[max(valid)]


steps = st.lists(
    st.tuples(
        st.sampled_from(["put", "put", "put", "flush", "expire"]),
        st.sampled_from(["a", "b"]),
        st.integers(0, 60),
        st.one_of(st.none(), st.sampled_from(["x", "y", "z"])),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(steps=steps)
def test_the_memory_store_answers_as_the_model(steps: list[tuple[str, str, int, str | None]]) -> None:
    store, model = versioned(open_backend("memory"), 20), Model(20)
    for action, key, timestamp, value in steps:
        if action == "put":
            assert put(store, key, timestamp, value) == model.put(key, timestamp, value)
        elif action == "flush":
            store._store.flush()
        else:
            store.expire(limit=2)
        for probe in range(-1, 62):
            assert store.get_as_of(key, probe) == model.get_as_of(key, probe), (key, probe)


def test_a_store_written_without_history_is_told_apart_from_one_with_it() -> None:
    plain = BufferedKeyValueStore(open_backend("memory"), RawSerde(), RawSerde(), name="profiles")
    plain.write_encoded(b"user-1", b"{}")
    plain.flush()
    assert not VersionedStore(plain, HISTORY).layout_fits()
    store = versioned(open_backend("memory"))
    put(store, "user-1", 5, "x")
    put(store, "user-1", 6, None)
    store.write_stream_time()
    store._store.flush()
    assert store.layout_fits() and store._store.holds_stream_time()


def test_a_version_that_a_write_at_the_cutoff_ends_is_expired_too(new_backend: Callable[[], Backend]) -> None:
    store = versioned(new_backend())
    put(store, "k3", 5, "old")
    put(store, "k", 10, "a")
    put(store, "k", 110, "b")
    assert store.cutoff == 10 and store.expire() == 0
    assert put(store, "k3", 10, "new"), "a write at the cutoff is not refused"
    assert store.expire() == 1
    store._store.flush()
    assert not [key for key, _ in store._store.range(b"\x06", b"\x07") if b"k3" in key]
    assert store.get_as_of("k3", 10) == "new" and store.get_as_of("k3", 9) is None
