"""Where a job writes a snapshot, or reads one: a directory every executor sees, or `s3://bucket/prefix`
in the object store the runtime reads (stores/snapshot_storage.py), addressed as the runtime addresses it.

Each Spark task writes its partition's SST into the place itself (to a bucket: staged locally and
uploaded), and the driver writes the manifest last, once every task has returned: a directory's by a
rename into place, a bucket's by one PUT, which is atomic. No object is ever renamed, so a bucket never
shows a half-written snapshot as complete.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from stores.object_url import SCHEME, ObjectUrl
from stores.rocksdb import RocksDBBackend
from stores.snapshot import (
    MANIFEST_NAME,
    Manifest,
    PartitionWritten,
    SnapshotError,
    ingest_partition,
    manifest_text,
    parse_manifest,
    partition_checksums,
    write_partition,
)
from stores.snapshot_storage import SnapshotLocation, SnapshotStorage, open_storage


@dataclass(frozen=True)
class SnapshotPlace:
    """A snapshot at `key` under `location`; picklable, so Spark ships it to the tasks, which open the
    storage themselves (a client is made once per worker process)."""

    location: SnapshotLocation
    key: str

    @classmethod
    def of(cls, where: str | os.PathLike[str]) -> SnapshotPlace:
        """`where` names the snapshot itself: its last segment is its key under the rest."""
        text = os.fspath(where)
        if text.startswith(SCHEME):
            url = ObjectUrl.parse(text)
            parent, _, name = url.prefix.rpartition("/")
            if not name:
                raise ValueError(f"'{text}' names a bucket, not a snapshot: give s3://bucket/prefix/name")
            return cls(ObjectUrl(url.bucket, parent), name)
        path = Path(text).resolve()
        return cls(path.parent, path.name)

    @property
    def storage(self) -> SnapshotStorage:
        return open_storage(self.location)

    def describe(self) -> str:
        return self.storage.describe(self.key)

    def require_empty(self) -> None:
        if self.storage.children(self.key):
            raise SnapshotError(f"output {self.describe()} is not empty")

    def read_manifest(self) -> Manifest:
        text = self.storage.read_bytes(f"{self.key}/{MANIFEST_NAME}")
        if text is None:
            raise SnapshotError(f"snapshot {self.describe()} has no {MANIFEST_NAME}")
        return parse_manifest(text, self.storage.describe(f"{self.key}/{MANIFEST_NAME}"))

    def require_files(self, manifest: Manifest) -> None:
        """Every file the manifest lists is there; each task checks its files' checksums as it reads them."""
        for name in manifest.checksums:
            if not self.storage.exists(f"{self.key}/{name}"):
                raise SnapshotError(f"snapshot {self.describe()}: {name} is listed in the manifest but missing")

    def read_partition(self, manifest: Manifest, partition: int) -> Iterator[tuple[bytes, bytes]]:
        """One partition's rows, read through a scratch database that ingests its SST (rocksdict has no
        SST reader); the ingest checks the file against the manifest's checksum. Runs in a Spark task."""
        checksums = partition_checksums(manifest, partition)
        with (
            self.storage.local_files(self.key, checksums) as directory,
            tempfile.TemporaryDirectory(prefix="repartition-") as scratch,
        ):
            backend = RocksDBBackend(scratch)
            try:
                ingest_partition(backend, directory, manifest, partition)
                yield from backend.items()
            finally:
                backend.close()

    def write_partition(self, partition: int, rows: Iterable[tuple[bytes, bytes]]) -> PartitionWritten:
        """One partition's SST, in place when this returns; runs in a Spark task."""
        with tempfile.TemporaryDirectory(prefix="snapshot-part-") as scratch:
            workspace = Path(scratch)
            written = write_partition(workspace, partition, rows)
            for name in written.checksums:
                self.storage.put_file(workspace / name, f"{self.key}/{name}")
        return written

    def commit(self, manifest: Manifest) -> None:
        """The manifest, last: from now on the runtime reads the snapshot."""
        self.storage.write_bytes(f"{self.key}/{MANIFEST_NAME}", manifest_text(manifest).encode())

    def discard(self) -> None:
        """What a failed job wrote; no manifest was among it."""
        self.storage.delete_tree(self.key)
