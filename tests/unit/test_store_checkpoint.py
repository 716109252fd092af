"""A store's checkpoint taken by the runtime, in the snapshot format: each partition from a RocksDB
checkpoint of its store, with the input offsets its commit covered; the manifest once all are there;
a task ingests it as any snapshot."""

from __future__ import annotations

from pathlib import Path

import pytest

from stores.checkpoint import assemble, carry_forward, part_name, write_partition_checkpoint
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
    part = write_partition_checkpoint(checkpointed(tmp_path, 0, rows, 41), storage, key, 0, {"payments": 1_000})
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
    target = tmp_path / key
    rows = [(b"acc-1", b"\x01")]
    write_partition_checkpoint(checkpointed(tmp_path, 0, rows, 41), storage, key, 0, {"payments": 10})
    write_partition_checkpoint(checkpointed(tmp_path, 1, [], 0), storage, key, 1, {"payments": 3})
    original = assembled(storage, key)
    assert original is not None
    later = tmp_path / "totals" / "20261126T080000Z"
    moved = carry_forward(storage, key, "totals/20261126T080000Z", {0: 95, 1: 12})
    assert (moved.changelog_offsets, moved.input_offsets) == ({0: 95, 1: 12}, original.input_offsets)
    assert moved.created_at > original.created_at and read_manifest(later) == moved
    sst = "partition-0/000000.sst"
    assert (target / sst).stat().st_ino == (later / sst).stat().st_ino  # the same file, linked
    restored = RocksDBBackend(tmp_path / "restored")
    assert ingest_partition(restored, later, moved, 0) == 95
    assert list(restored.items()) == rows
    restored.close()
