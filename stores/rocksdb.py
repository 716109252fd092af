"""A backend in RocksDB (via rocksdict, raw bytes), one database directory per store and partition.

The data lives in the default column family and the source offsets in a column family of their
own, so iteration never meets them and one WriteBatch updates both atomically. Every database of
the process shares one memory budget (`SharedMemory`): with a cache per database, memory grows with
the number of partitions.
"""

from __future__ import annotations

import errno
import os
import shutil
import struct
import threading
import weakref
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from rocksdict import (
    AccessType,
    BlockBasedIndexType,
    BlockBasedOptions,
    Cache,
    Checkpoint,
    ColumnFamily,
    DBCompressionType,
    IngestExternalFileOptions,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteBufferManager,
)

from stores.backend import Change
from stores.errors import StoreCorrupted, StoreError, StoreLocked, StoreWriteFailed
from stores.heap import fix_mmap_threshold

DEFAULT_MEMORY_MB = 64
MB = 1024 * 1024
MIN_WRITE_BUFFER_BYTES, MAX_WRITE_BUFFER_BYTES = 256 * 1024, 8 * MB
OFFSETS_WRITE_BUFFER_BYTES = 64 * 1024
"""The memtable of the offsets' column family: a few keys (RocksDB's default, 64 MB, is a whole budget)."""

_META_COLUMN_FAMILY = "changelog"
_OFFSET_KEY = b"offset"
_OFFSET = struct.Struct(">q")


def _offset_key(source: int) -> bytes:
    """`offset` for source 0 (a task store's changelog: the key stores have always used), else `offset.<n>`."""
    return _OFFSET_KEY if source == 0 else b"%s.%d" % (_OFFSET_KEY, source)


def _source_of(key: bytes) -> int:
    return 0 if key == _OFFSET_KEY else int(key.removeprefix(_OFFSET_KEY + b"."))


# Names RocksDB and rocksdict create in a database directory; `wipe` deletes nothing else.
_DB_FILES = ("CURRENT", "IDENTITY", "LOCK", "LOG", "MANIFEST-", "OPTIONS-", "rocksdict-config.json")
_DB_SUFFIXES = (".sst", ".log", ".blob", ".dbtmp")


class SharedMemory:
    """What every RocksDB database of the process holds in memory, within one budget.

    One LRU block cache holds the data, index and filter blocks of every database, and the memtables are
    charged to it as well, so blocks and memtables together stay within the budget however many stores
    and partitions are open. The memtables may take up to half of it: past that, the one being written
    is flushed. That half is shared out: a database's memtable is flushed when full at its share (a power
    of two between 256 KB and 8 MB), resized in every open database as databases open and close. With
    memtables larger than their share, each write past the half would flush a nearly empty one: at 96
    partitions and 2 MB memtables, writing was 7x slower than at 256 KB. Reads beyond the cache come from
    the operating system's page cache, which is not the process's.
    """

    def __init__(self, megabytes: int = DEFAULT_MEMORY_MB) -> None:
        self._megabytes = megabytes
        self._parts: tuple[Cache, WriteBufferManager] | None = None
        self._open: weakref.WeakSet[RocksDBBackend] = weakref.WeakSet()  # one left unclosed still goes away
        self._write_buffer_bytes = self._share(1)
        self._lock = threading.Lock()  # checkpoints and snapshots open databases in threads of their own

    @property
    def budget_bytes(self) -> int:
        return self._megabytes * MB

    def _share(self, databases: int) -> int:
        share = self.budget_bytes // 2 // max(1, databases)
        return min(MAX_WRITE_BUFFER_BYTES, max(MIN_WRITE_BUFFER_BYTES, 1 << (share.bit_length() - 1)))

    def next_write_buffer_bytes(self) -> int:
        """The memtable size of a database about to open."""
        return self._share(len(self._open) + 1)

    def opened(self, database: RocksDBBackend) -> None:
        with self._lock:
            self._open.add(database)
            self._resize()

    def closing(self, database: RocksDBBackend) -> None:
        with self._lock:
            self._open.discard(database)
            self._resize()

    def set_budget(self, megabytes: int) -> None:
        """The app's `rocksdb.memory_mb`; databases already open follow it too."""
        self._megabytes = megabytes
        if self._parts is not None:
            cache, memtables = self._parts
            cache.set_capacity(self.budget_bytes)
            memtables.set_buffer_size(self.budget_bytes // 2)
        with self._lock:
            self._resize()

    def _resize(self) -> None:
        size = self._share(len(self._open))
        if size == self._write_buffer_bytes:
            return
        self._write_buffer_bytes = size
        for database in list(self._open):
            database.resize_memtable(size)

    def parts(self) -> tuple[Cache, WriteBufferManager]:
        """Made on the first open, which also fixes malloc's mmap threshold: without it RSS outgrows the budget."""
        if self._parts is None:
            fix_mmap_threshold()
            cache = Cache(self.budget_bytes)
            memtables = WriteBufferManager.new_write_buffer_manager_with_cache(self.budget_bytes // 2, False, cache)
            self._parts = cache, memtables
        return self._parts

    def usage_bytes(self) -> int:
        """Blocks and memtables held now."""
        return self._parts[0].get_usage() if self._parts is not None else 0


SHARED_MEMORY = SharedMemory()


def _options(create: bool, write_buffer_bytes: int) -> Options:
    cache, memtables = SHARED_MEMORY.parts()
    table = BlockBasedOptions()
    table.set_block_cache(cache)
    table.set_bloom_filter(10, False)
    # Index and filters in the cache, within the budget, and partitioned: a point lookup reads a 4 KB part
    # of each, not a whole file's (megabytes, checksummed) when a store outgrows the cache. Measured on a
    # 5M-key store under a 16 MB budget: 8.6 µs a lookup partitioned, 27.6 µs whole.
    table.set_cache_index_and_filter_blocks(True)
    table.set_index_type(BlockBasedIndexType.two_level_index_search())
    table.set_partition_filters(True)
    table.set_metadata_block_size(4096)
    table.set_pin_top_level_index_and_filter(True)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    options = Options(raw_mode=True)
    options.create_if_missing(create)
    options.create_missing_column_families(True)
    options.set_block_based_table_factory(table)
    options.set_write_buffer_manager(memtables)
    options.set_write_buffer_size(write_buffer_bytes)
    # A bloom filter over the memtable's keys (a tenth of its size, within the budget): a key not in it
    # skips its skiplist. Most lookups of a store of many keys are such (a new key, or one flushed to a
    # file): measured on 170,000 keys, 0.21 µs a lookup of a missing key, 0.66 µs without.
    options.set_memtable_prefix_bloom_ratio(0.1)
    options.set_memtable_whole_key_filtering(True)
    options.set_compression_type(DBCompressionType.lz4())
    options.set_bottommost_compression_type(DBCompressionType.zstd())
    # The offset's column family flushes with the data, so no WAL file waits for its tiny memtable.
    options.set_atomic_flush(True)
    options.set_keep_log_file_num(2)
    return options


def _is_corruption(exc: Exception) -> bool:
    return str(exc).startswith("Corruption")


# What the file system says when it refuses the directory itself (as RocksDB and rocksdict quote it):
# the files may be intact, so the store is not wiped.
DISK_REFUSALS = tuple(
    os.strerror(code)
    for code in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENAMETOOLONG, errno.ENOSPC, errno.EDQUOT)
)


def _open_error(path: Path, exc: Exception) -> StoreError:
    message = str(exc)
    if "While lock file" in message or "lock hold by" in message:
        return StoreLocked(f"store {path} is in use: {message}")
    if any(refusal in message for refusal in DISK_REFUSALS):
        return StoreWriteFailed(f"store {path} cannot be opened: {message}; nothing was wiped")
    return StoreCorrupted(f"store {path} cannot be opened: {message}")


class RocksDBBackend:
    """A RocksDB database at `path`, created when the directory is missing or empty.

    Raises `StoreCorrupted` when the directory holds a database that cannot be opened (missing
    or damaged files; data blocks are checked when read), `StoreLocked` when it is open elsewhere.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = Path(path)
        self._key = os.path.abspath(path)
        self._write_failed = False
        self._db, self._meta, self._offsets = self._open()
        SHARED_MEMORY.opened(self)
        _OPEN[self._key] = self

    def _open(self) -> tuple[Rdict, ColumnFamily | None, dict[int, int]]:
        try:
            create = not self._path.exists() or not any(self._path.iterdir())
            data_options = _options(create, SHARED_MEMORY.next_write_buffer_bytes())
            offsets_options = _options(create, OFFSETS_WRITE_BUFFER_BYTES)
            db = Rdict(str(self._path), data_options, column_families={_META_COLUMN_FAMILY: offsets_options})
        except Exception as exc:
            raise _open_error(self._path, exc) from exc
        meta = db.get_column_family(_META_COLUMN_FAMILY)
        offsets: dict[int, int] = {}
        for key, value in meta.items():
            assert isinstance(key, bytes) and isinstance(value, bytes)  # raw mode
            offsets[_source_of(key)] = _OFFSET.unpack(value)[0]
        del meta  # a column family object keeps the database, and its lock, alive
        return db, db.get_column_family_handle(_META_COLUMN_FAMILY), offsets

    def resize_memtable(self, size: int) -> None:
        if self._meta is not None:
            self._db.set_options({"write_buffer_size": str(size)})

    def get(self, key: bytes) -> bytes | None:
        try:
            value: bytes | None = self._db.get(key)
        except Exception as exc:
            if _is_corruption(exc):
                raise StoreCorrupted(f"store {self._path}: {exc}") from exc
            raise
        return value

    def items(self, start: bytes | None = None, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        # A raw iterator, not `Rdict.items()`: that one ends quietly on a damaged block.
        read_options = ReadOptions()
        if end is not None:
            read_options.set_iterate_upper_bound(end)
        iterator = self._db.iter(read_options)
        try:
            if start is None:
                iterator.seek_to_first()
            else:
                iterator.seek(start)
            valid, key, value, step = iterator.valid, iterator.key, iterator.value, iterator.next
            while valid():
                yield key(), value()
                step()
            iterator.status()
        except Exception as exc:
            if _is_corruption(exc):
                raise StoreCorrupted(f"store {self._path}: {exc}") from exc
            raise

    def write(self, changes: Iterable[Change], changelog_offset: int | None, source: int = 0) -> None:
        batch = WriteBatch(raw_mode=True)
        put, delete = batch.put, batch.delete
        for key, value in changes:
            if value is None:
                delete(key)
            else:
                put(key, value)
        if changelog_offset is not None:
            batch.put(_offset_key(source), _OFFSET.pack(changelog_offset), self._meta)
        if batch.is_empty():
            return
        try:
            self._db.write(batch)
        except Exception as exc:
            if _is_corruption(exc):
                raise StoreCorrupted(f"store {self._path}: {exc}") from exc
            # RocksDB refuses every later write, and its close, with this error: it stays the one reported.
            self._write_failed = True
            raise StoreWriteFailed(f"store {self._path} cannot be written: {exc}") from exc
        if changelog_offset is not None:
            self._offsets[source] = changelog_offset

    def changelog_offset(self, source: int = 0) -> int | None:
        return self._offsets.get(source)

    def approximate_count(self) -> int:
        return self._db.property_int_value("rocksdb.estimate-num-keys") or 0

    @property
    def path(self) -> Path:
        return self._path

    def checkpoint(self, target: str | os.PathLike[str]) -> None:
        """A consistent copy (hard links where possible) in a new directory, with the offset."""
        Checkpoint(self._db).create_checkpoint(str(target))

    def ingest(
        self,
        sst_files: Sequence[str | os.PathLike[str]],
        changelog_offset: int | None,
        source: int = 0,
        move: bool = False,
    ) -> None:
        """Load SST files (raw-mode keys, e.g. a snapshot), then record the offset they cover.

        Not one atomic step, so the offset goes last: a crash in between leaves the old offset,
        and replaying the changelog from there over the newer data ends in the same state. Files
        loaded later hide what earlier ones hold for the same keys, tombstones included. `move`
        takes the files (linked or renamed into the database) instead of copying them.
        """
        options = IngestExternalFileOptions()
        options.set_move_files(move)
        self._db.ingest_external_file([str(file) for file in sst_files], options)
        self.write((), changelog_offset, source)

    def replace(self, database: str | os.PathLike[str], changelog_offset: int) -> None:
        """This store becomes the database in `database` (a checkpoint's files, on the same file system,
        moved in whole), at `changelog_offset`: faster than ingesting its rows, which it holds already
        in RocksDB's own files. A crash half-way leaves a store that is missing or wiped, never a mix."""
        self.close()
        wipe(self._path)
        os.replace(database, self._path)
        self._db, self._meta, self._offsets = self._open()
        SHARED_MEMORY.opened(self)
        self.write((), changelog_offset)

    def wipe(self) -> None:
        self.close()
        wipe(self._path)
        self._db, self._meta, self._offsets = self._open()
        SHARED_MEMORY.opened(self)
        _OPEN[self._key] = self

    def close(self) -> None:
        """Flush and release the lock, so another process can open the store at once; idempotent.

        After a failed write RocksDB's close repeats that write's error ("Writer has previous
        error") once the files are closed: already reported, so not raised again. What the failed
        write would have added was never acknowledged as stored; the changelog still has it.
        """
        if self._meta is None:  # closed already
            return
        self._meta = None  # the handle would keep the database, and its lock, alive
        _OPEN.pop(self._key, None)
        _CLOSED_AT[self._key] = self._offsets.get(0)
        SHARED_MEMORY.closing(self)
        try:
            self._db.close()
        except Exception as exc:
            if not self._write_failed:
                raise StoreWriteFailed(f"store {self._path} cannot be closed: {exc}") from exc


def wipe(path: str | os.PathLike[str]) -> None:
    """Delete a closed store's directory; refuses a directory holding anything RocksDB did not write.

    The check keeps a misconfigured state directory from costing anyone their files.
    """
    directory = Path(path)
    if not directory.exists():
        return
    strangers = [
        entry.name
        for entry in directory.iterdir()
        if entry.is_dir() or not (entry.name.startswith(_DB_FILES) or entry.name.endswith(_DB_SUFFIXES))
    ]
    if strangers:
        raise StoreError(f"not wiping {directory}: it holds files that are not a store's: {sorted(strangers)[:5]}")
    shutil.rmtree(directory)
    _CLOSED_AT.pop(os.path.abspath(directory), None)


_OPEN: weakref.WeakValueDictionary[str, RocksDBBackend] = weakref.WeakValueDictionary()
"""The databases this process has open, by absolute path."""
_CLOSED_AT: dict[str, int | None] = {}
"""The offset each store directory held when this process closed it or last read it: nothing else writes it
but the processes sharing the state directory."""


def held_offset(path: str | os.PathLike[str]) -> int | None:
    """The changelog offset a store's directory holds, as cheaply as this process knows it: an open store's
    own, the one it closed with, else read from the directory once (`stored_offset`)."""
    key = os.path.abspath(path)
    database = _OPEN.get(key)
    if database is not None:
        return database.changelog_offset()
    if key not in _CLOSED_AT:
        _CLOSED_AT[key] = stored_offset(path)
    return _CLOSED_AT[key]


def stored_offset(path: str | os.PathLike[str]) -> int | None:
    """The changelog offset a store's directory holds, read without its lock: the store may be open in a
    task or a standby meanwhile. None for a directory that holds no store, or one that cannot be read."""
    directory = Path(path)
    if not (directory / "CURRENT").exists():
        return None
    try:
        db = Rdict(
            str(directory),
            Options(raw_mode=True),
            column_families={_META_COLUMN_FAMILY: Options(raw_mode=True)},
            access_type=AccessType.read_only(),
        )
    except Exception:
        return None
    try:
        value = db.get_column_family(_META_COLUMN_FAMILY).get(_offset_key(0))
    finally:
        db.close()
    return None if value is None else int(_OFFSET.unpack(value)[0])
