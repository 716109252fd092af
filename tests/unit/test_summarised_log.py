"""Lines about a recurring event, bounded: a burst's first lines in full, then one summary line per interval
with the counts by kind, and a quiet interval ending the burst."""

from __future__ import annotations

import asyncio
import logging

import pytest

from runtime.summarised_log import SummarisedLog

log = logging.getLogger("tests.summarised")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def event(lines: SummarisedLog, kind: str, line: str) -> None:
    """As a caller does: the line logged when it is told, else counted."""
    if lines.tells(kind):
        log.warning(line)


def told(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [entry.getMessage() for entry in caplog.records if entry.name == log.name]


def test_a_burst_is_told_in_full_then_counted_by_kind_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=log.name)
    clock = Clock()
    lines = SummarisedLog(log, "failed records not logged one by one", in_full=3, every_s=10.0, clock=clock)
    for second in range(25):  # a thousand events a second for 25 s, of two kinds
        clock.now = 1_000.0 + second
        for n in range(1_000):
            kind = "dead-lettered in 'a' (ValueError)" if n % 4 else "dead-lettered in 'b' (KeyError)"
            event(lines, kind, f"record {second * 1_000 + n} failed")
    lines.flush()
    assert told(caplog) == [
        "record 0 failed",
        "record 1 failed",
        "record 2 failed",
        "9,997 failed records not logged one by one in the last 10 s: "
        "7,498 dead-lettered in 'a' (ValueError), 2,499 dead-lettered in 'b' (KeyError)",
        "10,000 failed records not logged one by one in the last 10 s: "
        "7,500 dead-lettered in 'a' (ValueError), 2,500 dead-lettered in 'b' (KeyError)",
        "5,000 failed records not logged one by one in the last 4 s: "
        "3,750 dead-lettered in 'a' (ValueError), 1,250 dead-lettered in 'b' (KeyError)",
    ]


def test_a_burst_ends_when_no_event_came_for_an_interval(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=log.name)
    clock = Clock()
    lines = SummarisedLog(log, "events", in_full=2, every_s=10.0, clock=clock)
    for n in range(4):
        event(lines, "kind", f"event {n}")
    clock.now += 5.0
    event(lines, "kind", "event 4")
    clock.now += 5.0
    event(lines, "kind", "event 5")  # ends the interval, and is counted in the next
    clock.now += 15.0
    event(lines, "kind", "event 6")  # none came for 15 s: a new burst
    lines.flush()
    assert told(caplog) == [
        "event 0",
        "event 1",
        "3 events in the last 10 s: 3 kind",
        "1 events in the last 15 s: 1 kind",
        "event 6",
    ]


@pytest.mark.anyio
async def test_the_summary_comes_when_its_interval_ends_though_the_events_stopped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=log.name)
    lines = SummarisedLog(log, "events", in_full=1, every_s=0.05)
    for n in range(3):
        event(lines, "kind", f"event {n}")
    assert told(caplog) == ["event 0"]
    await asyncio.sleep(0.2)
    assert len(told(caplog)) == 2 and told(caplog)[1].startswith("2 events in the last 0 s: 2 kind")


@pytest.mark.anyio
async def test_under_a_running_loop_a_burst_goes_on_across_intervals_while_events_come(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=log.name)
    lines = SummarisedLog(log, "events", in_full=1, every_s=0.2)
    for n in range(30):  # an event every 20 ms for three intervals: counted, not told
        event(lines, "kind", f"event {n}")
        await asyncio.sleep(0.02)
    assert [line for line in told(caplog) if line.startswith("event")] == ["event 0"]
    await asyncio.sleep(0.5)  # no event for longer than an interval: the burst is over
    assert told(caplog)[-1].endswith(" kind")
    event(lines, "kind", "event 30")
    assert told(caplog)[-1] == "event 30"
