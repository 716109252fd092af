"""A store's checkpoint, taken by the runtime: a snapshot (stores/snapshot.py) whose partitions are RocksDB's own
files, so that a task restores from it as from Spark's snapshots, and an app can be rewound to it.

A checkpoint is taken partition by partition, each by the task that owns the partition, on whichever
worker, at a commit boundary: RocksDB's own checkpoint of the store (hard links, consistent, with the
changelog offset it covers) is taken at once, and stored off the event loop (`write_partition_checkpoint`).
Its files are stored once under the store's shared prefix (stores/checkpoint_files.py): only those not
there yet are uploaded, so a checkpoint after a small change costs the files its compactions made. Beside
them goes a part file, `<checkpoint>/partition-<n>.json`, with what the manifest says of that partition:
its rows, its files (name, size, sha256, key), changelog offset and the input offsets the commit covered;
it is written once every file it names is there. `assemble` writes the manifest once every partition's part
is there and every file they name is present; two tasks that finish together write the same manifest,
whole, so a checkpoint is complete exactly when its manifest is there, as every snapshot. The manifest
names every file a reader needs: restore and rewind read nothing else.

Only the task that owns a partition deletes its shared files (`collect_garbage`), right after it wrote
that partition's part, and only those that no manifest or part file under the store names: a file a kept
checkpoint names stays, whoever prunes checkpoints meanwhile.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stores.checkpoint_files import SHARED, StoredFile, shared_prefix, stored_file, to_upload, unreferenced
from stores.layout import StoreKind
from stores.rocksdb import RocksDBBackend
from stores.snapshot import (
    DATABASE_FILES_VERSION,
    FORMAT_VERSION,
    Manifest,
    SnapshotError,
    manifest_text,
    parse_manifest,
    sha256_file,
)
from stores.snapshot_location import manifest_key
from stores.snapshot_storage import SnapshotStorage

PART_SUFFIX = ".json"


class PartitionPart(BaseModel):
    """One partition of a checkpoint, as the manifest will say it: its database's files, or (written before
    checkpoints shared their files) its SST's checksum. A database's `rows` are RocksDB's estimate: exact
    but for keys written again or deleted since the files holding them were last compacted."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    partition: int
    rows: int
    checksums: dict[str, str] = Field(default_factory=dict)
    files: list[StoredFile] = Field(default_factory=list)
    changelog_offset: int
    input_offsets: dict[str, int]


@dataclass(frozen=True)
class WrittenPart:
    part: PartitionPart
    uploaded: list[StoredFile]  # the files this checkpoint stored; the others were there already

    @property
    def uploaded_bytes(self) -> int:
        return sum(file.size for file in self.uploaded)

    @property
    def total_bytes(self) -> int:
        return sum(file.size for file in self.part.files)


def part_name(partition: int) -> str:
    return f"partition-{partition}{PART_SUFFIX}"


def store_of(key: str) -> str:
    """The store's directory of a checkpoint's key, `<store>/<name>`."""
    return key.rpartition("/")[0]


def database_files(directory: Path, partition: int) -> list[StoredFile]:
    """The files of RocksDB's checkpoint in `directory`, as the partition's shared files."""
    return [
        stored_file(partition, path.name, path.stat().st_size, sha256_file(path))
        for path in sorted(directory.iterdir())
        if path.is_file()
    ]


def write_partition_checkpoint(
    rocksdb_checkpoint: Path, storage: SnapshotStorage, key: str, partition: int, input_offsets: dict[str, int]
) -> WrittenPart:
    """The partition's files that are not stored yet, then its part file, from a RocksDB checkpoint of its
    store, which is then deleted."""
    store = store_of(key)
    try:
        files = database_files(rocksdb_checkpoint, partition)
        present = storage.children(f"{store}/{shared_prefix(partition)}")
        uploading = to_upload(files, present)
        for file in uploading:  # before the database is opened: opening it rewrites its MANIFEST
            storage.put_file(rocksdb_checkpoint / file.name, f"{store}/{file.key}")
        source = RocksDBBackend(rocksdb_checkpoint)
        try:
            rows = source.approximate_count()  # counting would read every row: the cost of a full checkpoint
            offset = source.changelog_offset() or 0
        finally:
            source.close()
    finally:
        shutil.rmtree(rocksdb_checkpoint, ignore_errors=True)
    part = PartitionPart(
        partition=partition, rows=rows, files=files, changelog_offset=offset, input_offsets=input_offsets
    )
    storage.write_bytes(f"{key}/{part_name(partition)}", part.model_dump_json().encode())
    return WrittenPart(part, uploading)


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
    """The checkpoint's manifest, written when every partition's part is there; None while some are not.
    A part naming a shared file that is gone is refused: the checkpoint never completes."""
    if storage.exists(manifest_key(key)):
        return None  # another task assembled it
    present = set(storage.children(key))
    if any(part_name(partition) not in present for partition in range(partitions)):
        return None
    parts = [_read_part(storage, key, partition) for partition in range(partitions)]
    for part in parts:
        missing = to_upload(part.files, storage.children(f"{store_of(key)}/{shared_prefix(part.partition)}"))
        if missing:
            where = storage.describe(f"{store_of(key)}/{missing[0].key}")
            raise SnapshotError(f"checkpoint {storage.describe(key)} names {where}, which is gone")
    manifest = Manifest(
        format_version=DATABASE_FILES_VERSION if any(part.files for part in parts) else FORMAT_VERSION,
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
        files={part.partition: part.files for part in parts if part.files},
    )
    storage.write_bytes(manifest_key(key), manifest_text(manifest).encode())
    return manifest


def _read_part(storage: SnapshotStorage, key: str, partition: int) -> PartitionPart:
    name = f"{key}/{part_name(partition)}"
    text = storage.read_bytes(name)
    try:
        if text is None:
            raise SnapshotError("it is gone")
        return PartitionPart.model_validate_json(text)
    except (SnapshotError, ValidationError) as error:
        raise SnapshotError(f"checkpoint part {storage.describe(name)} cannot be read: {error}") from error


def carry_forward(storage: SnapshotStorage, source: str, target: str, changelog_offsets: dict[int, int]) -> Manifest:
    """The checkpoint at `source` again at `target`, covering its changelog up to `changelog_offsets`: what a
    rewind leaves once the changelog ends with the checkpoint's state, so that a store restores from it
    without replaying the changelog's tail. Its shared files are named again; an SST file of its own is
    the source's (hard-linked in a directory, copied in a bucket); its manifest, new, is written last."""
    text = storage.read_bytes(manifest_key(source))
    if text is None:
        raise SnapshotError(f"{storage.describe(source)} has no manifest")
    manifest = parse_manifest(text, storage.describe(manifest_key(source)))
    for name in manifest.checksums:
        storage.copy(f"{source}/{name}", f"{target}/{name}")
    moved = manifest.model_copy(update={"changelog_offsets": changelog_offsets, "created_at": datetime.now(UTC)})
    storage.write_bytes(manifest_key(target), manifest_text(moved).encode())
    return moved


def collect_garbage(storage: SnapshotStorage, store: str, partition: int) -> list[str]:
    """Delete the partition's shared files that no manifest or part file of the store names; returns their
    names. The files are listed before the checkpoints are read: a file stored after the listing is not
    looked at, and one named by a part written before the reading is kept."""
    prefix = f"{store}/{shared_prefix(partition)}"
    present = storage.children(prefix)
    if not present:
        return []
    gone = unreferenced(present, _referenced(storage, store, partition))
    for name in gone:
        storage.delete(f"{prefix}/{name}")
    return gone


def _referenced(storage: SnapshotStorage, store: str, partition: int) -> Iterator[StoredFile]:
    """The partition's files each checkpoint of the store names: its manifest's, or its part's before that."""
    for name in storage.children(store):
        if name == SHARED:
            continue
        key = f"{store}/{name}"
        text = storage.read_bytes(manifest_key(key))
        if text is not None:
            yield from parse_manifest(text, storage.describe(manifest_key(key))).files.get(partition, [])
            continue
        text = storage.read_bytes(f"{key}/{part_name(partition)}")
        if text is None:
            continue
        try:
            yield from PartitionPart.model_validate_json(text).files
        except ValidationError as error:  # a part that cannot be read may name anything: keep every file
            raise SnapshotError(f"checkpoint part {storage.describe(key)} cannot be read: {error}") from error


def fetch_database(storage: SnapshotStorage, key: str, files: list[StoredFile], directory: Path) -> None:
    """The partition's database of the checkpoint at `key` in `directory` (new), each file checked against its
    checksum: what a store becomes (`RocksDBBackend.replace`), or a rewind reads."""
    directory.mkdir(parents=True)
    for file in files:
        storage.fetch_file(f"{store_of(key)}/{file.key}", directory / file.name, file.sha256)
