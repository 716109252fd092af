"""The files of incremental checkpoints: which to upload, which an old checkpoint leaves behind, which
checkpoints retention removes. Pure decisions, apart from the storage that carries them out.

A checkpoint's partition is RocksDB's own checkpoint of the store: its SST files, immutable and named by
number, and a few small files (MANIFEST, CURRENT, OPTIONS, an empty WAL). Each is stored once, under the
store's shared prefix for the partition, `<store>/_shared/partition-<n>/<name>-<sha256 prefix>`, and named
by every checkpoint that holds it: a checkpoint taken after a small change uploads only the files the
compactions since made. The content's hash in the key keeps two databases' files of the same number (a
store restored elsewhere numbers on from the checkpoint) apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict

SHARED = "_shared"
HASH_IN_NAME = 16  # hex digits of the sha256 in a shared file's name


class StoredFile(BaseModel):
    """One file of a partition's database: its name in the database's directory, and where it is stored."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str  # in the database's directory: 000012.sst, MANIFEST-000005, CURRENT
    key: str  # relative to the store's directory in the location: _shared/partition-0/000012-<sha>.sst
    size: int
    sha256: str


def shared_prefix(partition: int) -> str:
    """The partition's shared files, relative to the store's directory."""
    return f"{SHARED}/partition-{partition}"


def shared_key(partition: int, name: str, sha256: str) -> str:
    path = PurePosixPath(name)
    return f"{shared_prefix(partition)}/{path.stem}-{sha256[:HASH_IN_NAME]}{path.suffix}"


def stored_file(partition: int, name: str, size: int, sha256: str) -> StoredFile:
    return StoredFile(name=name, key=shared_key(partition, name, sha256), size=size, sha256=sha256)


def to_upload(files: Iterable[StoredFile], present: Iterable[str]) -> list[StoredFile]:
    """The files whose shared key is not there yet (`present`: the names under the partition's prefix)."""
    there = set(present)
    return [file for file in files if PurePosixPath(file.key).name not in there]


def unreferenced(present: Iterable[str], referenced: Iterable[StoredFile]) -> list[str]:
    """The names under a partition's shared prefix that no checkpoint names: what may be deleted."""
    named = {PurePosixPath(file.key).name for file in referenced}
    return sorted(name for name in present if name not in named)


@dataclass(frozen=True)
class Dated:
    """A complete checkpoint, by its name and when it was made."""

    name: str
    created_at: datetime


def expired(checkpoints: Sequence[Dated], keep: int | None, max_age: timedelta | None, now: datetime) -> list[str]:
    """The checkpoints retention removes: beyond the `keep` newest, or made more than `max_age` before
    `now`; never the newest, which a store restores from."""
    ordered = sorted(checkpoints, key=lambda each: (each.created_at, each.name))
    if not ordered:
        return []
    older = ordered[:-1]
    gone = {each.name for each in older[: max(0, len(ordered) - keep)]} if keep is not None else set()
    if max_age is not None:
        gone |= {each.name for each in older if now - each.created_at > max_age}
    return [each.name for each in ordered if each.name in gone]
