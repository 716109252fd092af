"""The window helpers a processor calls: the windows of a timestamp, close times, lateness, retention."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processors.windows import Hopping, Session, Sliding, Tumbling, Window


def test_tumbling_windows_are_half_open_and_close_at_their_end_plus_grace() -> None:
    minutes = Tumbling(size_ms=60_000, grace_ms=5_000)
    assert minutes.windows_for(0) == [Window(0, 60_000)]
    assert minutes.windows_for(59_999) == [Window(0, 60_000)]
    assert minutes.windows_for(60_000) == [Window(60_000, 120_000)]
    assert minutes.close_time(Window(0, 60_000)) == 65_000
    assert not minutes.is_late(59_999, stream_time=64_999)
    assert minutes.is_late(59_999, stream_time=65_000)
    assert minutes.retention_ms == 65_000


def test_hopping_windows_overlap_and_none_starts_before_zero() -> None:
    windows = Hopping(size_ms=10, advance_ms=3, grace_ms=2)
    assert windows.windows_for(20) == [Window(12, 22), Window(15, 25), Window(18, 28)]
    assert windows.windows_for(4) == [Window(0, 10), Window(3, 13)]
    assert windows.windows_for(12)[-1] == Window(12, 22)  # the last of its windows to close, at 24
    assert not windows.is_late(12, stream_time=23)
    assert windows.is_late(12, stream_time=24)


@given(size=st.integers(1, 50), advance=st.integers(1, 50), timestamp=st.integers(0, 500))
def test_a_hopping_timestamp_falls_in_every_window_that_holds_it(size: int, advance: int, timestamp: int) -> None:
    if advance > size:
        with pytest.raises(ValueError, match="must not exceed size_ms"):
            Hopping(size, advance)
        return
    holding = [Window(start, start + size) for start in range(0, timestamp + 1, advance) if timestamp < start + size]
    assert Hopping(size, advance).windows_for(timestamp) == holding


def test_sliding_windows_include_both_ends() -> None:
    windows = Sliding(time_difference_ms=10, grace_ms=5)
    assert windows.left_window(100) == Window(90, 100)
    assert windows.right_window(100) == Window(101, 111)
    assert windows.close_time(Window(90, 100)) == 106  # a record at 100 + 5 still reaches [90, 100]
    assert not windows.is_late(100, stream_time=115)  # [100, 110] is open until 116
    assert windows.is_late(100, stream_time=116)
    assert windows.retention_ms == 16


def test_a_session_reaches_the_gap_around_a_record_and_closes_a_gap_after_its_end() -> None:
    sessions = Session(gap_ms=30, grace_ms=10)
    assert sessions.window_for(500) == Window(500, 500)
    assert sessions.reach(500) == (470, 530)
    assert sessions.merged(Window(400, 480), Window(500, 500)) == Window(400, 500)
    assert sessions.close_time(Window(400, 500)) == 541
    assert not sessions.is_late(500, stream_time=540)
    assert sessions.is_late(500, stream_time=541)
    assert sessions.retention_ms == 70


@pytest.mark.parametrize(
    ("build", "problem"),
    [
        (lambda: Tumbling(0), "size_ms must be greater than 0, got 0"),
        (lambda: Tumbling(10, -1), "grace_ms must be 0 or more, got -1"),
        (lambda: Hopping(10, 0), "advance_ms must be greater than 0, got 0"),
        (lambda: Sliding(-5), "time_difference_ms must be greater than 0, got -5"),
        (lambda: Session(0), "gap_ms must be greater than 0, got 0"),
    ],
)
def test_a_duration_out_of_range_is_refused(build: Callable[[], object], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        build()
