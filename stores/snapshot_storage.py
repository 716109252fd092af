"""Where snapshots, checkpoints and checkpoint requests live: a directory every worker sees (local or
mounted), or a bucket of an S3-compatible object store (stores/object_storage.py).

Both are addressed by keys, `/`-separated paths under the location (`<store>/<snapshot>/manifest.json`).
What makes a snapshot complete is the same on both: its manifest, written last and whole (a rename into
place in a directory; a single PUT in a bucket), so one still being written is never seen.

The SST files are read and written as local files (RocksDB ingests and writes files): a directory hands
out its own; a bucket's are downloaded into a temporary directory, checked against the manifest's
checksums, and the files a checkpoint writes are staged locally and uploaded.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

from stores.object_url import ObjectUrl
from stores.snapshot import SnapshotError, sha256_file

SnapshotLocation = Path | ObjectUrl
SST_SUFFIX = ".sst"


class SnapshotStorage(ABC):
    """One snapshot location, read and written by key. `uploaded_bytes` counts the bytes written to it (files
    and objects), shared by the threads that write: what incremental checkpoints save shows there."""

    uploaded_bytes = 0
    _counting = threading.Lock()

    def _uploaded(self, size: int) -> None:
        with self._counting:
            self.uploaded_bytes += size

    @abstractmethod
    def describe(self, key: str = "") -> str:
        """The path or URL of `key`, for messages (never with credentials)."""

    @abstractmethod
    def children(self, key: str) -> list[str]:
        """The names directly under `key`, sorted; none when there is nothing there."""

    @abstractmethod
    def read_bytes(self, key: str) -> bytes | None:
        """The object's bytes, or None when there is none."""

    @abstractmethod
    def write_bytes(self, key: str, data: bytes) -> None:
        """Written whole or not at all: a reader sees the old object, none, or all of `data`."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """The object at `key` gone; nothing happens when there is none."""

    @abstractmethod
    def delete_tree(self, key: str) -> None:
        """Everything under `key` gone."""

    @abstractmethod
    def copy(self, source: str, target: str) -> None:
        """The object at `source` again at `target`."""

    @abstractmethod
    def put_file(self, path: Path, key: str) -> None:
        """The local file at `key`, whole or not at all; its bytes are added to `uploaded_bytes`."""

    @abstractmethod
    def fetch_file(self, key: str, target: Path, sha256: str) -> None:
        """The object at `key` as the local file `target`, checked against its checksum: a corrupt, partial or
        missing one is refused, naming it. An SST file may share its bytes with the location's (a hard
        link): SST files are never written in place."""

    @abstractmethod
    def local_files(self, key: str, checksums: dict[str, str]) -> AbstractContextManager[Path]:
        """A local directory holding the files of `key` named in `checksums` (relative name -> sha256),
        each checked against its checksum: a corrupt or partial one is refused, naming it."""

    def exists(self, key: str) -> bool:
        return self.read_bytes(key) is not None


class DirectoryStorage(SnapshotStorage):
    """A local or mounted directory: keys are paths under it."""

    def __init__(self, root: Path):
        self.root = root

    def path(self, key: str) -> Path:
        return self.root / key if key else self.root

    def describe(self, key: str = "") -> str:
        return str(self.path(key))

    def children(self, key: str) -> list[str]:
        directory = self.path(key)
        return sorted(entry.name for entry in directory.iterdir()) if directory.is_dir() else []

    def read_bytes(self, key: str) -> bytes | None:
        try:
            return self.path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def exists(self, key: str) -> bool:
        return self.path(key).is_file()

    def write_bytes(self, key: str, data: bytes) -> None:
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
        temporary.write_bytes(data)
        os.replace(temporary, target)
        self._uploaded(len(data))

    def delete(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)

    def delete_tree(self, key: str) -> None:
        shutil.rmtree(self.path(key), ignore_errors=True)

    def copy(self, source: str, target: str) -> None:
        destination = self.path(target)
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(self.path(source), destination)  # snapshot files are never changed in place
        except OSError:
            shutil.copy2(self.path(source), destination)

    def put_file(self, path: Path, key: str) -> None:
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
        shutil.copyfile(path, temporary)  # a copy, not a link: the store's file is its database's
        os.replace(temporary, target)
        self._uploaded(target.stat().st_size)

    def fetch_file(self, key: str, target: Path, sha256: str) -> None:
        source = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        if not source.is_file():
            raise SnapshotError(f"{source} is listed in its manifest but missing")
        if source.suffix == SST_SUFFIX:
            try:
                os.link(source, target)  # SST files are never written again, here or by the store they join
            except OSError:
                shutil.copyfile(source, target)
        else:  # RocksDB's MANIFEST and WAL: copied, as the store may write on where they end
            shutil.copyfile(source, target)
        actual = sha256_file(target)
        if actual != sha256:
            raise SnapshotError(f"{source} is corrupt or partly written: sha256 {actual}, the manifest says {sha256}")

    @contextlib.contextmanager
    def local_files(self, key: str, checksums: dict[str, str]) -> Iterator[Path]:
        yield self.path(key)  # the ingest checks each file's checksum as it reads it


def open_storage(location: SnapshotLocation) -> SnapshotStorage:
    """The storage of a configured location; an object store's client is made once per bucket and prefix,
    from the environment, and shared by the threads that use it (boto3's clients are thread-safe)."""
    if isinstance(location, ObjectUrl):
        return _object_storage(location)
    return DirectoryStorage(location)


@functools.cache
def _object_storage(url: ObjectUrl) -> SnapshotStorage:
    from stores.object_storage import ObjectStorage  # boto3 is imported only by apps that use a bucket

    return ObjectStorage(url)
