"""The snapshot format: manifest round trip, refusals, checksums, and SST files ingested into RocksDB."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from stores.rocksdb import RocksDBBackend
from stores.snapshot import (
    Manifest,
    SnapshotError,
    SnapshotMismatch,
    ingest_partition,
    read_manifest,
    sha256_file,
    validate,
    verify_checksums,
    write_manifest,
)
from stores.snapshot_location import Snapshot, newest_snapshot
from stores.snapshot_storage import DirectoryStorage
from stores.sst import write_partition_sst


def _manifest(**changes: object) -> Manifest:
    fields: dict[str, object] = {
        "app": "payments",
        "store": "balances",
        "partitions": 2,
        "key_serde": "str",
        "value_serde": "msgpack",
        "changelog_topic": "payments-balances-changelog",
        "changelog_offsets": {0: 10, 1: 7},
        "row_counts": {0: 3, 1: 0},
    }
    fields.update(changes)
    return Manifest.model_validate(fields)


def _snapshot(root: Path, rows: list[tuple[bytes, bytes]], offset: int = 10) -> Manifest:
    sst = root / "partition-0" / "000000.sst"
    count = write_partition_sst(rows, sst)
    (root / "partition-1").mkdir(parents=True)
    manifest = _manifest(
        changelog_offsets={0: offset, 1: 7},
        row_counts={0: count, 1: 0},
        checksums={"partition-0/000000.sst": sha256_file(sst)},
    )
    write_manifest(root, manifest)
    return manifest


def test_manifest_round_trips(tmp_path: Path) -> None:
    manifest = _manifest(checksums={"partition-0/000000.sst": "ab" * 32})
    write_manifest(tmp_path, manifest)
    assert read_manifest(tmp_path) == manifest
    on_disk = json.loads((tmp_path / "manifest.json").read_text())
    assert on_disk["changelog_offsets"] == {"0": 10, "1": 7}
    assert on_disk["format_version"] == 2


def test_a_version_1_manifest_is_still_read_and_covers_no_input_offsets(tmp_path: Path) -> None:
    version_1 = _manifest(checksums={"partition-0/000000.sst": "ab" * 32}).model_dump(mode="json")
    del version_1["input_offsets"]
    version_1["format_version"] = 1
    (tmp_path / "manifest.json").write_text(json.dumps(version_1))
    manifest = read_manifest(tmp_path)
    assert (manifest.format_version, manifest.input_offsets, manifest.offset(0)) == (1, {}, 10)


def test_missing_or_unknown_manifest_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match=r"manifest\.json"):
        read_manifest(tmp_path)
    write_manifest(tmp_path, _manifest(format_version=99))
    with pytest.raises(SnapshotError, match="format_version 99"):
        read_manifest(tmp_path)


@pytest.mark.parametrize(
    ("field", "wrong"),
    [
        ("app", "other"),
        ("store", "other"),
        ("partitions", 3),
        ("key_serde", "msgpack"),
        ("value_serde", "json"),
        ("kind", "window"),
    ],
)
def test_validate_names_the_field_that_differs(field: str, wrong: object) -> None:
    expected: dict[str, object] = {
        "app": "payments",
        "store": "balances",
        "partitions": 2,
        "key_serde": "str",
        "value_serde": "msgpack",
    }
    validate(_manifest(), **expected)  # type: ignore[arg-type]
    expected[field] = wrong
    with pytest.raises(SnapshotMismatch, match=f"{field}="):
        validate(_manifest(), **expected)  # type: ignore[arg-type]


def test_sst_ingested_into_rocksdb_equals_the_rows(tmp_path: Path) -> None:
    rows = sorted((f"key-{i}".encode(), f"value-{i}".encode()) for i in range(500))
    _snapshot(tmp_path / "snap", rows, offset=42)
    backend = RocksDBBackend(tmp_path / "db")
    try:
        assert ingest_partition(backend, tmp_path / "snap", read_manifest(tmp_path / "snap"), 0) == 42
        assert list(backend.items()) == rows
        assert backend.get(b"key-7") == b"value-7"
        assert backend.changelog_offset() == 42
    finally:
        backend.close()


def test_empty_partition_records_only_the_offset(tmp_path: Path) -> None:
    _snapshot(tmp_path / "snap", [(b"a", b"1")])
    backend = RocksDBBackend(tmp_path / "db")
    try:
        assert ingest_partition(backend, tmp_path / "snap", read_manifest(tmp_path / "snap"), 1) == 7
        assert list(backend.items()) == []
        assert backend.changelog_offset() == 7
    finally:
        backend.close()


def test_ingest_refuses_a_store_that_holds_data(tmp_path: Path) -> None:
    _snapshot(tmp_path / "snap", [(b"a", b"1")])
    backend = RocksDBBackend(tmp_path / "db")
    try:
        backend.write([(b"old", b"x")], 3)
        with pytest.raises(SnapshotError, match="not empty"):
            ingest_partition(backend, tmp_path / "snap", read_manifest(tmp_path / "snap"), 0)
    finally:
        backend.close()


def test_damaged_or_unlisted_files_are_found(tmp_path: Path) -> None:
    root = tmp_path / "snap"
    manifest = _snapshot(root, [(b"a", b"1"), (b"b", b"2")])
    verify_checksums(root, manifest)
    write_partition_sst([(b"z", b"9")], root / "partition-1" / "stray.sst")
    with pytest.raises(SnapshotError, match="not listed"):
        verify_checksums(root, manifest)
    (root / "partition-1" / "stray.sst").unlink()
    sst = root / "partition-0" / "000000.sst"
    sst.write_bytes(sst.read_bytes()[:-1] + b"\x00")
    with pytest.raises(SnapshotError, match="sha256"):
        verify_checksums(root, manifest)
    backend = RocksDBBackend(tmp_path / "db")
    try:
        with pytest.raises(SnapshotError, match="checksum"):
            ingest_partition(backend, root, read_manifest(root), 0)
    finally:
        backend.close()


@pytest.mark.parametrize("rows", [[(b"b", b"1"), (b"a", b"2")], [(b"a", b"1"), (b"a", b"2")]])
def test_sst_writer_refuses_unsorted_or_repeated_keys(tmp_path: Path, rows: list[tuple[bytes, bytes]]) -> None:
    path = tmp_path / "bad.sst"
    with pytest.raises(ValueError, match="an SST needs increasing keys"):
        write_partition_sst(rows, path)
    assert not path.exists()


def test_no_rows_write_no_file(tmp_path: Path) -> None:
    assert write_partition_sst([], tmp_path / "empty.sst") == 0
    assert not (tmp_path / "empty.sst").exists()


def test_the_newest_complete_snapshot_of_the_store_is_found(tmp_path: Path) -> None:
    storage = DirectoryStorage(tmp_path)
    assert newest_snapshot(storage, "balances") is None
    store_dir = tmp_path / "balances"
    older = _manifest(created_at=datetime(2026, 1, 1, tzinfo=UTC))
    newer = _manifest(created_at=datetime(2026, 3, 1, tzinfo=UTC))
    write_manifest(store_dir / "b-older", older)
    write_manifest(store_dir / "a-newer", newer)
    (store_dir / "c-being-written" / "partition-0").mkdir(parents=True)  # no manifest yet: not complete
    found = newest_snapshot(storage, "balances")
    assert found == Snapshot("balances/a-newer", newer, str(store_dir / "a-newer"))
    assert newest_snapshot(storage, "other-store") is None
