"""Snapshots of a store: SST files per partition plus a manifest, built offline (by Spark) and ingested.

Layout of a snapshot directory (one per store):

    manifest.json
    partition-0/000000.sst
    partition-1/            (empty: the partition has no rows)

The manifest says what the files hold (app, store, partition count, serdes, and the kind of store,
whose layout the keys follow) so a runtime never ingests a snapshot of another store or one encoded
differently, and which changelog offset each partition covers, so only the changelog tail after it
is replayed. A checkpoint the runtime takes (stores/checkpoint.py) also records, per partition, the
input offsets its state covers: where the app's consumer group goes back to when it is rewound there,
and holds each partition as RocksDB's own files, shared between checkpoints (stores/checkpoint_files.py):
`files` instead of `checksums` for that partition (format version 3).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stores.checkpoint_files import StoredFile
from stores.errors import StoreError
from stores.layout import StoreKind
from stores.rocksdb import RocksDBBackend
from stores.sst import write_partition_sst

FORMAT_VERSION = 2  # 2 added input_offsets
DATABASE_FILES_VERSION = 3  # 3 added files: a partition as a database's files, shared between checkpoints
READABLE_VERSIONS = (1, 2, 3)
MANIFEST_NAME = "manifest.json"
SST_NAME = "000000.sst"


class SnapshotError(StoreError):
    """A snapshot directory is missing, unreadable or damaged."""


class SnapshotMismatch(SnapshotError):
    """A snapshot is valid but belongs to another app or store, or is encoded differently."""


class Manifest(BaseModel):
    """What a snapshot holds. Offsets are the next changelog offset each partition covers."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format_version: int = FORMAT_VERSION
    app: str
    store: str
    partitions: int = Field(gt=0)
    key_serde: str
    value_serde: str
    # Window and session stores lay their keys out themselves (stores/layout.py): rows of another
    # kind would be read as garbage. Manifests from before window stores hold key-value rows.
    kind: StoreKind = "key_value"
    changelog_topic: str | None = None
    changelog_offsets: dict[int, int] = Field(default_factory=dict)
    # Per partition, the next offset of each input topic its state covers: a checkpoint taken by the
    # runtime at a commit boundary has them; Spark's snapshots and version-1 manifests have none.
    input_offsets: dict[int, dict[str, int]] = Field(default_factory=dict)
    row_counts: dict[int, int] = Field(default_factory=dict)
    checksums: dict[str, str] = Field(default_factory=dict)
    # Per partition of a checkpoint the runtime took, the files of RocksDB's checkpoint of its store,
    # stored once under the store's shared prefix; a partition missing from it has an SST in `checksums`.
    files: dict[int, list[StoredFile]] = Field(default_factory=dict)
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))

    def offset(self, partition: int) -> int:
        """The changelog offset a restore of `partition` resumes from after ingesting it."""
        return self.changelog_offsets.get(partition, 0)


def partition_dir(snapshot_dir: str | os.PathLike[str], partition: int) -> Path:
    return Path(snapshot_dir) / f"partition-{partition}"


def write_manifest(snapshot_dir: str | os.PathLike[str], manifest: Manifest) -> Path:
    """Written last and renamed into place, so a manifest's presence means the snapshot is complete."""
    directory = Path(snapshot_dir)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / MANIFEST_NAME
    temporary = directory / f".{MANIFEST_NAME}.tmp"
    temporary.write_text(manifest_text(manifest))
    os.replace(temporary, target)
    return target


def manifest_text(manifest: Manifest) -> str:
    return manifest.model_dump_json(indent=2) + "\n"


def read_manifest(snapshot_dir: str | os.PathLike[str]) -> Manifest:
    path = Path(snapshot_dir) / MANIFEST_NAME
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise SnapshotError(f"snapshot {snapshot_dir} has no readable {MANIFEST_NAME}: {exc}") from exc
    return parse_manifest(text, str(path))


def parse_manifest(text: bytes | str, where: str) -> Manifest:
    """The manifest in `text`, read from `where` (a path or URL, named when it is refused)."""
    try:
        manifest = Manifest.model_validate_json(text)
    except ValidationError as exc:
        raise SnapshotError(f"{where} is not a valid manifest: {exc}") from exc
    if manifest.format_version not in READABLE_VERSIONS:
        readable = " and ".join(map(str, READABLE_VERSIONS))
        raise SnapshotError(f"{where} has format_version {manifest.format_version}; this code reads {readable}")
    return manifest


def validate(
    manifest: Manifest,
    app: str,
    store: str,
    partitions: int,
    key_serde: str,
    value_serde: str,
    changelog_topic: str | None = None,
    kind: StoreKind = "key_value",
) -> None:
    """Refuses a snapshot of another app/store, partition count, encoding or kind: its bytes would be wrong here.

    A manifest naming a changelog topic must name `changelog_topic` (when given): its offsets count
    records of that topic. A bootstrap manifest names none and covers no changelog record.
    """
    expected: dict[str, object] = {
        "app": app,
        "store": store,
        "partitions": partitions,
        "key_serde": key_serde,
        "value_serde": value_serde,
        "kind": kind,
    }
    if changelog_topic is not None and manifest.changelog_topic is not None:
        expected["changelog_topic"] = changelog_topic
    for field, wanted in expected.items():
        found = getattr(manifest, field)
        if found != wanted:
            why = ""
            if field == "kind" and found == "key_value":
                why = f" (rows from bulk data make key-value stores; snapshot a {wanted} store from its changelog)"
            raise SnapshotMismatch(
                f"snapshot of app '{manifest.app}' store '{manifest.store}' has {field}={found!r}, "
                f"expected {wanted!r}{why}"
            )


def sha256_file(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_checksums(snapshot_dir: str | os.PathLike[str], manifest: Manifest) -> None:
    """Every listed file exists with its checksum, and no SST file is there unlisted."""
    root = Path(snapshot_dir)
    for name, expected in manifest.checksums.items():
        path = root / name
        if not path.is_file():
            raise SnapshotError(f"snapshot {root}: {name} is listed in the manifest but missing")
        actual = sha256_file(path)
        if actual != expected:
            raise SnapshotError(f"snapshot {root}: {name} has sha256 {actual}, the manifest says {expected}")
    listed = set(manifest.checksums)
    for path in root.glob("partition-*/*.sst"):
        name = path.relative_to(root).as_posix()
        if name not in listed:
            raise SnapshotError(f"snapshot {root}: {name} is not listed in the manifest")
    for files in manifest.files.values():
        _check_database_files(root, files)


def _check_database_files(snapshot_dir: Path, files: Iterable[StoredFile]) -> None:
    """A checkpoint's shared files, beside it in its store's directory, each with its checksum."""
    store_dir = snapshot_dir.parent
    for file in files:
        path = store_dir / file.key
        if not path.is_file():
            raise SnapshotError(f"snapshot {snapshot_dir}: {path} is listed in the manifest but missing")
        actual = sha256_file(path)
        if actual != file.sha256:
            raise SnapshotError(f"snapshot {snapshot_dir}: {path} has sha256 {actual}, the manifest says {file.sha256}")


def partition_checksums(manifest: Manifest, partition: int) -> dict[str, str]:
    """The checksums of one partition's files, by their names in the snapshot."""
    prefix = f"partition-{partition}/"
    return {name: digest for name, digest in manifest.checksums.items() if name.startswith(prefix)}


def partition_files(snapshot_dir: str | os.PathLike[str], manifest: Manifest, partition: int) -> list[Path]:
    return sorted(Path(snapshot_dir) / name for name in partition_checksums(manifest, partition))


def ingest_partition(
    backend: RocksDBBackend, snapshot_dir: str | os.PathLike[str], manifest: Manifest, partition: int
) -> int:
    """Loads one partition's SST files into an empty store; returns the changelog offset to resume from.

    The store must be empty (wipe it first): keys deleted since the snapshot would otherwise survive.
    Checksums are verified before anything is loaded.
    """
    if not 0 <= partition < manifest.partitions:
        raise SnapshotError(f"snapshot {snapshot_dir} has {manifest.partitions} partitions, no partition {partition}")
    _require_empty(backend, snapshot_dir)
    offset = manifest.offset(partition)
    with _partition_ssts(snapshot_dir, manifest, partition) as files:
        if files:
            backend.ingest(files, offset)
        else:
            backend.write((), offset)
    return offset


def ingest_whole(backend: RocksDBBackend, snapshot_dir: str | os.PathLike[str], manifest: Manifest) -> dict[int, int]:
    """Loads every partition into one empty store (a global store holds them all) and records each
    partition's offset under its own source; returns {partition: offset to resume from}."""
    _require_empty(backend, snapshot_dir)
    partitions = range(manifest.partitions)
    for partition in partitions:  # one ingest per partition: their key ranges overlap, their keys do not
        with _partition_ssts(snapshot_dir, manifest, partition) as files:
            if files:
                backend.ingest(files, None)
    offsets = {partition: manifest.offset(partition) for partition in partitions}
    for partition, offset in offsets.items():  # after the data: a crash in between reads the topic again
        backend.write((), offset, source=partition)
    return offsets


def _require_empty(backend: RocksDBBackend, snapshot_dir: str | os.PathLike[str]) -> None:
    if next(iter(backend.items()), None) is not None:
        raise SnapshotError(f"not ingesting snapshot {snapshot_dir}: the store is not empty")


@contextlib.contextmanager
def _partition_ssts(snapshot_dir: str | os.PathLike[str], manifest: Manifest, partition: int) -> Iterator[list[Path]]:
    """The partition's SST files to ingest, checked; a checkpoint's database is read into one SST first, as
    its own files hold RocksDB's sequence numbers and levels, which an ingest does not take."""
    stored = manifest.files.get(partition)
    if stored is None:
        yield _checked_files(snapshot_dir, manifest, [partition])
        return
    _check_database_files(Path(snapshot_dir), stored)
    with tempfile.TemporaryDirectory(prefix="checkpoint-") as scratch:
        database = Path(scratch) / "database"
        database.mkdir()
        for file in stored:
            shutil.copyfile(Path(snapshot_dir).parent / file.key, database / file.name)
        source = RocksDBBackend(database)
        try:
            count = write_partition_sst(source.items(), Path(scratch) / SST_NAME)
        finally:
            source.close()
        yield [Path(scratch) / SST_NAME] if count else []


def _checked_files(snapshot_dir: str | os.PathLike[str], manifest: Manifest, partitions: Iterable[int]) -> list[Path]:
    root = Path(snapshot_dir)
    files = [path for partition in partitions for path in partition_files(snapshot_dir, manifest, partition)]
    for path in files:
        name = path.relative_to(root).as_posix()
        if sha256_file(path) != manifest.checksums[name]:
            raise SnapshotError(f"snapshot {root}: {name} does not match its checksum")
    return files


@dataclass(frozen=True)
class PartitionWritten:
    """What was written for one store partition; `checksums` maps snapshot-relative names."""

    partition: int
    rows: int
    checksums: dict[str, str]


def write_partition(
    snapshot_dir: str | os.PathLike[str], partition: int, rows: Iterable[tuple[bytes, bytes]]
) -> PartitionWritten:
    """One partition's SST from rows in increasing key order; its directory exists even with no rows."""
    directory = partition_dir(snapshot_dir, partition)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / SST_NAME
    count = write_partition_sst(rows, path)
    checksums = {path.relative_to(snapshot_dir).as_posix(): sha256_file(path)} if count else {}
    return PartitionWritten(partition, count, checksums)


def snapshot_manifest(
    written: Iterable[PartitionWritten],
    *,
    app: str,
    store: str,
    partitions: int,
    key_serde: str,
    value_serde: str,
    changelog_topic: str | None = None,
    changelog_offsets: dict[int, int] | None = None,
    input_offsets: dict[int, dict[str, int]] | None = None,
    kind: StoreKind = "key_value",
) -> Manifest:
    """What the manifest of the partitions written says."""
    results = list(written)
    return Manifest(
        app=app,
        store=store,
        partitions=partitions,
        key_serde=key_serde,
        value_serde=value_serde,
        kind=kind,
        changelog_topic=changelog_topic,
        changelog_offsets=changelog_offsets or {},
        input_offsets=input_offsets or {},
        row_counts={result.partition: result.rows for result in results},
        checksums={name: digest for result in results for name, digest in result.checksums.items()},
    )
