"""The built-in de-duplication on the test kit's driver: ids by key, field or value hash; the window; expiry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runtime.testkit import AppDriver

MakeDriver = Callable[..., AppDriver]
T = 1_790_000_000_000
MINUTE = 60_000


def dedup_app(id_spec: str) -> dict[str, Any]:
    topic = {"partitions": 1, "key_serde": "str", "value_serde": "json"}
    return {
        "app_id": "dedup",
        "topics": {"events": topic, "unique": topic},
        "processors": [{"name": "dedup", "class": "processors.dedup:Deduplicate", "inputs": ["events"],
                        "outputs": ["unique"], "params": {"id": id_spec, "window_ms": MINUTE, "output": "unique"}}],
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
    seen = driver.window_store("dedup-seen")
    for n in range(100):
        driver.pipe("events", {"n": n}, key=f"k{n}", timestamp=T + 2 * MINUTE + n * 1000)
    assert len(list(seen.fetch_all(0, T + 10 * MINUTE))) > 50
    driver.pipe("events", {"n": 0}, key="late", timestamp=T + 10 * MINUTE)  # stream time moves on
    assert [key for key, _, _ in seen.fetch_all(0, T + 10 * MINUTE)] == ["late"]  # the rest expired
