"""Finding a store's newest snapshot in a snapshot location (stores/snapshot_storage.py).

A location holds a directory (or key prefix) per store and, in it, one per snapshot, named freely
(e.g. by date): `<location>/<store>/<name>/manifest.json`. Only complete snapshots have a
manifest (it is written last), so one still being written is not seen.
"""

from __future__ import annotations

from dataclasses import dataclass

from stores.snapshot import MANIFEST_NAME, Manifest, parse_manifest
from stores.snapshot_storage import SnapshotStorage


@dataclass(frozen=True)
class Snapshot:
    key: str  # `<store>/<name>` in its storage
    manifest: Manifest
    where: str  # its path or URL, for messages


def snapshot_key(store: str, name: str) -> str:
    return f"{store}/{name}"


def manifest_key(snapshot: str) -> str:
    return f"{snapshot}/{MANIFEST_NAME}"


def complete_snapshots(storage: SnapshotStorage, store: str) -> list[Snapshot]:
    """The store's snapshots whose manifest is there, by name."""
    found = []
    for name in storage.children(store):
        key = snapshot_key(store, name)
        text = storage.read_bytes(manifest_key(key))
        if text is not None:
            manifest = parse_manifest(text, storage.describe(manifest_key(key)))
            found.append(Snapshot(key, manifest, storage.describe(key)))
    return found


def newest_snapshot(storage: SnapshotStorage, store: str) -> Snapshot | None:
    """The complete snapshot of `store` created last, or None when there is none (yet)."""
    return max(complete_snapshots(storage, store), key=lambda snapshot: snapshot.manifest.created_at, default=None)
