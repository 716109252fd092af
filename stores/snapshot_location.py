"""Finding a store's newest snapshot in a snapshot location (a local or mounted directory).

A location holds a directory per store and, in it, one directory per snapshot, named freely
(e.g. by date): `<location>/<store>/<name>/manifest.json`. Only complete snapshots have a
manifest (it is written last), so one still being written is not seen.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from stores.snapshot import MANIFEST_NAME, Manifest, read_manifest


@dataclass(frozen=True)
class Snapshot:
    directory: Path
    manifest: Manifest


def store_snapshots_dir(location: str | os.PathLike[str], store: str) -> Path:
    return Path(location) / store


def newest_snapshot(location: str | os.PathLike[str], store: str) -> Snapshot | None:
    """The complete snapshot of `store` created last, or None when there is none (yet)."""
    root = store_snapshots_dir(location, store)
    if not root.is_dir():
        return None
    found = [
        Snapshot(directory, read_manifest(directory))
        for directory in sorted(root.iterdir())
        if (directory / MANIFEST_NAME).is_file()
    ]
    return max(found, key=lambda snapshot: snapshot.manifest.created_at, default=None)
