"""A store's checkpoint taken by the runtime, a snapshot of RocksDB's own files: each partition from a RocksDB
checkpoint of its store, with the input offsets its commit covered, its files stored once and shared with the
next checkpoints; the manifest once all are there; a task ingests it as any snapshot, and a partition's files
no checkpoint names any longer are deleted."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from stores.checkpoint import assemble, carry_forward, collect_garbage, part_name, write_partition_checkpoint
from stores.rocksdb import RocksDBBackend
from stores.snapshot import Manifest, SnapshotError, ingest_partition, read_manifest
from stores.snapshot_storage import DirectoryStorage


def assembled(storage: DirectoryStorage, key: str) -> Manifest | None:
    return assemble(storage, key, app="bank", store="totals", partitions=2, key_serde="str", value_serde="msgpack",
                    changelog_topic="bank-totals-changelog", kind="key_value")  # fmt: skip


def checkpointed(tmp_path: Path, partition: int, rows: list[tuple[bytes, bytes]], offset: int) -> Path:
    """A store partition with `rows` up to changelog `offset`, checkpointed; a later write is not in it."""
    store = RocksDBBackend(tmp_path / f"store-{partition}")
    store.write(rows, offset)
    store.checkpoint(tmp_path / f"checkpoint-{partition}")
    store.write([(b"later", b"x")], offset + 1)
    store.close()
    return tmp_path / f"checkpoint-{partition}"


def test_a_checkpoint_becomes_a_snapshot_with_the_input_offsets_once_every_partition_is_written(
    tmp_path: Path,
) -> None:
    storage, key = DirectoryStorage(tmp_path / "location"), "totals/20261126T070000Z"
    target = tmp_path / "location" / key
    rows = [(b"acc-1", b"\x01"), (b"acc-3", b"\x03")]
    part = write_partition_checkpoint(checkpointed(tmp_path, 0, rows, 41), storage, key, 0, {"payments": 1_000}).part
    assert (part.rows, part.changelog_offset, part.input_offsets) == (2, 41, {"payments": 1_000})
    assert not (tmp_path / "checkpoint-0").exists()  # RocksDB's checkpoint is gone once written
    assert assembled(storage, key) is None  # partition 1 is not there yet: no manifest
    assert not (target / "manifest.json").exists()
    write_partition_checkpoint(checkpointed(tmp_path, 1, [], 0), storage, key, 1, {"payments": 7})
    manifest = assembled(storage, key)
    assert manifest is not None and read_manifest(target) == manifest
    assert manifest.input_offsets == {0: {"payments": 1_000}, 1: {"payments": 7}}
    assert (manifest.changelog_offsets, manifest.row_counts) == ({0: 41, 1: 0}, {0: 2, 1: 0})
    assert assembled(storage, key) is None  # already assembled
    restored = RocksDBBackend(tmp_path / "restored")
    assert ingest_partition(restored, target, manifest, 0) == 41
    assert list(restored.items()) == rows  # not the write after the checkpoint
    restored.close()


def test_a_damaged_part_is_a_clear_error(tmp_path: Path) -> None:
    storage, key = DirectoryStorage(tmp_path), "totals/c1"
    write_partition_checkpoint(checkpointed(tmp_path, 0, [(b"k", b"v")], 3), storage, key, 0, {"payments": 1})
    (tmp_path / key / part_name(1)).write_text("{not json")
    with pytest.raises(SnapshotError, match=r"totals/c1/partition-1\.json cannot be read"):
        assembled(storage, key)


def test_a_checkpoint_carried_forward_shares_its_files_and_covers_the_changelog_up_to_its_new_end(
    tmp_path: Path,
) -> None:
    storage, key = DirectoryStorage(tmp_path), "totals/20261126T070000Z"
    rows = [(b"acc-1", b"\x01")]
    write_partition_checkpoint(checkpointed(tmp_path, 0, rows, 41), storage, key, 0, {"payments": 10})
    write_partition_checkpoint(checkpointed(tmp_path, 1, [], 0), storage, key, 1, {"payments": 3})
    original = assembled(storage, key)
    assert original is not None
    later = tmp_path / "totals" / "20261126T080000Z"
    moved = carry_forward(storage, key, "totals/20261126T080000Z", {0: 95, 1: 12})
    assert (moved.changelog_offsets, moved.input_offsets) == ({0: 95, 1: 12}, original.input_offsets)
    assert moved.created_at > original.created_at and read_manifest(later) == moved
    assert moved.files == original.files  # the same shared files, named again
    assert sorted(path.name for path in later.iterdir()) == ["manifest.json"]
    restored = RocksDBBackend(tmp_path / "restored")
    assert ingest_partition(restored, later, moved, 0) == 95
    assert list(restored.items()) == rows
    restored.close()


def test_a_checkpoint_after_a_small_change_stores_only_the_new_files_and_unnamed_files_are_deleted(
    tmp_path: Path,
) -> None:
    storage = DirectoryStorage(tmp_path / "location")
    store = RocksDBBackend(tmp_path / "store")
    for batch in range(2):  # two SST files of 10,000 keys each: four would start a compaction, rewriting them
        store.write([(b"k%06d" % key, b"v" * 40) for key in range(batch * 10_000, (batch + 1) * 10_000)], batch + 1)
        store.checkpoint(tmp_path / "flushed")  # a checkpoint flushes the memtable into an SST file
        shutil.rmtree(tmp_path / "flushed")
    store.checkpoint(tmp_path / "first")
    first = write_partition_checkpoint(tmp_path / "first", storage, "totals/c1", 0, {"payments": 20_000})
    store.write([(b"k000007", b"changed"), (b"k019999", None)], 5)
    store.checkpoint(tmp_path / "second")
    second = write_partition_checkpoint(tmp_path / "second", storage, "totals/c2", 0, {"payments": 20_002})
    store.close()
    assert first.uploaded_bytes == first.total_bytes > 100_000
    assert 0 < second.uploaded_bytes < first.uploaded_bytes / 20  # the two SST files were there already
    assert {file.key for file in first.part.files} & {file.key for file in second.part.files}
    assert collect_garbage(storage, "totals", 0) == []  # both parts name their files
    shutil.rmtree(tmp_path / "location" / "totals" / "c1")  # pruned
    gone = collect_garbage(storage, "totals", 0)
    assert gone and not {name for name in gone} & {Path(file.key).name for file in second.part.files}
    manifest = Manifest(app="bank", store="totals", partitions=1, key_serde="str", value_serde="msgpack",
                        changelog_offsets={0: 5}, files={0: second.part.files})  # fmt: skip
    restored = RocksDBBackend(tmp_path / "restored")
    ingest_partition(restored, tmp_path / "location" / "totals" / "c2", manifest, 0)
    assert restored.get(b"k000007") == b"changed" and restored.get(b"k019999") is None
    assert sum(1 for _ in restored.items()) == 19_999 and restored.changelog_offset() == 5
    restored.close()
