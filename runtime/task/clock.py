"""The wall clock a task's punctuations keep: the system's, or one a test moves by hand (`testkit`)."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds, for when a wall-clock punctuation is due."""
        ...

    def epoch_ms(self) -> int:
        """The time a wall-clock punctuation fires for, and its outputs' timestamp."""
        ...


class SystemClock:
    monotonic = staticmethod(time.monotonic)

    @staticmethod
    def epoch_ms() -> int:
        return time.time_ns() // 1_000_000


SYSTEM_CLOCK = SystemClock()
