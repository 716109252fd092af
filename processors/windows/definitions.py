"""Window definitions with Kafka Streams' semantics: which windows a timestamp falls in, when a window
closes, and when a record is late.

Times are milliseconds (a record's timestamp). The **stream time** of a task is the largest timestamp
it has seen. A window is closed once the stream time reaches its **close time**, its end plus the
grace period (which waits for out-of-order records); a closed window never changes again, so its
result is final. A record is **late** when every window it belongs to has closed.

Tumbling and hopping windows are half-open, `[start, end)`; sliding windows and sessions include
both ends, `[start, end]`, as in Kafka Streams: their close time is one millisecond later.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class Window(NamedTuple):
    start: int
    end: int


def _check(**durations: int) -> None:
    """A definition with a duration out of range would silently put every record in the wrong window."""
    for name, value in durations.items():
        if name == "grace_ms" and value < 0:
            raise ValueError(f"grace_ms must be 0 or more, got {value}")
        if name != "grace_ms" and value <= 0:
            raise ValueError(f"{name} must be greater than 0, got {value}")


@dataclass(frozen=True, slots=True)
class Tumbling:
    """Windows of `size_ms` side by side, aligned to the epoch: each timestamp falls in exactly one."""

    size_ms: int
    grace_ms: int = 0

    def __post_init__(self) -> None:
        _check(size_ms=self.size_ms, grace_ms=self.grace_ms)

    def windows_for(self, timestamp: int) -> list[Window]:
        start = timestamp - timestamp % self.size_ms
        return [Window(start, start + self.size_ms)]

    def close_time(self, window: Window) -> int:
        return window.end + self.grace_ms

    def is_late(self, timestamp: int, stream_time: int) -> bool:
        return stream_time >= self.close_time(self.windows_for(timestamp)[-1])

    @property
    def retention_ms(self) -> int:
        """How long a window store must keep a window after its start: until it has closed."""
        return self.size_ms + self.grace_ms


@dataclass(frozen=True, slots=True)
class Hopping:
    """Windows of `size_ms` starting every `advance_ms` (aligned to the epoch), so they overlap when the
    advance is smaller than the size. As in Kafka Streams, no window starts before 0."""

    size_ms: int
    advance_ms: int
    grace_ms: int = 0

    def __post_init__(self) -> None:
        _check(size_ms=self.size_ms, advance_ms=self.advance_ms, grace_ms=self.grace_ms)
        if self.advance_ms > self.size_ms:
            raise ValueError(f"advance_ms ({self.advance_ms}) must not exceed size_ms ({self.size_ms})")

    def windows_for(self, timestamp: int) -> list[Window]:
        """The windows holding `timestamp`, by start."""
        last = timestamp - timestamp % self.advance_ms
        earliest = timestamp - self.size_ms + 1
        first = max(0, -(-earliest // self.advance_ms) * self.advance_ms)  # the first multiple from there on
        return [Window(start, start + self.size_ms) for start in range(first, last + 1, self.advance_ms)]

    def close_time(self, window: Window) -> int:
        return window.end + self.grace_ms

    def is_late(self, timestamp: int, stream_time: int) -> bool:
        return stream_time >= self.close_time(self.windows_for(timestamp)[-1])

    @property
    def retention_ms(self) -> int:
        """How long a window store must keep a window after its start: until it has closed."""
        return self.size_ms + self.grace_ms


@dataclass(frozen=True, slots=True)
class Sliding:
    """Kafka Streams' sliding windows: windows of `time_difference_ms` (both ends included) placed where
    the records are, rather than on a grid. Each record at `t` defines two: its left window, which ends
    at it, `[t - d, t]`, and its right window, which starts just after it, `[t + 1, t + 1 + d]` and
    exists only if some record falls in it. Together they are every distinct set of records that lie
    within `d` of each other, each counted once."""

    time_difference_ms: int
    grace_ms: int = 0

    def __post_init__(self) -> None:
        _check(time_difference_ms=self.time_difference_ms, grace_ms=self.grace_ms)

    def left_window(self, timestamp: int) -> Window:
        return Window(timestamp - self.time_difference_ms, timestamp)

    def right_window(self, timestamp: int) -> Window:
        return Window(timestamp + 1, timestamp + 1 + self.time_difference_ms)

    def close_time(self, window: Window) -> int:
        return window.end + 1 + self.grace_ms

    def is_late(self, timestamp: int, stream_time: int) -> bool:
        """Whether the last window that could hold `timestamp`, `[t, t + d]`, has closed."""
        return stream_time >= self.close_time(Window(timestamp, timestamp + self.time_difference_ms))

    @property
    def retention_ms(self) -> int:
        """How long a store must keep a record after its timestamp: until its right window has closed."""
        return self.time_difference_ms + self.grace_ms + 1


@dataclass(frozen=True, slots=True)
class Session:
    """Sessions of activity per key: a record within `gap_ms` of a session joins it, and one within
    the gap of two sessions merges them. A session is `[first timestamp, last timestamp]`; it closes
    once the stream time reaches its end plus the gap plus the grace period."""

    gap_ms: int
    grace_ms: int = 0

    def __post_init__(self) -> None:
        _check(gap_ms=self.gap_ms, grace_ms=self.grace_ms)

    def window_for(self, timestamp: int) -> Window:
        """The session a record starts on its own."""
        return Window(timestamp, timestamp)

    def reach(self, timestamp: int) -> tuple[int, int]:
        """(earliest end, latest start) of the sessions a record at `timestamp` joins: the bounds to pass
        to `SessionStore.find`."""
        return timestamp - self.gap_ms, timestamp + self.gap_ms

    def merged(self, first: Window, second: Window) -> Window:
        return Window(min(first.start, second.start), max(first.end, second.end))

    def close_time(self, session: Window) -> int:
        return session.end + self.gap_ms + 1 + self.grace_ms

    def is_late(self, timestamp: int, stream_time: int) -> bool:
        """Whether the session the record would start has closed. A record that would join a session
        that has closed is late too: only the store knows those (`SessionStore.find`)."""
        return stream_time >= self.close_time(self.window_for(timestamp))

    @property
    def retention_ms(self) -> int:
        """How long a store must keep a session after its end: as long as a record that is not late may
        still fall within the gap of it (and be found late for that reason)."""
        return 2 * self.gap_ms + self.grace_ms


WindowDefinition = Tumbling | Hopping | Sliding | Session
