"""The built-in de-duplication on the test kit's driver: ids by key, field or value hash; the window; how long
an id is remembered; late records; expiry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runtime.testkit import AppDriver

MakeDriver = Callable[..., AppDriver]
T = 1_790_000_000_000
MINUTE = 60_000


def dedup_app(id_spec: str, window_ms: int = MINUTE, **more: str) -> dict[str, Any]:
    topic = {"partitions": 1, "key_serde": "str", "value_serde": "json"}
    params = {"id": id_spec, "window_ms": window_ms, "output": "unique", **more}
    return {
        "app_id": "dedup",
        "topics": {"events": topic, "unique": topic, "late": topic},
        "processors": [{"name": "dedup", "class": "processors.dedup:Deduplicate", "inputs": ["events"],
                        "outputs": ["unique", "late"], "params": params}],
    }  # fmt: skip


@pytest.mark.parametrize(
    ("id_spec", "records"),
    [
        ("key", [("a", {"n": 1}), ("a", {"n": 2}), ("b", {"n": 3})]),
        ("value.order", [("x", {"order": 7}), ("y", {"order": 7}), ("x", {"order": 8})]),
        ("value_hash", [("x", {"n": 1}), ("y", {"n": 1}), ("x", {"n": 2})]),
    ],
)
def test_a_record_whose_id_was_seen_within_the_window_is_dropped(
    app_driver: MakeDriver, id_spec: str, records: list[tuple[str, dict[str, Any]]]
) -> None:
    driver = app_driver(dedup_app(id_spec))
    driver.pipe_all("events", [(key, value, T + n) for n, (key, value) in enumerate(records)])
    assert [(r.key, r.value) for r in driver.read("unique")] == [records[0], records[2]]
    assert driver.count("dedup", "duplicates") == 1


def test_an_id_seen_longer_ago_than_the_window_goes_through_again_and_old_ids_leave_the_store(
    app_driver: MakeDriver,
) -> None:
    driver = app_driver(dedup_app("key"))
    driver.pipe("events", {"n": 1}, key="a", timestamp=T)
    driver.pipe("events", {"n": 2}, key="a", timestamp=T + MINUTE)  # exactly a window later: a duplicate
    driver.pipe("events", {"n": 3}, key="a", timestamp=T + MINUTE + 1)  # past it
    driver.pipe("events", {"n": 4}, key="a", timestamp=T - 30_000)  # out of order, within a window of one seen
    assert [r.value["n"] for r in driver.read("unique")] == [1, 3]
    seen = driver.store("dedup-seen")
    for n in range(100):
        driver.pipe("events", {"n": n}, key=f"k{n}", timestamp=T + 2 * MINUTE + n * 1000)
    assert len(list(seen.range())) > 50
    driver.pipe("events", {"n": 0}, key="late", timestamp=T + 10 * MINUTE)  # stream time moves on
    assert [key for key, _ in seen.range()] == ["late"]  # the rest expired


def test_an_id_is_remembered_until_stream_time_passes_its_time_plus_two_windows(app_driver: MakeDriver) -> None:
    """Whatever the other ids do: a record up to a window behind stream time is checked against every id
    within a window of it."""
    driver = app_driver(dedup_app("key", window_ms=100))
    seen = driver.store("dedup-seen")
    driver.pipe_all("events", [("k1", {"n": 1}, 99), ("other", {"n": 2}, 299)])
    assert seen.get("k1") == [99]  # stream time 299 = 99 + 2 x 100
    driver.pipe("events", {"n": 3}, key="k1", timestamp=199)  # a window after k1@99, a window behind stream time
    assert [r.value["n"] for r in driver.read("unique")] == [1, 2]
    assert driver.count("dedup", "duplicates") == 1
    driver.pipe("events", {"n": 4}, key="other", timestamp=300)
    assert seen.get("k1") is None


def test_a_record_more_than_a_window_behind_stream_time_is_late_counted_and_dropped(app_driver: MakeDriver) -> None:
    """The ids it could duplicate may be forgotten already: it is dropped rather than let through."""
    driver = app_driver(dedup_app("key", window_ms=100))
    driver.pipe_all("events", [("k1", {"n": 1}, 50), ("other", {"n": 2}, 260), ("k1", {"n": 3}, 60)])
    driver.pipe_all("events", [("k2", {"n": 4}, 159), ("k3", {"n": 5}, 160)])
    assert [r.value["n"] for r in driver.read("unique")] == [1, 2, 5]
    assert driver.count("dedup", "late_records") == 2
    assert driver.count("dedup", "duplicates") == 0


def test_a_late_record_goes_to_the_late_topic_as_it_came_with_where_from_and_why(app_driver: MakeDriver) -> None:
    driver = app_driver(dedup_app("key", window_ms=100, late_topic="late"))
    driver.pipe_all("events", [("k1", {"n": 1}, 50), ("other", {"n": 2}, 260)])
    driver.pipe("events", {"n": 3}, key="k1", timestamp=60, headers=[("trace", b"t1")])
    (late,) = driver.read("late")
    assert (late.key, late.value, late.timestamp, late.header("trace")) == ("k1", {"n": 3}, 60, b"t1")
    assert late.header("late.stream_time") == b"260"
    reason = b"more than window_ms (100) behind stream time: ids it may repeat are forgotten"
    assert late.header("late.reason") == reason
    assert [r.value["n"] for r in driver.read("unique")] == [1, 2]
