"""State stores on both backends: reads over unflushed writes, offsets, damage, locks, restores."""

from __future__ import annotations

import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rocksdict import Options, Rdict, SstFileWriter

from stores import (
    Backend,
    BufferedKeyValueStore,
    MemoryBackend,
    RocksDBBackend,
    StoreCorrupted,
    StoreError,
    StoreLocked,
    StoreWriteFailed,
    open_backend,
    wipe,
)
from stores.ranges import overlay, prefix_end
from stores.serdes import BytesSerde, StrSerde

BackendFactory = Callable[[], Backend]
Kind = Literal["memory", "rocksdb"]
KINDS: list[Kind] = ["memory", "rocksdb"]


@pytest.fixture(params=KINDS)
def new_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackendFactory]:
    """Makes fresh backends of one kind and closes them after the test."""
    opened: list[Backend] = []

    def make() -> Backend:
        backend = open_backend(request.param, tmp_path / f"store-{len(opened)}")
        opened.append(backend)
        return backend

    yield make
    for backend in opened:
        backend.close()


def str_store(backend: Backend, **kwargs: Any) -> BufferedKeyValueStore:
    return BufferedKeyValueStore(backend, key_serde=StrSerde(), **kwargs)


def test_get_put_delete(new_backend: BackendFactory) -> None:
    store = BufferedKeyValueStore(new_backend())
    assert store.get("a") is None
    assert store.get("a", 0) == 0
    store.put("a", {"n": 1})
    store.put(7, [1, 2])
    assert store.get("a") == {"n": 1}
    assert store.get(7) == [1, 2]
    store.flush()
    store.put("a", {"n": 2})
    assert store.get("a") == {"n": 2}
    store.delete("a")
    assert store.get("a") is None
    store.flush()
    assert store.get("a") is None
    assert store.get(7) == [1, 2]


def test_range_follows_key_bytes_within_bounds(new_backend: BackendFactory) -> None:
    store = str_store(new_backend())
    for key in ["d", "b", "a", "c", "e", "ba"]:
        store.put(key, key.upper())
    store.flush()
    assert [key for key, _ in store.range()] == ["a", "b", "ba", "c", "d", "e"]
    assert list(store.range("b", "d")) == [("b", "B"), ("ba", "BA"), ("c", "C")]
    assert [key for key, _ in store.range(start="c")] == ["c", "d", "e"]
    assert [key for key, _ in store.range(end="b")] == ["a"]
    assert list(store.range("d", "b")) == []
    assert list(store.range("bb", "bc")) == []


def test_prefix_on_encoded_key_bytes(new_backend: BackendFactory) -> None:
    store = str_store(new_backend())
    for key in ["user:1", "user:2", "user:10", "userx", "use", "a"]:
        store.put(key, 1)
    store.flush()
    store.put("user:3", 1)
    assert [key for key, _ in store.prefix("user:")] == ["user:1", "user:10", "user:2", "user:3"]
    assert [key for key, _ in store.prefix(b"user")] == ["user:1", "user:10", "user:2", "user:3", "userx"]
    assert len(list(store.prefix(""))) == 7


def test_prefix_ending_in_ff_bytes(new_backend: BackendFactory) -> None:
    store = BufferedKeyValueStore(new_backend(), key_serde=BytesSerde())
    for key in [b"a", b"a\xff", b"a\xff\x00", b"a\xff\xff", b"b", b"\xff", b"\xff\x01"]:
        store.put(key, 0)
    store.flush()
    assert [key for key, _ in store.prefix(b"a\xff")] == [b"a\xff", b"a\xff\x00", b"a\xff\xff"]
    assert [key for key, _ in store.prefix(b"\xff")] == [b"\xff", b"\xff\x01"]


def test_reads_see_unflushed_puts_and_deletes_in_order(new_backend: BackendFactory) -> None:
    store = str_store(new_backend())
    for key in ["a", "c", "e", "g"]:
        store.put(key, "stored")
    store.flush(1)
    store.delete("c")
    store.delete("zz")
    store.put("b", "new")
    store.put("e", "updated")
    store.put("h", "new")
    assert store.pending_count == 5
    assert store.get("c") is None
    assert list(store.range()) == [("a", "stored"), ("b", "new"), ("e", "updated"), ("g", "stored"), ("h", "new")]
    assert list(store.range("b", "g")) == [("b", "new"), ("e", "updated")]
    assert list(store.prefix("c")) == []


def test_writes_during_iteration_do_not_show_in_it(new_backend: BackendFactory) -> None:
    store = str_store(new_backend())
    for key in ["a", "b", "c"]:
        store.put(key, 1)
    store.flush()
    store.put("d", 1)
    seen = []
    for key, _ in store.range():
        seen.append(key)
        store.delete(key)
        store.put(key + "x", 2)
    assert seen == ["a", "b", "c", "d"]
    assert [key for key, _ in store.range()] == ["ax", "bx", "cx", "dx"]


def test_changes_to_log_are_the_latest_value_of_each_key(new_backend: BackendFactory) -> None:
    store = str_store(new_backend(), changelog=True)
    store.put("a", 1)
    store.put("b", "x")
    store.delete("a")
    store.put("b", "y")
    assert store.take_changes() == {b"a": None, b"b": msgpack.packb("y")}
    assert store.take_changes() == {}
    store.put("c", 3)
    store.flush(7)  # a flush does not take them: they are logged at the commit, before it
    assert store.take_changes() == {b"c": msgpack.packb(3)}
    store.put("d", 4)
    store.discard()  # an aborted transaction's writes are neither stored nor logged
    assert store.take_changes() == {}
    assert str_store(new_backend()).take_changes() == {}  # no changelog, nothing kept


def test_flush_writes_the_offset_with_the_data(new_backend: BackendFactory) -> None:
    store = str_store(new_backend())
    assert store.changelog_offset() is None
    store.put("a", 1)
    store.flush(10)
    assert store.changelog_offset() == 10
    assert store.pending_count == 0
    store.put("b", 2)
    store.flush()
    assert store.changelog_offset() == 10
    store.flush(12)
    assert store.changelog_offset() == 12
    assert dict(store.range()) == {"a": 1, "b": 2}


def test_discard_drops_only_unflushed_writes(new_backend: BackendFactory) -> None:
    store = str_store(new_backend())
    store.put("a", 1)
    store.flush(3)
    store.put("a", 2)
    store.put("b", 2)
    store.delete("a")
    store.discard()
    assert store.pending_count == 0
    assert dict(store.range()) == {"a": 1}
    store.flush()
    assert dict(store.range()) == {"a": 1}
    assert store.changelog_offset() == 3


def test_approximate_count(new_backend: BackendFactory) -> None:
    store = BufferedKeyValueStore(new_backend())
    for i in range(5000):
        store.put(i, i)
    store.flush()
    assert 4500 <= store.approximate_count() <= 5500


def test_restore_applies_raw_records_and_offset_without_logging_them(new_backend: BackendFactory) -> None:
    store = str_store(new_backend(), changelog=True)
    store.restore([(b"a", msgpack.packb(1)), (b"b", msgpack.packb(2)), (b"a", None), (b"c", msgpack.packb(3))], 4)
    assert dict(store.range()) == {"b": 2, "c": 3}
    assert store.changelog_offset() == 4
    assert store.take_changes() == {}
    store.put("d", 4)
    with pytest.raises(RuntimeError, match="unflushed"):
        store.restore([], 5)


def test_wipe_empties_a_store_that_stays_usable(new_backend: BackendFactory) -> None:
    store = str_store(new_backend())
    store.put("a", 1)
    store.flush(5)
    store.put("b", 1)
    store.wipe()
    assert list(store.range()) == []
    assert store.changelog_offset() is None
    store.put("c", 1)
    store.flush(1)
    assert dict(store.range()) == {"c": 1}


def test_rocksdb_keeps_data_and_offset_across_reopen(tmp_path: Path) -> None:
    store = str_store(RocksDBBackend(tmp_path / "db"))
    store.put("a", 1)
    store.put("b", 2)
    store.flush(41)
    store.put("c", 3)
    store.close()
    reopened = str_store(RocksDBBackend(tmp_path / "db"))
    assert dict(reopened.range()) == {"a": 1, "b": 2}
    assert reopened.changelog_offset() == 41
    reopened.close()


def test_rocksdb_lock_is_released_on_close(tmp_path: Path) -> None:
    path = tmp_path / "db"
    first = RocksDBBackend(path)
    with pytest.raises(StoreLocked):
        RocksDBBackend(path)
    assert open_in_another_process(path) == "locked"
    first.close()
    first.close()
    assert open_in_another_process(path) == "opened"
    second = RocksDBBackend(path)
    second.close()


def open_in_another_process(path: Path) -> str:
    script = (
        "import sys\n"
        "from stores import RocksDBBackend, StoreLocked\n"
        "try:\n"
        "    RocksDBBackend(sys.argv[1]).close()\n"
        "except StoreLocked:\n"
        "    print('locked')\n"
        "else:\n"
        "    print('opened')\n"
    )
    result = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True)
    return result.stdout.strip()


def filled_rocksdb(path: Path) -> None:
    store = BufferedKeyValueStore(RocksDBBackend(path), key_serde=StrSerde(), value_serde=BytesSerde())
    for i in range(20_000):
        store.put(f"key-{i:06d}", bytes(range(100)))
    store.flush(20_000)
    store.close()


def damage_middle(file: Path) -> None:
    with file.open("r+b") as handle:
        handle.seek(file.stat().st_size // 3)
        handle.write(b"\x13" * 64)


DAMAGES: dict[str, Callable[[Path], object]] = {
    "CURRENT missing": lambda path: (path / "CURRENT").unlink(),
    "CURRENT garbled": lambda path: (path / "CURRENT").write_text("garbage\n"),
    "MANIFEST missing": lambda path: next(path.glob("MANIFEST-*")).unlink(),
    "MANIFEST garbled": lambda path: next(path.glob("MANIFEST-*")).write_bytes(b"\x99" * 64),
    "SST missing": lambda path: next(path.glob("*.sst")).unlink(),
    "SST truncated": lambda path: next(path.glob("*.sst")).write_bytes(b"\0" * 1000),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_rocksdb_detects_damaged_files_on_open(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "db"
    filled_rocksdb(path)
    DAMAGES[damage](path)
    with pytest.raises(StoreCorrupted):
        RocksDBBackend(path)
    wipe(path)
    rebuilt = RocksDBBackend(path)
    assert rebuilt.changelog_offset() is None
    assert list(rebuilt.items()) == []
    rebuilt.close()


def test_a_directory_the_file_system_refuses_is_not_taken_for_a_damaged_store(tmp_path: Path) -> None:
    """A store is wiped only when its files are damaged; a refused directory (here a name longer than
    the file system takes; likewise no permission, read-only, full) stops the worker instead."""
    with pytest.raises(StoreWriteFailed, match=r"File name too long.*; nothing was wiped$"):
        RocksDBBackend(tmp_path / ("x" * 300) / "db")


def test_rocksdb_detects_a_damaged_block_when_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "db"
    filled_rocksdb(path)
    damage_middle(max(path.glob("*.sst"), key=lambda file: file.stat().st_size))
    backend = RocksDBBackend(path)
    with pytest.raises(StoreCorrupted):
        list(backend.items())
    with pytest.raises(StoreCorrupted):
        for i in range(20_000):
            backend.get(f"key-{i:06d}".encode())
    backend.close()


def test_wipe_refuses_a_directory_that_is_not_a_store(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(StoreError, match=r"notes\.txt"):
        wipe(tmp_path)
    assert (tmp_path / "notes.txt").exists()
    wipe(tmp_path / "missing")


def test_rocksdb_checkpoint_copies_data_and_offset(tmp_path: Path) -> None:
    backend = RocksDBBackend(tmp_path / "db")
    backend.write([(b"a", b"1"), (b"b", b"2")], 7)
    backend.checkpoint(tmp_path / "copy")
    backend.write([(b"c", b"3")], 8)
    backend.close()
    copy = RocksDBBackend(tmp_path / "copy")
    assert list(copy.items()) == [(b"a", b"1"), (b"b", b"2")]
    assert copy.changelog_offset() == 7
    copy.close()


def test_rocksdb_ingests_sst_files_and_their_offset(tmp_path: Path) -> None:
    sst = tmp_path / "part.sst"
    writer = SstFileWriter(Options(raw_mode=True))
    writer.open(str(sst))
    for i in range(100):
        writer[b"k%03d" % i] = b"v%d" % i
    writer.finish()
    backend = RocksDBBackend(tmp_path / "db")
    backend.write([(b"k000", b"old"), (b"zzz", b"kept")], 3)
    backend.ingest([sst], 100)
    assert backend.get(b"k000") == b"v0"
    assert backend.get(b"zzz") == b"kept"
    assert len(list(backend.items())) == 101
    assert backend.changelog_offset() == 100
    backend.close()


def test_open_backend_checks_its_arguments() -> None:
    assert isinstance(open_backend("memory"), MemoryBackend)
    with pytest.raises(ValueError, match="needs a path"):
        open_backend("rocksdb")
    with pytest.raises(ValueError, match="expected 'memory' or 'rocksdb'"):
        open_backend("redis")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("prefix", "end"),
    [(b"", None), (b"a", b"b"), (b"a\xff", b"b"), (b"\xff\xff", None), (b"ab\x00", b"ab\x01")],
)
def test_prefix_end(prefix: bytes, end: bytes | None) -> None:
    assert prefix_end(prefix) == end


def test_overlay_merges_changes_over_stored_pairs() -> None:
    stored = iter([(b"b", b"1"), (b"d", b"1"), (b"f", b"1")])
    changes: list[tuple[bytes, bytes | None]] = [(b"a", b"2"), (b"d", None), (b"e", b"2"), (b"f", b"2"), (b"g", None)]
    assert list(overlay(stored, changes)) == [(b"a", b"2"), (b"b", b"1"), (b"e", b"2"), (b"f", b"2")]


keys = st.one_of(st.sampled_from([-300, -1, 0, 127, 128, 70_000]), st.text(alphabet="a\u00e9", max_size=2))
ints = st.integers(-(2**63), 2**64 - 1)
values = st.one_of(st.none(), ints, st.text(max_size=5), st.lists(ints, max_size=3))
operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), keys, values),
        st.tuples(st.just("delete"), keys),
        st.tuples(st.just("flush")),
        st.tuples(st.just("read")),
    ),
    min_size=10,
    max_size=60,
)


def sorted_items(model: dict[bytes, Any]) -> list[tuple[Any, Any]]:
    return [(msgpack.unpackb(key), model[key]) for key in sorted(model)]


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=60, deadline=None)
@given(operations=operations, data=st.data())
def test_changelog_restores_the_same_contents(
    kind: Kind, operations: list[tuple[Any, ...]], data: st.DataObject
) -> None:
    """Replaying the logged changes into a fresh store, in any batches, rebuilds the writer's contents."""
    with tempfile.TemporaryDirectory() as directory:
        stream: list[tuple[bytes, bytes | None]] = []
        writer = BufferedKeyValueStore(open_backend(kind, Path(directory, "w")), changelog=True)
        model: dict[bytes, Any] = {}
        for operation in operations:
            if operation[0] == "put":
                writer.put(operation[1], operation[2])
                model[msgpack.packb(operation[1])] = operation[2]
            elif operation[0] == "delete":
                writer.delete(operation[1])
                model.pop(msgpack.packb(operation[1]), None)
            elif operation[0] == "flush":  # a commit: log the changes, then flush
                stream.extend(writer.take_changes().items())
                writer.flush(len(stream))
            else:
                assert list(writer.range()) == sorted_items(model)
        expected = sorted_items(model)
        assert list(writer.range()) == expected
        stream.extend(writer.take_changes().items())

        restored = BufferedKeyValueStore(open_backend(kind, Path(directory, "r")))
        cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=4)))
        for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
            restored.restore(stream[start:end], end)
        assert list(restored.range()) == expected
        assert restored.changelog_offset() == len(stream)

        low, high = sorted(data.draw(st.tuples(keys, keys)), key=msgpack.packb)
        in_bounds = [pair for pair in expected if msgpack.packb(low) <= msgpack.packb(pair[0]) < msgpack.packb(high)]
        assert list(writer.range(low, high)) == in_bounds
        assert list(restored.range(low, high)) == in_bounds

        restored.close()
        writer.flush(len(stream))
        writer.close()
        if kind == "rocksdb":
            reopened = BufferedKeyValueStore(open_backend(kind, Path(directory, "w")))
            assert list(reopened.range()) == expected
            assert reopened.changelog_offset() == len(stream)
            reopened.close()


def test_rocksdb_keeps_a_task_stores_offset_where_it_always_was(tmp_path: Path) -> None:
    """Stores written before global stores (one offset, under the key `offset`) open with it."""
    backend = RocksDBBackend(tmp_path / "db")
    backend.write([(b"a", b"1")], 41)
    backend.write([(b"b", b"2")], 7, source=3)
    backend.close()
    raw = Rdict(str(tmp_path / "db"), column_families={"changelog": Options(raw_mode=True)},
                options=Options(raw_mode=True))  # fmt: skip
    meta = raw.get_column_family("changelog")
    assert dict(meta.items()) == {b"offset": struct.pack(">q", 41), b"offset.3": struct.pack(">q", 7)}
    del meta
    raw.close()
    reopened = RocksDBBackend(tmp_path / "db")
    assert (reopened.changelog_offset(), reopened.changelog_offset(3)) == (41, 7)
    reopened.close()
