"""What a store keeps its bytes in: a sorted map plus the source offsets written with it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

Change = tuple[bytes, bytes | None]
"""A key and its new value; `None` deletes the key (a changelog tombstone)."""


class Backend(Protocol):
    """Sorted bytes to bytes, in the byte order of the keys.

    The changelog offset is written in the same atomic write as the data it covers, so after
    a crash the data and the offset always agree and a restore resumes exactly where they stop.
    A task's store mirrors one changelog partition (`source` 0); a global store mirrors every
    partition of its topic and keeps one offset per partition (`source` = the partition).
    """

    def get(self, key: bytes) -> bytes | None: ...

    def items(self, start: bytes | None = None, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Pairs with `start <= key < end` (a bound of `None` is open), in key byte order.

        Finish or drop the iterator before the next `write`: RocksDB iterates a snapshot, memory does not.
        """
        ...

    def write(self, changes: Iterable[Change], changelog_offset: int | None, source: int = 0) -> None:
        """Apply the changes in order, and the offset of `source` unless it is `None`, all or nothing."""
        ...

    def changelog_offset(self, source: int = 0) -> int | None:
        """The next offset of `source` to read when restoring; `None` if none was ever written."""
        ...

    def approximate_count(self) -> int: ...

    def wipe(self) -> None:
        """Drop all data and the offset; the backend stays open and empty."""
        ...

    def close(self) -> None: ...
