"""A store's checkpoint, taken by the runtime, in the snapshot format: so that a task restores from it as
from Spark's snapshots, and an app can be rewound to it.

A checkpoint is taken partition by partition, each by the task that owns the partition, on whichever
worker, at a commit boundary: RocksDB's own checkpoint of the store (hard links, consistent, with the
changelog offset it covers) is taken at once, and turned into the partition's SST file off the event
loop (`write_partition_checkpoint`). Beside the SST goes a part file, `partition-<n>.json`, with what the
manifest says of that partition: its rows, checksum, changelog offset and the input offsets the commit
covered; both are published to the location, the part file last. `assemble` writes the manifest once
every partition's part is there; two tasks that finish together write the same manifest, whole, so a
checkpoint is complete exactly when its manifest is there, as every snapshot.
"""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, ValidationError

from stores.layout import StoreKind
from stores.rocksdb import RocksDBBackend
from stores.snapshot import Manifest, SnapshotError, manifest_text, parse_manifest, write_partition
from stores.snapshot_location import manifest_key
from stores.snapshot_storage import SnapshotStorage

PART_SUFFIX = ".json"


class PartitionPart(BaseModel):
    """One partition of a checkpoint, as the manifest will say it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    partition: int
    rows: int
    checksums: dict[str, str]
    changelog_offset: int
    input_offsets: dict[str, int]


def part_name(partition: int) -> str:
    return f"partition-{partition}{PART_SUFFIX}"


def write_partition_checkpoint(
    rocksdb_checkpoint: str | os.PathLike[str],
    storage: SnapshotStorage,
    key: str,
    partition: int,
    input_offsets: dict[str, int],
) -> PartitionPart:
    """The partition's SST and part file at `key` from a RocksDB checkpoint of its store, which is then deleted."""
    with storage.workspace(key) as workspace:
        source = RocksDBBackend(rocksdb_checkpoint)
        try:
            written = write_partition(workspace, partition, source.items())
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
        for name in written.checksums:
            storage.publish(workspace, key, name)
        storage.write_bytes(f"{key}/{part_name(partition)}", part.model_dump_json().encode())
    return part


def assemble(
    storage: SnapshotStorage,
    key: str,
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
    if storage.exists(manifest_key(key)):
        return None  # another task assembled it
    present = set(storage.children(key))
    if any(part_name(partition) not in present for partition in range(partitions)):
        return None
    parts: list[PartitionPart] = []
    for partition in range(partitions):
        name = f"{key}/{part_name(partition)}"
        text = storage.read_bytes(name)
        try:
            if text is None:
                raise SnapshotError("it is gone")
            parts.append(PartitionPart.model_validate_json(text))
        except (SnapshotError, ValidationError) as error:
            raise SnapshotError(f"checkpoint part {storage.describe(name)} cannot be read: {error}") from error
    manifest = Manifest(
        app=app,
        store=store,
        partitions=partitions,
        key_serde=key_serde,
        value_serde=value_serde,
        kind=kind,
        changelog_topic=changelog_topic,
        changelog_offsets={part.partition: part.changelog_offset for part in parts},
        input_offsets={part.partition: part.input_offsets for part in parts},
        row_counts={part.partition: part.rows for part in parts},
        checksums={name: digest for part in parts for name, digest in part.checksums.items()},
    )
    storage.write_bytes(manifest_key(key), manifest_text(manifest).encode())
    return manifest


def carry_forward(storage: SnapshotStorage, source: str, target: str, changelog_offsets: dict[int, int]) -> Manifest:
    """The checkpoint at `source` again at `target`, covering its changelog up to `changelog_offsets`: what a
    rewind leaves once the changelog ends with the checkpoint's state, so that a store restores from it
    without replaying the changelog's tail. Its SST files are the source's (hard-linked in a directory,
    copied in a bucket) and its manifest, new, is written last."""
    text = storage.read_bytes(manifest_key(source))
    if text is None:
        raise SnapshotError(f"{storage.describe(source)} has no manifest")
    manifest = parse_manifest(text, storage.describe(manifest_key(source)))
    for name in manifest.checksums:
        storage.copy(f"{source}/{name}", f"{target}/{name}")
    moved = manifest.model_copy(update={"changelog_offsets": changelog_offsets, "created_at": datetime.now(UTC)})
    storage.write_bytes(manifest_key(target), manifest_text(moved).encode())
    return moved
