"""SST files: what a RocksDB store ingests whole (snapshots, and the bootstrap readers of global stores).

Apart from the snapshot format, so that a reader process writes them without importing it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from rocksdict import Options, SstFileWriter


def sst_options() -> Options:
    """Raw mode, as the runtime's databases: an SST from other options would not ingest."""
    return Options(raw_mode=True)


def write_partition_sst(rows: Iterable[tuple[bytes, bytes | None]], path: str | os.PathLike[str]) -> int:
    """Writes rows, strictly increasing by key bytes, to one SST file; returns the row count.

    A row whose value is None is a tombstone: ingested, it deletes the key from older data. Writes
    no file when there are no rows (RocksDB cannot make an empty SST). A repeated or out-of-order
    key raises `ValueError` naming it.
    """
    target = Path(path)
    writer: SstFileWriter | None = None
    previous: bytes | None = None
    count = 0
    try:
        for key, value in rows:
            if previous is not None and key <= previous:
                problem = "repeated" if key == previous else "out of order"
                raise ValueError(f"key {key!r} is {problem} (after {previous!r}): an SST needs increasing keys")
            if writer is None:
                target.parent.mkdir(parents=True, exist_ok=True)
                writer = SstFileWriter(sst_options())
                writer.open(str(target))
            if value is None:
                del writer[key]
            else:
                writer[key] = value
            previous = key
            count += 1
        if writer is not None:
            writer.finish()
            writer = None
    finally:
        if writer is not None:  # failed part-way: leave no half-written file behind
            del writer
            target.unlink(missing_ok=True)
    return count
