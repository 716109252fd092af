"""The built-in operators close what stream time passed without a record of theirs: on the test kit's driver,
`advance_stream_time` closes the trailing windows of `Aggregate`, sends a left or outer `WindowJoin`'s
unmatched records, and lets `Deduplicate` forget its old ids, as a later record of that time would."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runtime.testkit import AppDriver

MakeDriver = Callable[..., AppDriver]
T = 1_740_000_000_000  # a multiple of every window size below
MINUTE = 60_000
TOPIC = {"partitions": 1, "key_serde": "str", "value_serde": "json"}


def aggregate_app(window: dict[str, Any], guarantee: str = "at_least_once") -> dict[str, Any]:
    return {
        "app_id": "closing",
        "guarantee": guarantee,
        "topics": {"in": TOPIC, "out": TOPIC},
        "processors": [{"name": "agg", "class": "processors.windows:Aggregate", "inputs": ["in"], "outputs": ["out"],
                        "params": {"window": window, "aggregation": {"type": "count"}, "output": "out"}}],
    }  # fmt: skip


def result(start: int, end: int, count: int) -> tuple[str, dict[str, int]]:
    return "a", {"start": start, "end": end, "value": count}


# Each window type, the stream time at which the windows of records at T + 1000 and T + 3000 have all
# closed, and the results the records left open until then.
TRAILING: dict[str, tuple[dict[str, Any], int, list[tuple[str, dict[str, int]]]]] = {
    "tumbling": ({"type": "tumbling", "size_ms": MINUTE, "grace_ms": 10_000}, T + 70_000, [result(T, T + MINUTE, 2)]),
    "hopping": (
        {"type": "hopping", "size_ms": MINUTE, "advance_ms": 20_000},
        T + MINUTE,
        [result(T - 40_000, T + 20_000, 2), result(T - 20_000, T + 40_000, 2), result(T, T + MINUTE, 2)],
    ),
    "sliding": (
        {"type": "sliding", "time_difference_ms": 5000},
        T + 6002,  # the right window of T + 1000, [T + 1001, T + 6001], closes last
        [result(T - 2000, T + 3000, 2), result(T + 1001, T + 6001, 1)],
    ),
    "session": ({"type": "session", "gap_ms": 5000}, T + 8001, [result(T + 1000, T + 3000, 2)]),
}


@pytest.mark.parametrize("kind", TRAILING)
def test_the_trailing_windows_close_when_the_test_moves_stream_time_as_a_later_record_would_close_them(
    app_driver: MakeDriver, kind: str
) -> None:
    window, closed_at, trailing = TRAILING[kind]
    records = [("a", {"n": 1}, T + 1000), ("a", {"n": 2}, T + 3000)]
    moved, pushed = app_driver(aggregate_app(window)), app_driver(aggregate_app(window))
    for driver in (moved, pushed):
        driver.pipe_all("in", records)
    before = [(r.key, r.value) for r in moved.read("out")]
    assert before == [(r.key, r.value) for r in pushed.read("out")]
    moved.advance_stream_time(closed_at - 1)
    assert [(r.key, r.value) for r in moved.read("out")] == trailing[:-1]  # all but the last closed
    moved.advance_stream_time(closed_at)
    assert [(r.key, r.value) for r in moved.read("out")] == trailing[-1:]
    pushed.pipe("in", {"n": 0}, key="b", timestamp=closed_at)  # what a record of that time closes
    assert [(r.key, r.value) for r in pushed.read("out") if r.key == "a"] == trailing
    moved.advance_stream_time(closed_at + 10 * MINUTE)  # once each
    moved.pipe("in", {"n": 3}, key="a", timestamp=T + 2000)  # its windows closed: late
    assert moved.read("out") == []
    assert moved.count("agg", "late_records") == 1


def test_a_window_closed_by_moving_stream_time_commits_its_result_under_exactly_once(app_driver: MakeDriver) -> None:
    driver = app_driver(aggregate_app({"type": "tumbling", "size_ms": MINUTE}, "exactly_once"), auto_commit=False)
    driver.pipe("in", {"n": 1}, key="a", timestamp=T + 1000)
    driver.commit()
    driver.advance_stream_time(T + MINUTE)
    assert driver.read("out") == []  # in the open transaction
    driver.commit()
    assert [(r.key, r.value, r.timestamp) for r in driver.read("out")] == [(*result(T, T + MINUTE, 1), T + MINUTE - 1)]


def join_app(join: str) -> dict[str, Any]:
    return {
        "app_id": "closing",
        "topics": {"left": TOPIC, "right": TOPIC, "out": TOPIC},
        "processors": [{"name": "join", "class": "processors.joins:WindowJoin", "inputs": ["left", "right"],
                        "outputs": ["out"], "params": {"left": "left", "right": "right", "time_difference_ms": 1000,
                                                       "join": join, "output": "out"}}],
    }  # fmt: skip


@pytest.mark.parametrize(
    ("join", "alone"),
    [
        ("inner", []),
        ("left", [("a", {"left": {"n": 1}, "right": None}, T)]),
        ("outer", [("a", {"left": {"n": 1}, "right": None}, T), ("b", {"left": None, "right": {"n": 2}}, T + 1)]),
    ],
)
def test_records_that_met_none_are_sent_alone_when_moving_stream_time_closes_their_windows(
    app_driver: MakeDriver, join: str, alone: list[tuple[str, dict[str, Any], int]]
) -> None:
    driver = app_driver(join_app(join))
    driver.pipe("left", {"n": 1}, key="a", timestamp=T)
    driver.pipe("right", {"n": 2}, key="b", timestamp=T + 1)
    driver.pipe("left", {"n": 3}, key="c", timestamp=T + 1)
    driver.pipe("right", {"n": 4}, key="c", timestamp=T + 2)
    joined = ("c", {"left": {"n": 3}, "right": {"n": 4}}, T + 2)
    assert [(r.key, r.value, r.timestamp) for r in driver.read("out")] == [joined]
    driver.advance_stream_time(T + 2000)  # a record at T may still meet one until T + before + after
    assert driver.read("out") == []
    driver.advance_stream_time(T + 2002)
    assert [(r.key, r.value, r.timestamp) for r in driver.read("out")] == alone
    driver.advance_stream_time(T + 3000)  # past the retention: nothing waits any more, nothing is sent again
    assert driver.read("out") == []
    for side in ("left", "right"):
        assert list(driver.window_store(f"join-{side}").fetch_all(0, T + 3000)) == []


def test_ids_leave_the_de_duplication_store_once_moving_stream_time_passes_their_time_plus_two_windows(
    app_driver: MakeDriver,
) -> None:
    app = {
        "app_id": "closing",
        "topics": {"events": TOPIC, "unique": TOPIC},
        "processors": [{"name": "dedup", "class": "processors.dedup:Deduplicate", "inputs": ["events"],
                        "outputs": ["unique"], "params": {"window_ms": MINUTE, "output": "unique"}}],
    }  # fmt: skip
    driver = app_driver(app)
    driver.pipe("events", {"n": 1}, key="a", timestamp=T + 1000)
    seen = driver.store("dedup-seen")
    driver.advance_stream_time(T + 1000 + 2 * MINUTE)
    assert [key for key, _ in seen.range()] == ["a"]
    driver.advance_stream_time(T + 1000 + 2 * MINUTE + 1)
    assert list(seen.range()) == []
    assert [r.key for r in driver.read("unique")] == ["a"]
