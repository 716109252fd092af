"""Lines about one recurring event, bounded however often it happens: a burst's first few lines in full,
then one line per interval that counts the rest by kind.

A processor that fails on every record under `skip` or `dead_letter` fails thousands of times a second;
a line for each floods the log and costs the worker more than the records do. The first `in_full` lines
of a burst are logged as they come (`tells` says so), each naming its record; after them, each is only
counted under its kind (what happened, where and why), and when `every_s` has passed since the burst began
(or since its last summary), one line tells the counts. A burst ends when no event has come for `every_s`:
the next is again logged in full. The summary is due by a timer of the running event loop, so it comes even
when the events stop; while it runs, an event is counted without reading the clock, and the timer tells
whether any came in its interval. `flush` tells what is counted at once, when the worker stops.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable


class SummarisedLog:
    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        in_full: int = 5,
        every_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        """`what` names the events in the summary line ("records not logged one by one")."""
        self._logger, self._what = logger, what
        self._in_full, self._every_s, self._clock = in_full, every_s, clock
        self._told = 0  # lines logged in full in the current burst
        # By kind, since the interval began; a dict, not a Counter, whose `+=` costs twice as much per event.
        self._counted: dict[str, int] = {}
        self._interval_began = 0.0
        self._last = float("-inf")  # when the last event came
        self._timer: asyncio.TimerHandle | None = None

    def tells(self, kind: str) -> bool:
        """One event of `kind`: whether its line is to be logged now (one of a burst's first), else it is counted
        under `kind`. The caller logs the line: the counted ones cost no formatting."""
        if self._timer is not None:  # counting, and the interval's summary is due by the timer
            counted = self._counted
            counted[kind] = counted.get(kind, 0) + 1
            return False
        now = self._clock()
        if self._told and now - self._interval_began >= self._every_s:
            self._end_interval(now)  # no timer told it (no event loop runs)
        if now - self._last >= self._every_s:
            self._told = 0  # the burst before is over
        self._last = now
        if self._told < self._in_full:
            if not self._told:
                self._interval_began = now
            self._told += 1
            return True
        self._counted[kind] = self._counted.get(kind, 0) + 1
        if self._timer is None:
            self._schedule(self._interval_began + self._every_s - now)
        return False

    def flush(self) -> None:
        """Tell what is counted now, without waiting for the interval's end."""
        self._cancel_timer()
        self._summarise(self._clock())

    def _schedule(self, delay: float) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # told at the next event after the interval, or by `flush`
        self._timer = loop.call_later(max(0.0, delay), self._on_timer)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        now = self._clock()
        if self._counted:
            self._last = now  # the events counted came within the interval: the burst goes on
        self._end_interval(now)

    def _end_interval(self, now: float) -> None:
        self._cancel_timer()
        self._summarise(now)
        self._interval_began = now

    def _summarise(self, now: float) -> None:
        """The summary line of the counts, if any."""
        if not self._counted:
            return
        by_count = sorted(self._counted.items(), key=lambda counted: counted[1], reverse=True)
        counts = ", ".join(f"{count:,} {kind}" for kind, count in by_count)
        seconds = now - self._interval_began
        total = sum(self._counted.values())
        self._logger.warning("%s %s in the last %.0f s: %s", f"{total:,}", self._what, seconds, counts)
        self._counted = {}
