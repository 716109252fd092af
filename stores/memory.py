"""A backend in process memory: nothing survives a restart, so it restores from the changelog."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from sortedcontainers import SortedList  # type: ignore[import-untyped]

from stores.backend import Change


class MemoryBackend:
    """A dict, plus a sorted index of its keys built on the first range read and kept up from then on.

    Keeping keys sorted costs several times a dict insert, so stores that are only read by key
    (counts, aggregates) never pay for it.
    """

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._index: SortedList | None = None
        self._offsets: dict[int, int] = {}

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def items(self, start: bytes | None = None, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        if self._index is None:
            self._index = SortedList(self._data)
        data = self._data
        for key in self._index.irange(start, end, inclusive=(True, False)):
            yield key, data[key]

    def write(self, changes: Iterable[Change], changelog_offset: int | None, source: int = 0) -> None:
        data, index = self._data, self._index
        if index is None:
            for key, value in changes:
                if value is None:
                    data.pop(key, None)
                else:
                    data[key] = value
        else:
            for key, value in changes:
                if value is None:
                    if data.pop(key, None) is not None:
                        index.remove(key)
                else:
                    if key not in data:
                        index.add(key)
                    data[key] = value
        if changelog_offset is not None:
            self._offsets[source] = changelog_offset

    def changelog_offset(self, source: int = 0) -> int | None:
        return self._offsets.get(source)

    def approximate_count(self) -> int:
        return len(self._data)

    def wipe(self) -> None:
        self._data = {}
        self._index = None
        self._offsets = {}

    def close(self) -> None:
        self.wipe()
