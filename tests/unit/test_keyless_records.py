"""Records without a key in the built-in operators, on the test kit's driver. By default as in Kafka Streams:
aggregations and inner joins drop them and count them (`keyless_records`), left and outer joins send them
alone at once, de-duplication forwards them; `keyless: one_key` (`null_id: one_id`) makes them one key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runtime.testkit import AppDriver

MakeDriver = Callable[..., AppDriver]
TOPIC = {"partitions": 1, "key_serde": "str", "value_serde": "json"}
WINDOWS = {
    "tumbling": {"type": "tumbling", "size_ms": 100},
    "hopping": {"type": "hopping", "size_ms": 100, "advance_ms": 50},
    "sliding": {"type": "sliding", "time_difference_ms": 100},
    "session": {"type": "session", "gap_ms": 100},
}


def processor_app(cls: str, params: dict[str, Any], inputs: list[str], **more: Any) -> dict[str, Any]:
    topics = {name: TOPIC for name in [*inputs, "out"]}
    topics.update({table["topic"]: {**TOPIC, "cleanup_policy": "compact"} for table in more.get("tables", {}).values()})
    return {
        "app_id": "keyless",
        "topics": topics,
        "processors": [{"name": "op", "class": cls, "inputs": inputs, "outputs": ["out"], "params": params, **more}],
    }


def aggregate_app(window: str, **policy: str) -> dict[str, Any]:
    params = {"window": WINDOWS[window], "aggregation": {"type": "count"}, "output": "out", **policy}
    return processor_app("processors.windows:Aggregate", params, ["in"])


def counts_by_key(driver: AppDriver) -> dict[Any, int]:
    counts: dict[Any, int] = {}
    for record in driver.read("out"):
        counts[record.key] = counts.get(record.key, 0) + record.value["value"]
    return counts


Records = list[tuple[Any, Any, int]]
KEYED_AND_KEYLESS: Records = [("a", {}, 10), (None, {}, 20), ("a", {}, 30), (None, {}, 40)]
CLOSE_ALL: tuple[Any, Any, int] = ("b", {}, 10_000)


@pytest.mark.parametrize("window", WINDOWS)
def test_an_aggregation_drops_and_counts_a_record_without_a_key(app_driver: MakeDriver, window: str) -> None:
    driver = app_driver(aggregate_app(window))
    driver.pipe_all("in", [*KEYED_AND_KEYLESS, CLOSE_ALL])
    counts = counts_by_key(driver)
    assert None not in counts and counts["a"] > 0
    assert driver.count("op", "keyless_records") == 2


@pytest.mark.parametrize("window", WINDOWS)
def test_an_aggregation_with_keyless_one_key_aggregates_them_under_a_null_key(
    app_driver: MakeDriver, window: str
) -> None:
    keyed = app_driver(aggregate_app(window))
    keyed.pipe_all("in", [(key or "nil", value, time) for key, value, time in KEYED_AND_KEYLESS] + [CLOSE_ALL])
    driver = app_driver(aggregate_app(window, keyless="one_key"))
    driver.pipe_all("in", [*KEYED_AND_KEYLESS, CLOSE_ALL])
    assert counts_by_key(driver)[None] == counts_by_key(keyed)["nil"]
    assert driver.count("op", "keyless_records") == 0


def test_an_aggregation_grouped_by_a_field_that_is_null_drops_and_counts_the_record(app_driver: MakeDriver) -> None:
    params = {"window": WINDOWS["tumbling"], "aggregation": {"type": "count"}, "group_by": "account", "output": "out"}
    driver = app_driver(processor_app("processors.windows:Aggregate", params, ["in"]))
    driver.pipe_all("in", [("k", {"account": None}, 10), ("k", {"account": "x"}, 20), ("k", {"account": "y"}, 500)])
    assert [(r.key, r.value["value"]) for r in driver.read("out")] == [("x", 1)]
    assert driver.count("op", "keyless_records") == 1


def window_join_app(join: str, **policy: str) -> dict[str, Any]:
    params = {"left": "L", "right": "R", "time_difference_ms": 10, "join": join, "output": "out", **policy}
    return processor_app("processors.joins:WindowJoin", params, ["L", "R"])


def joined(driver: AppDriver) -> list[tuple[Any, Any, Any, int]]:
    def number(side: Any) -> Any:
        return None if side is None else side["n"]

    return [(r.key, number(r.value["left"]), number(r.value["right"]), r.timestamp) for r in driver.read("out")]


def pipe_both_sides(driver: AppDriver) -> None:
    driver.pipe("L", {"n": 1}, key=None, timestamp=100)
    driver.pipe("R", {"n": 2}, key=None, timestamp=101)
    driver.pipe("L", {"n": 3}, key="a", timestamp=102)
    driver.pipe("R", {"n": 4}, key="a", timestamp=103)


@pytest.mark.parametrize(
    ("join", "sent_alone", "dropped"),
    [
        ("inner", [], 2),
        ("left", [(None, 1, None, 100)], 1),
        ("outer", [(None, 1, None, 100), (None, None, 2, 101)], 0),
    ],
)
def test_a_window_join_never_joins_a_record_without_a_key(
    app_driver: MakeDriver, join: str, sent_alone: list[Any], dropped: int
) -> None:
    """A left (outer) join sends a keyless left (either) record alone at once, as nothing can meet it; the
    others are dropped and counted."""
    driver = app_driver(window_join_app(join))
    pipe_both_sides(driver)
    assert joined(driver) == [*sent_alone, ("a", 3, 4, 103)]
    assert driver.count("op", "keyless_records") == dropped


def test_a_window_join_with_keyless_one_key_joins_keyless_records_with_each_other(app_driver: MakeDriver) -> None:
    driver = app_driver(window_join_app("inner", keyless="one_key"))
    pipe_both_sides(driver)
    assert joined(driver) == [(None, 1, 2, 101), ("a", 3, 4, 103)]
    assert driver.count("op", "keyless_records") == 0


@pytest.mark.parametrize(("join", "sent"), [("inner", []), ("left", [(None, {"stream": {"n": 1}, "table": None})])])
def test_a_table_join_finds_no_row_for_a_record_without_a_key(
    app_driver: MakeDriver, join: str, sent: list[Any]
) -> None:
    """As Kafka Streams' KStream-KTable join: an inner join drops (and counts) it, a left join sends it with
    a null table value."""
    params = {"table": "customers", "output": "out", "join": join}
    tables = {"customers": {"topic": "c"}}
    driver = app_driver(processor_app("processors.joins:TableJoin", params, ["in"], tables=tables))
    driver.pipe("c", {"name": "A"}, key="a", timestamp=1)
    driver.pipe("in", {"n": 1}, key=None, timestamp=2)
    driver.pipe("in", {"n": 2}, key="a", timestamp=3)
    joined = ("a", {"stream": {"n": 2}, "table": {"name": "A"}})
    assert [(r.key, r.value) for r in driver.read("out")] == [*sent, joined]
    assert driver.count("op", "keyless_records") == (join == "inner")
    assert driver.count("op", "unjoined_records") == 0


def dedup_app(id_spec: str, **policy: str) -> dict[str, Any]:
    params = {"id": id_spec, "window_ms": 1000, "output": "out", **policy}
    return processor_app("processors.dedup:Deduplicate", params, ["in"])


@pytest.mark.parametrize(
    ("id_spec", "records"),
    [
        ("key", [(None, {"n": 1}, 10), (None, {"n": 2}, 20), ("a", {"n": 3}, 30), ("a", {"n": 4}, 40)]),
        ("value.order", [("k", {"order": None, "n": 1}, 10), ("k", {"order": None, "n": 2}, 20),
                         ("k", {"order": 7, "n": 3}, 30), ("k", {"order": 7, "n": 4}, 40)]),
    ],
)  # fmt: skip
def test_deduplication_forwards_every_record_without_an_id_and_one_id_makes_them_duplicates(
    app_driver: MakeDriver, id_spec: str, records: Records
) -> None:
    """As Kafka Streams' de-duplication (KIP-655): a record whose id is null is never a duplicate."""
    driver = app_driver(dedup_app(id_spec))
    driver.pipe_all("in", records)
    assert [r.value["n"] for r in driver.read("out")] == [1, 2, 3]
    assert driver.count("op", "duplicates") == 1
    driver = app_driver(dedup_app(id_spec, null_id="one_id"))
    driver.pipe_all("in", records)
    assert [r.value["n"] for r in driver.read("out")] == [1, 3]
    assert driver.count("op", "duplicates") == 2
