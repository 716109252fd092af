"""A store's checkpoint, taken by the runtime, in the snapshot format: so that a task restores from it as
from Spark's snapshots, and an app can be rewound to it.

A checkpoint is taken partition by partition, each by the task that owns the partition, on whichever
worker, at a commit boundary: RocksDB's own checkpoint of the store (hard links, consistent, with the
changelog offset it covers) is taken at once, and turned into the partition's SST file off the event
loop (`write_partition_checkpoint`). Beside the SST goes a part file, `partition-<n>.json`, with what the
manifest says of that partition: its rows, checksum, changelog offset and the input offsets the commit
covered. `assemble` writes the manifest once every partition's part is there; two tasks that finish
together write the same manifest, renamed into place, so a checkpoint is complete exactly when its
manifest is there, as every snapshot.
"""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from stores.layout import StoreKind
from stores.rocksdb import RocksDBBackend
from stores.snapshot import (
    MANIFEST_NAME,
    Manifest,
    PartitionWritten,
    SnapshotError,
    finish_snapshot,
    partition_dir,
    read_manifest,
    write_manifest,
    write_partition,
)

PART_SUFFIX = ".json"


class PartitionPart(BaseModel):
    """One partition of a checkpoint, as the manifest will say it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    partition: int
    rows: int
    checksums: dict[str, str]
    changelog_offset: int
    input_offsets: dict[str, int]


def part_path(snapshot_dir: str | os.PathLike[str], partition: int) -> Path:
    return Path(snapshot_dir) / f"partition-{partition}{PART_SUFFIX}"


def write_partition_checkpoint(
    rocksdb_checkpoint: str | os.PathLike[str],
    snapshot_dir: str | os.PathLike[str],
    partition: int,
    input_offsets: dict[str, int],
) -> PartitionPart:
    """The partition's SST and part file from a RocksDB checkpoint of its store, which is then deleted."""
    source = RocksDBBackend(rocksdb_checkpoint)
    try:
        written = write_partition(snapshot_dir, partition, source.items())
        offset = source.changelog_offset() or 0
    finally:
        source.close()
        shutil.rmtree(rocksdb_checkpoint, ignore_errors=True)
    part = PartitionPart(
        partition=partition,
        rows=written.rows,
        checksums=written.checksums,
        changelog_offset=offset,
        input_offsets=input_offsets,
    )
    target = part_path(snapshot_dir, partition)
    temporary = target.with_name(f".{target.name}.tmp")
    temporary.write_text(part.model_dump_json())
    os.replace(temporary, target)
    return part


def assemble(
    snapshot_dir: str | os.PathLike[str],
    *,
    app: str,
    store: str,
    partitions: int,
    key_serde: str,
    value_serde: str,
    changelog_topic: str,
    kind: StoreKind,
) -> Manifest | None:
    """The checkpoint's manifest, written when every partition's part is there; None while some are not."""
    root = Path(snapshot_dir)
    if (root / MANIFEST_NAME).is_file():
        return None  # another task assembled it
    parts: dict[int, PartitionPart] = {}
    for partition in range(partitions):
        path = part_path(root, partition)
        if not path.is_file():
            return None
        try:
            parts[partition] = PartitionPart.model_validate_json(path.read_text())
        except (OSError, ValidationError) as error:
            raise SnapshotError(f"checkpoint {root}: {path.name} cannot be read: {error}") from error
    written = [PartitionWritten(part.partition, part.rows, part.checksums) for part in parts.values()]
    return finish_snapshot(
        root,
        written,
        app=app,
        store=store,
        partitions=partitions,
        key_serde=key_serde,
        value_serde=value_serde,
        changelog_topic=changelog_topic,
        kind=kind,
        changelog_offsets={partition: part.changelog_offset for partition, part in parts.items()},
        input_offsets={partition: part.input_offsets for partition, part in parts.items()},
    )


def carry_forward(
    source: str | os.PathLike[str], target: str | os.PathLike[str], changelog_offsets: dict[int, int]
) -> Manifest:
    """The checkpoint at `source` again at `target`, covering its changelog up to `changelog_offsets`: what a
    rewind leaves once the changelog ends with the checkpoint's state, so that a store restores from it
    without replaying the changelog's tail. Its SST files are hard-linked (copied where a link cannot be
    made) and its manifest, new, is written last."""
    manifest = read_manifest(source)
    root, copy = Path(source), Path(target)
    for name in manifest.checksums:
        destination = copy / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(root / name, destination)
        except OSError:
            shutil.copy2(root / name, destination)
    for partition in range(manifest.partitions):
        partition_dir(copy, partition).mkdir(parents=True, exist_ok=True)
    moved = manifest.model_copy(update={"changelog_offsets": changelog_offsets, "created_at": datetime.now(UTC)})
    write_manifest(copy, moved)
    return moved
