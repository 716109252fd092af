"""Left and outer stream-stream joins on the test kit's driver, with records out of order: a record that
met one of the other side stays joinable as long as the inner join keeps it, and a record is sent alone
only once no on-time record can meet it, never after it was joined."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime.testkit import AppDriver

MakeDriver = Callable[..., AppDriver]
T = 1_790_000_000_000
DIFFERENCE = 10
Pair = tuple[str, str | None, str | None]  # (key, left value, right value)


def join_app(join: str, grace: int = 0) -> dict[str, Any]:
    topic = {"partitions": 1, "key_serde": "str", "value_serde": "json"}
    return {
        "app_id": "join",
        "topics": {"L": topic, "R": topic, "out": topic},
        "processors": [{"name": "join", "class": "processors.joins:WindowJoin", "inputs": ["L", "R"],
                        "outputs": ["out"], "params": {"left": "L", "right": "R", "time_difference_ms": DIFFERENCE,
                                                       "grace_ms": grace, "join": join, "output": "out"}}],
    }  # fmt: skip


def pipe(driver: AppDriver, records: str) -> None:
    """`records`: `side key value@ms, ...`, piped one at a time, so taken in this order."""
    for record in records.split(", "):
        side, key, value_at = record.split()
        value, at = value_at.split("@")
        driver.pipe(side, value, key=key, timestamp=T + int(at))


def pairs(driver: AppDriver) -> list[Pair]:
    return [(record.key, record.value["left"], record.value["right"]) for record in driver.read("out")]


@pytest.mark.parametrize("join", ["inner", "left", "outer"])
def test_a_left_record_that_met_a_right_one_is_still_joined_by_an_on_time_right_record(
    app_driver: MakeDriver, join: str
) -> None:
    driver = app_driver(join_app(join))
    pipe(driver, "L k A@0, R k a@5, L z Z@16, R k b@6")  # b: 6 + 10 is not before stream time 16
    assert pairs(driver) == [("k", "A", "a"), ("k", "A", "b")]
    assert driver.count("join", "late_records") == 0


@pytest.mark.parametrize("join", ["inner", "left", "outer"])
def test_a_right_record_that_met_a_left_one_is_still_joined_by_an_on_time_left_record(
    app_driver: MakeDriver, join: str
) -> None:
    driver = app_driver(join_app(join))
    pipe(driver, "L k A@0, R k a@5, L z Z@16, L k B@6")
    assert pairs(driver) == [("k", "A", "a"), ("k", "B", "a")]
    pipe(driver, "L z Y@100")  # every window closed: what met none is sent alone, and only that
    alone = {"inner": [], "left": [("z", "Z", None)], "outer": [("z", "Z", None)]}[join]
    assert pairs(driver) == alone


def test_an_unmatched_record_is_sent_alone_once_no_on_time_record_can_meet_it(app_driver: MakeDriver) -> None:
    driver = app_driver(join_app("outer", grace=3))
    pipe(driver, "L k A@0, L z Z@23")  # a right record at 10 still comes on time: 10 + 10 + 3 = 23
    assert pairs(driver) == []
    pipe(driver, "R k a@10")
    assert pairs(driver) == [("k", "A", "a")]
    pipe(driver, "L m B@20, L z Y@43")  # a right record at 30 still comes on time: 30 + 13 = 43
    assert pairs(driver) == []
    pipe(driver, "L z X@44")  # and now it would be late: B met none, and none can meet it any more
    assert pairs(driver) == [("m", "B", None)]
    pipe(driver, "R m b@30")
    assert pairs(driver) == []
    assert driver.count("join", "late_records") == 1


def test_a_restarted_app_sends_alone_what_met_none_before_the_restart_and_nothing_else(tmp_path: Path) -> None:
    with AppDriver(join_app("outer"), state_dir=tmp_path) as driver:
        pipe(driver, "L k A@0, R k a@5, L z Z@16")
        assert pairs(driver) == [("k", "A", "a")]
    with AppDriver(join_app("outer"), state_dir=tmp_path) as driver:
        pipe(driver, "L k B@6, R z Y@100")
        assert pairs(driver) == [("k", "B", "a"), ("z", "Z", None)]
