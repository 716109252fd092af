"""What the `Aggregate` processor asks of each kind of window: add a record, close what the stream time
passed, and hand over the updates since the last commit."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, NamedTuple, Protocol


class WindowResult(NamedTuple):
    """A window's aggregate, as emitted: `key` is the group key. `removed`: the window is no more (a session
    merged into another), and this is the notice of it."""

    key: Any
    start: int
    end: int
    aggregate: Any
    removed: bool = False


class Windowing(Protocol):
    """Aggregates records into windows kept in a store; the store's stream time is the caller's to advance."""

    @property
    def closes_every_ms(self) -> int:
        """Every stream time at which one of its windows can close is a multiple of this: a stream-time
        punctuation that often sees every close, and no more often, since each one ends a batch."""
        ...

    def add(self, key: Any, value: Any, timestamp: int, stream_time: int) -> str | None:
        """Add a record's value to its windows that are open at `stream_time` (which already counts this
        record); returns why it is late instead, when none is open."""
        ...

    def close(self, previous: int, stream_time: int) -> list[WindowResult]:
        """The stream time moved from `previous` to `stream_time`: the final results of the windows that
        closed in between (emitting final results), before the store's `advance` expires them."""
        ...

    def take_updates(self) -> list[WindowResult]:
        """Emitting updates, or told to track changes: the latest result of every window changed since the
        last call (emitting final results, a window among them may have closed since)."""
        ...

    def take_due(self) -> list[WindowResult]:
        """Given `EveryRecords`: the windows whose N-th record since their last early result came since the
        last call, with their aggregates."""
        ...


def hashable(key: Any) -> Hashable:
    """A group key as a dictionary key: a key decoded from JSON or msgpack may be a list or a map."""
    if isinstance(key, list | tuple):
        return tuple(hashable(item) for item in key)
    if isinstance(key, dict):
        return frozenset((hashable(name), hashable(value)) for name, value in key.items())
    return key  # type: ignore[no-any-return]
