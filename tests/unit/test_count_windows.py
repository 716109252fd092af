"""Count windows of the `Aggregate` processor on the test kit: Quix Streams' documented examples of
`tumbling_count_window` and `hopping_count_window` (docs/windowing.md there: "Count-based Tumbling
Windows", "Count-based Hopping Windows", and "Count-based Sliding Windows", a hopping window of step 1),
each key on its own, emitting updates, and every aggregation against a plain-Python reference."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.testkit import AppDriver
from tests.support.window_reference import frozen

MakeDriver = Callable[..., AppDriver]
TOPIC = {"partitions": 1, "key_serde": "str", "value_serde": "json"}


def count_app(window: dict[str, Any], aggregation: dict[str, Any], emit: str = "final") -> dict[str, Any]:
    return {
        "app_id": "counted",
        "topics": {"in": TOPIC, "out": TOPIC},
        "processors": [{"name": "agg", "class": "processors.windows:Aggregate", "inputs": ["in"], "outputs": ["out"],
                        "params": {"window": window, "aggregation": aggregation, "output": "out", "emit": emit}}],
    }  # fmt: skip


def results(driver: AppDriver) -> list[tuple[Any, int, int, Any, int | None]]:
    """(key, start, end, value, timestamp) of each result sent since the last call."""
    return [(r.key, r.value["start"], r.value["end"], r.value["value"], r.timestamp) for r in driver.read("out")]


def test_a_tumbling_count_window_batches_three_messages_as_quix_documents(app_driver: MakeDriver) -> None:
    """Quix: `tumbling_count_window(count=3).agg(data=Collect()).final()` over three messages gives
    `{"data": [100, 50, 200], "start": 121, "end": 583}`."""
    driver = app_driver(count_app({"type": "count", "size": 3}, {"type": "list", "field": "data", "max_items": 3}))
    driver.pipe("in", {"data": 100}, "sensor", timestamp=121)
    driver.pipe("in", {"data": 50}, "sensor", timestamp=165)
    assert results(driver) == [], "a window is sent when it holds its 3 records, not before"
    driver.pipe("in", {"data": 200}, "sensor", timestamp=583)
    assert results(driver) == [("sensor", 121, 583, [100, 50, 200], 583)]


def test_a_count_window_of_step_one_averages_the_last_three_purchases_as_quix_documents(app_driver: MakeDriver) -> None:
    """Quix: `sliding_count_window(count=3).agg(average=Mean("amount")).final()`, which it documents as
    a count-based hopping window of step 1, gives averages 120, 100, 120, 80."""
    driver = app_driver(count_app({"type": "count", "size": 3, "step": 1}, {"type": "mean", "field": "amount"}))
    purchases = [(100, 121), (60, 165), (200, 583), (40, 723), (120, 1009), (80, 1242)]
    driver.pipe_all("in", [("customer", {"amount": amount}, timestamp) for amount, timestamp in purchases])
    assert results(driver) == [
        ("customer", 121, 583, 120, 583),
        ("customer", 165, 723, 100, 723),
        ("customer", 583, 1009, 120, 1009),
        ("customer", 723, 1242, 80, 1242),
    ]


def numbered(count: int, key: str = "k") -> list[tuple[str, dict[str, int], int]]:
    """Records `n` = 0, 1, ... stamped n: a window's start and end are then its first and last record."""
    return [(key, {"n": n}, n) for n in range(count)]


def test_tumbling_count_windows_of_four_take_records_0_to_3_then_4_to_7_as_quix_draws_them(
    app_driver: MakeDriver,
) -> None:
    driver = app_driver(count_app({"type": "count", "size": 4}, {"type": "list", "field": "n", "max_items": 10}))
    driver.pipe_all("in", numbered(18))
    assert [(start, end, value) for _, start, end, value, _ in results(driver)] == [
        (0, 3, [0, 1, 2, 3]), (4, 7, [4, 5, 6, 7]), (8, 11, [8, 9, 10, 11]), (12, 15, [12, 13, 14, 15]),
    ]  # fmt: skip


def test_hopping_count_windows_of_six_every_two_take_0_to_5_then_2_to_7_as_quix_draws_them(
    app_driver: MakeDriver,
) -> None:
    driver = app_driver(count_app({"type": "count", "size": 6, "step": 2}, {"type": "count"}))
    driver.pipe_all("in", numbered(12))
    assert [(start, end, value) for _, start, end, value, _ in results(driver)] == [
        (0, 5, 6), (2, 7, 6), (4, 9, 6), (6, 11, 6),
    ]  # fmt: skip


def test_a_window_spans_its_smallest_and_largest_timestamp_whatever_order_its_records_come_in(
    app_driver: MakeDriver,
) -> None:
    driver = app_driver(count_app({"type": "count", "size": 3}, {"type": "first"}))
    driver.pipe_all("in", [("k", "late", 500), ("k", "earliest", 100), ("k", "middle", 300)])
    assert results(driver) == [("k", 100, 500, "earliest", 500)], "the output is stamped with the window's end"


def test_each_key_counts_its_own_records(app_driver: MakeDriver) -> None:
    driver = app_driver(count_app({"type": "count", "size": 2}, {"type": "sum", "field": "n"}))
    driver.pipe_all("in", [("a", {"n": 1}, 1), ("b", {"n": 10}, 2), ("b", {"n": 20}, 3), ("a", {"n": 2}, 4)])
    assert results(driver) == [("b", 2, 3, 30, 3), ("a", 1, 4, 3, 4)]


def test_emitting_updates_sends_each_window_changed_since_the_last_commit_once_and_a_full_one_last_as_final(
    app_driver: MakeDriver,
) -> None:
    driver = app_driver(
        count_app({"type": "count", "size": 3, "step": 2}, {"type": "sum", "field": "n"}, emit="updates"),
        auto_commit=False,
    )
    driver.pipe_all("in", numbered(4))  # windows from record 0 (0, 1, 2: full) and from 2 (2, 3)
    assert results(driver) == [], "updates wait for the commit"
    driver.commit()
    assert results(driver) == [("k", 0, 2, 3, 2), ("k", 2, 3, 5, 3)]
    driver.commit()
    assert results(driver) == [], "nothing changed since the last commit"
    driver.pipe_all("in", [("k", {"n": 4}, 4), ("k", {"n": 5}, 5)])  # fills the window from 2, opens one from 4
    driver.commit()
    assert results(driver) == [("k", 2, 4, 9, 4), ("k", 4, 5, 9, 5)]


def test_a_user_defined_aggregator_aggregates_count_windows(app_driver: MakeDriver) -> None:
    driver = app_driver(count_app({"type": "count", "size": 3}, {"type": "tests.support.aggregators:Distinct"}))
    driver.pipe_all("in", [("k", "b", 1), ("k", "a", 2), ("k", "b", 3), ("k", "c", 4)])
    assert results(driver) == [("k", 1, 3, ["a", "b"], 3)]


AGGREGATIONS = ["count", "sum", "min", "max", "mean", "first", "last", "list", "tests.support.aggregators:Distinct"]
REFERENCE: dict[str, Callable[[list[tuple[int, int]]], Any]] = {
    "count": len,
    "sum": lambda records: sum(n for _, n in records),
    "min": lambda records: min(n for _, n in records),
    "max": lambda records: max(n for _, n in records),
    "mean": lambda records: sum(n for _, n in records) / len(records),
    "first": lambda records: min(records, key=lambda record: record[0])[1],  # min keeps the first of equals
    "last": lambda records: max(reversed(records), key=lambda record: record[0])[1],  # and so of the reversed
    "list": lambda records: [n for _, n in sorted(records, key=lambda record: record[0])][-2:],
    "tests.support.aggregators:Distinct": lambda records: sorted({n for _, n in records}),
}


def expected(records: Sequence[tuple[str, int, int]], size: int, step: int, kind: str) -> list[Any]:
    """Each key's records in arrival order, windows from its record 0, step, 2 x step, ... sent at their last."""
    by_key: dict[str, list[tuple[int, int]]] = {}
    sent = []
    for key, timestamp, n in records:
        seen = by_key.setdefault(key, [])
        seen.append((timestamp, n))
        first = len(seen) - size
        if first >= 0 and first % step == 0:
            window = seen[first:]
            value = REFERENCE[kind](window)
            sent.append((key, min(t for t, _ in window), max(t for t, _ in window), frozen(value)))
    return sent


@settings(max_examples=40, deadline=None)
@given(
    records=st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 50), st.integers(-5, 5)), max_size=30),
    size=st.integers(1, 5),
    data=st.data(),
    kind=st.sampled_from(AGGREGATIONS),
)
def test_every_aggregation_gives_what_a_plain_reference_gives(
    records: list[tuple[str, int, int]], size: int, data: st.DataObject, kind: str
) -> None:
    step = data.draw(st.integers(1, size))
    aggregation: dict[str, Any] = {"type": kind}
    if kind != "count":
        aggregation["field"] = "n"
    if kind == "list":
        aggregation["max_items"] = 2
    with AppDriver(count_app({"type": "count", "size": size, "step": step}, aggregation)) as driver:
        driver.pipe_all("in", [(key, {"n": n}, timestamp) for key, timestamp, n in records])
        sent = [(key, start, end, frozen(value)) for key, start, end, value, _ in results(driver)]
    assert sent == expected(records, size, step, kind)
