"""docs/windows.md, "Where a window ends", on the test kit's driver: for each window type, whether a record at
a window's `end` is in it, the `end` and timestamp of its result, and the stream time that closes it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runtime.testkit import AppDriver

MakeDriver = Callable[..., AppDriver]
TOPIC = {"partitions": 1, "key_serde": "str", "value_serde": "json"}
HALF_OPEN = {"start": 0, "end": 100, "value": 1, "timestamp": 99}


def count_app(window: dict[str, Any]) -> dict[str, Any]:
    params = {"window": window, "aggregation": {"type": "count"}, "output": "out"}
    return {"app_id": "ends", "topics": {"in": TOPIC, "out": TOPIC},
            "processors": [{"name": "count", "class": "processors.windows:Aggregate", "inputs": ["in"],
                            "outputs": ["out"], "params": params}]}  # fmt: skip


@pytest.mark.parametrize(
    ("window", "first", "closes_at"),
    [
        # [0, 100): a record at 100 is in the next window; the first closes at end + grace = 150.
        ({"type": "tumbling", "size_ms": 100, "grace_ms": 50}, HALF_OPEN, 150),
        ({"type": "hopping", "size_ms": 100, "advance_ms": 50, "grace_ms": 50}, HALF_OPEN, 150),
        # [0, 100], the left window of the record at 100, holds both; it closes at end + 1 + grace = 101.
        ({"type": "sliding", "time_difference_ms": 100}, {"start": 0, "end": 100, "value": 2, "timestamp": 100}, 101),
        # [0, 100], both within the gap; it closes at end + gap + 1 + grace = 201.
        ({"type": "session", "gap_ms": 100}, {"start": 0, "end": 100, "value": 2, "timestamp": 100}, 201),
    ],
)  # fmt: skip
def test_a_windows_end_is_where_the_table_says(
    app_driver: MakeDriver, window: dict[str, Any], first: dict[str, int], closes_at: int
) -> None:
    driver = app_driver(count_app(window))
    driver.pipe_all("in", [("k", {}, 0), ("k", {}, 100)])
    driver.pipe("in", {}, key="other", timestamp=closes_at - 1)
    assert [r for r in driver.read("out") if r.key == "k" and r.value["start"] == 0] == []
    driver.pipe("in", {}, key="other", timestamp=closes_at)
    results = [r for r in driver.read("out") if r.key == "k" and r.value["start"] == 0]
    assert [{**r.value, "timestamp": r.timestamp} for r in results] == [first]
