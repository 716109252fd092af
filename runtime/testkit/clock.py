"""A wall clock that moves only when the test moves it."""

from __future__ import annotations


class ManualClock:
    """Starts at `epoch_ms`; `advance` moves both of its readings by the same amount."""

    def __init__(self, epoch_ms: int):
        self._epoch_ms = epoch_ms
        self._elapsed_ms = 0

    def monotonic(self) -> float:
        return self._elapsed_ms / 1000

    def epoch_ms(self) -> int:
        return self._epoch_ms + self._elapsed_ms

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError(f"the wall clock only moves forward, not by {ms} ms")
        self._elapsed_ms += ms
