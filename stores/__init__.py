"""Key-value, window and session stores, changelogs and restores."""

from __future__ import annotations

import os
from typing import Literal

from stores.backend import Backend, Change
from stores.errors import StoreCorrupted, StoreError, StoreLocked, StoreWriteFailed
from stores.memory import MemoryBackend
from stores.read_only import ReadOnlyView, TableView
from stores.rocksdb import RocksDBBackend, wipe
from stores.sessions import SessionView
from stores.store import BufferedKeyValueStore
from stores.ttl import StreamClock, TtlView
from stores.versioned import VersionedStore, VersionedTableView
from stores.windows import WindowView
from stores.windows_by_time import WindowByTimeView

__all__ = [
    "TIME_VIEWS",
    "Backend",
    "BufferedKeyValueStore",
    "Change",
    "MemoryBackend",
    "ReadOnlyView",
    "RocksDBBackend",
    "SessionView",
    "StoreCorrupted",
    "StoreError",
    "StoreLocked",
    "StoreWriteFailed",
    "StreamClock",
    "TableView",
    "TtlView",
    "VersionedStore",
    "VersionedTableView",
    "WindowByTimeView",
    "WindowView",
    "open_backend",
    "wipe",
]

TIME_VIEWS: dict[str, type[WindowView | SessionView]] = {
    "window": WindowView,
    "window_by_time": WindowByTimeView,
    "session": SessionView,
}
"""The view a store of each kind in time is read and written through, over its store of bytes."""


def open_backend(kind: Literal["memory", "rocksdb"], path: str | os.PathLike[str] | None = None) -> Backend:
    """A backend of the configured kind; `rocksdb` needs the store's own directory."""
    if kind == "memory":
        return MemoryBackend()
    if kind == "rocksdb":
        if path is None:
            raise ValueError("a rocksdb store needs a path")
        return RocksDBBackend(path)
    raise ValueError(f"unknown store backend '{kind}': expected 'memory' or 'rocksdb'")
