"""Key-value, window and session stores, changelogs and restores."""

from __future__ import annotations

import os
from typing import Literal

from stores.backend import Backend, Change
from stores.errors import StoreCorrupted, StoreError, StoreLocked, StoreWriteFailed
from stores.memory import MemoryBackend
from stores.read_only import ReadOnlyStore
from stores.rocksdb import RocksDBBackend, wipe
from stores.sessions import SessionStore
from stores.store import KeyValueStore
from stores.windows import WindowStore

__all__ = [
    "Backend",
    "Change",
    "KeyValueStore",
    "MemoryBackend",
    "ReadOnlyStore",
    "RocksDBBackend",
    "SessionStore",
    "StoreCorrupted",
    "StoreError",
    "StoreLocked",
    "StoreWriteFailed",
    "WindowStore",
    "open_backend",
    "wipe",
]


def open_backend(kind: Literal["memory", "rocksdb"], path: str | os.PathLike[str] | None = None) -> Backend:
    """A backend of the configured kind; `rocksdb` needs the store's own directory."""
    if kind == "memory":
        return MemoryBackend()
    if kind == "rocksdb":
        if path is None:
            raise ValueError("a rocksdb store needs a path")
        return RocksDBBackend(path)
    raise ValueError(f"unknown store backend '{kind}': expected 'memory' or 'rocksdb'")
