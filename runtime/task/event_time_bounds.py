"""Records from the future: an event time further ahead of the wall clock than its topic's `max_ahead` is
refused, and a record that moves stream time on by more than that in one step is logged.

Producers nobody controls write event times, and one record stamped in the year 3000 (or merely an hour
ahead) would move stream time there: every window of every key would close at once, de-duplication would
forget every id, and all that follows would be late. So such a record goes to the deserialization policy,
as a record whose event time cannot be read does, and never moves stream time.

The wall clock is read once per batch (`AheadGuard.start`): every record of a batch was written before the
batch was taken, so the bound it gives is as strict for its last record as for its first. The per-record
loop compares a record's time with `alarm` only when the record would move stream time, so a record that
does not costs nothing and one that does costs one comparison; past the alarm, `judge` decides. The alarm
is the lower of the bound and stream time plus `max_ahead`, so a jump that large reaches `judge` too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from runtime.task.clock import Clock
from runtime.task.context import NEVER
from runtime.task.event_time import TimestampError

log = logging.getLogger(__name__)

JUMPS_LOGGED_EVERY_S = 60.0


class EventTimeAhead(TimestampError):
    """A record's event time is further ahead of the wall clock than its topic's `max_ahead`."""


def moment(epoch_ms: int) -> str:
    """Epoch milliseconds in ISO 8601, UTC; the number itself where no calendar date holds it."""
    try:
        return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except (OverflowError, ValueError, OSError):
        return f"{epoch_ms} ms since the epoch"


def span(ms: int) -> str:
    """A duration as days and h:mm:ss.fff."""
    try:
        return str(timedelta(milliseconds=ms))
    except OverflowError:
        return f"{ms} ms"


@dataclass
class StreamTimeJumps:
    """The log of stream-time jumps, one for the worker: a line at most every `every_s`, which counts the
    jumps not logged since the line before, so a topic full of them never floods the log."""

    every_s: float = JUMPS_LOGGED_EVERY_S
    _logged_at: float | None = None
    _unlogged: int = 0

    def jumped(self, now: float, processor: str, raw: Any, stream_time: int, timestamp: int, max_ahead_ms: int) -> None:
        """A jump noted at `now` (monotonic seconds)."""
        if self._logged_at is not None and now - self._logged_at < self.every_s:
            self._unlogged += 1
            return
        since = f" ({self._unlogged} more since the last such line)" if self._unlogged else ""
        self._logged_at, self._unlogged = now, 0
        log.warning(
            "stream time of processor '%s' jumped %s in one record, from %s to %s, at record %s[%d]@%d: more than "
            "max_ahead (%s) of topic '%s'; windows and de-duplication close on it%s",
            processor,
            span(timestamp - stream_time),
            moment(stream_time),
            moment(timestamp),
            raw.topic,
            raw.partition,
            raw.offset,
            span(max_ahead_ms),
            raw.topic,
            since,
        )


class AheadGuard:
    """The bound of one input topic of a task: `start` each batch, then `judge` the records past `alarm`."""

    def __init__(self, processor: str, max_ahead_ms: int | None, clock: Clock, jumps: StreamTimeJumps):
        self._processor = processor
        self._max_ahead_ms = max_ahead_ms
        self._clock = clock
        self._jumps = jumps
        self._now = self._limit = NEVER
        self.alarm = NEVER  # a record past it, that would move stream time, is judged

    def start(self, stream_time: int) -> int:
        """The alarm for a batch that starts at `stream_time`: the wall clock is read here, and only here."""
        ahead = self._max_ahead_ms
        if ahead is None:
            return NEVER
        self._now = self._clock.epoch_ms()
        self._limit = self._now + ahead
        self.alarm = min(self._limit, stream_time + ahead)
        return self.alarm

    def judge(self, raw: Any, timestamp: int, stream_time: int) -> int:
        """The alarm after `raw`, whose `timestamp` passed the alarm and would move stream time on from
        `stream_time`: a jump of more than `max_ahead` is logged; a time beyond the bound raises
        `EventTimeAhead`, for the deserialization policy."""
        ahead = self._max_ahead_ms
        assert ahead is not None, "no alarm is set without a bound"
        if timestamp > self._limit:
            raise EventTimeAhead(
                f"event time {timestamp} ({moment(timestamp)}) is {span(timestamp - self._now)} ahead of the wall "
                f"clock ({moment(self._now)}): more than max_ahead ({span(ahead)}) of topic '{raw.topic}'"
            )
        if stream_time >= 0 and timestamp - stream_time > ahead:
            self._jumps.jumped(self._clock.monotonic(), self._processor, raw, stream_time, timestamp, ahead)
        self.alarm = min(self._limit, timestamp + ahead)
        return self.alarm
