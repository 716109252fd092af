"""A record loop's pace: a slow processor's records read the clock every few, a fast one's every 64 at most,
and a yield comes once `YIELD_AFTER_S` of processing has passed."""

from __future__ import annotations

import time

import pytest

from runtime.task.pace import MAX_STRIDE, YIELD_AFTER_S, Pace


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(time, "monotonic", clock.monotonic)  # the module reads it as time.monotonic()
    return clock


def run(pace: Pace, clock: Clock, records: int, seconds_each: float) -> int:
    """The record loop's countdown over `records`, each taking `seconds_each`: how many yields."""
    yields = 0
    for _ in range(records):
        pace.countdown -= 1
        if not pace.countdown:
            yields += pace.due()
            pace.countdown = pace.stride
        clock.now += seconds_each
    return yields


def test_a_slow_processor_reads_the_clock_every_record_and_yields_on_time(clock: Clock) -> None:
    pace = Pace()
    assert run(pace, clock, 100, 0.1) >= int(100 * 0.1 / YIELD_AFTER_S) - 1
    assert pace.stride == max(1, int(YIELD_AFTER_S / 4 / 0.1))


def test_a_fast_processor_reads_the_clock_at_most_every_64_records(clock: Clock) -> None:
    pace = Pace()
    run(pace, clock, 10_000, 0.000_01)
    assert pace.stride == MAX_STRIDE


def test_a_processor_that_slows_down_is_read_every_record_within_a_stride(clock: Clock) -> None:
    pace = Pace()
    run(pace, clock, 10_000, 0.000_01)
    run(pace, clock, MAX_STRIDE + 20, 0.1)
    assert pace.stride == max(1, int(YIELD_AFTER_S / 4 / 0.1))
