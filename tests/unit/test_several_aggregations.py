"""Several named aggregations of one window (`aggregations:`), on the test kit's driver: each window's result
holds every aggregation's result by name, equal to what an app with that one aggregation gives, for every
window type (sessions merging, sliding windows out of order, count windows) and both emit modes; the window keeps one
aggregate holding them all. The first test is Quix Streams' documented example of several aggregations
(docs/aggregations.md, "Multiple aggregations": min, max, mean and count of a sensor's temperature over
10-minute tumbling windows, `.agg(min_temp=Min("temperature"), ..., total_events=Count()).final()`)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from runtime.config import ConfigError, parse_app
from runtime.testkit import AppDriver

MakeDriver = Callable[..., AppDriver]
T = 1_740_000_000_000  # a multiple of every window size below
MINUTE = 60_000
TOPIC = {"partitions": 1, "key_serde": "str", "value_serde": "json"}


def app(params: dict[str, Any]) -> dict[str, Any]:
    return {
        "app_id": "several",
        "topics": {"in": TOPIC, "out": TOPIC},
        "processors": [{"name": "agg", "class": "processors.windows:Aggregate", "inputs": ["in"], "outputs": ["out"],
                        "params": {"output": "out", **params}}],
    }  # fmt: skip


def test_quix_streams_documented_example_min_max_mean_and_count_of_temperatures(app_driver: MakeDriver) -> None:
    aggregations = {
        "min_temp": {"type": "min", "field": "temperature"},
        "max_temp": {"type": "max", "field": "temperature"},
        "avg_temp": {"type": "mean", "field": "temperature"},
        "total_events": {"type": "count"},
    }
    driver = app_driver(app({"window": {"type": "tumbling", "size_ms": 10 * MINUTE}, "aggregations": aggregations}))
    readings = [20, 26, 17, 21, 30]  # the first four in the first 10 minutes, the last in the next
    driver.pipe_all("in", [("sensor-1", {"temperature": t}, T + i * 3 * MINUTE) for i, t in enumerate(readings)])
    driver.advance_stream_time(T + 20 * MINUTE)
    assert [(r.key, r.value) for r in driver.read("out")] == [
        ("sensor-1", {"start": T, "end": T + 10 * MINUTE,
                      "value": {"min_temp": 17, "max_temp": 26, "avg_temp": 21.0, "total_events": 4}}),
        ("sensor-1", {"start": T + 10 * MINUTE, "end": T + 20 * MINUTE,
                      "value": {"min_temp": 30, "max_temp": 30, "avg_temp": 30.0, "total_events": 1}}),
    ]  # fmt: skip


AGGREGATIONS: dict[str, dict[str, Any]] = {
    "total": {"type": "sum", "field": "amount"},
    "n": {"type": "count"},
    "first": {"type": "first"},
    "latest": {"type": "list", "max_items": 2},
    "tags": {"type": "tests.support.aggregators:Distinct", "field": "tag"},
}
WINDOWS: dict[str, dict[str, Any]] = {
    "tumbling": {"type": "tumbling", "size_ms": MINUTE, "grace_ms": 10_000},
    "hopping": {"type": "hopping", "size_ms": MINUTE, "advance_ms": 20_000, "grace_ms": 10_000},
    "sliding": {"type": "sliding", "time_difference_ms": 20_000, "grace_ms": 10_000},
    "session": {"type": "session", "gap_ms": 20_000, "grace_ms": 20_000},
    "count": {"type": "count", "size": 2},
}
# Out of order, two keys; with a 20 s gap, the record at T + 20 s merges the sessions of T and T + 35 s.
RECORDS = [
    ("a", {"amount": 5, "tag": "x"}, T),
    ("b", {"amount": 1, "tag": "y"}, T + 2_000),
    ("a", {"amount": 7, "tag": "y"}, T + 35_000),
    ("a", {"amount": 2, "tag": "x"}, T + 20_000),
    ("a", {"amount": 4, "tag": "z"}, T + 36_000),
    ("b", {"amount": 3, "tag": "x"}, T + 70_000),
    ("a", {"amount": 6, "tag": "y"}, T + 90_000),
]


def run(driver: AppDriver, updates: bool) -> list[tuple[str, int, int, Any]]:
    """The results in the order sent (a commit after each record, emitting updates), then closing the rest."""
    results = []
    for key, value, timestamp in RECORDS:
        driver.pipe("in", value, key=key, timestamp=timestamp)
        if updates:
            driver.commit()
        results += [(r.key, r.value["start"], r.value["end"], r.value["value"]) for r in driver.read("out")]
    driver.advance_stream_time(T + 10 * MINUTE)
    driver.commit()
    results += [(r.key, r.value["start"], r.value["end"], r.value["value"]) for r in driver.read("out")]
    return results


@pytest.mark.parametrize("emit", ["final", "updates"])
@pytest.mark.parametrize("kind", WINDOWS)
def test_each_named_result_is_what_that_aggregation_alone_gives(app_driver: MakeDriver, kind: str, emit: str) -> None:
    window = WINDOWS[kind]
    several = run(app_driver(app({"window": window, "aggregations": AGGREGATIONS, "emit": emit})), emit == "updates")
    alone = {
        name: run(app_driver(app({"window": window, "aggregation": spec, "emit": emit})), emit == "updates")
        for name, spec in AGGREGATIONS.items()
    }
    assert len(several) >= 3
    for name, results in alone.items():
        assert [(key, start, end, None if value is None else value[name]) for key, start, end, value in several] == (
            results
        ), name
    if kind == "session":  # the record at T + 20 s merged the sessions of T and T + 35 s
        latest = [{"amount": 7, "tag": "y"}, {"amount": 4, "tag": "z"}]
        merged = {"total": 18, "n": 4, "first": {"amount": 5, "tag": "x"}, "latest": latest, "tags": ["x", "y", "z"]}
        assert ("a", T, T + 36_000, merged) in several


def test_a_window_keeps_one_aggregate_holding_each_aggregations(app_driver: MakeDriver) -> None:
    window = {"type": "session", "gap_ms": 15_000}
    aggregations = {"total": {"type": "sum", "field": "amount"}, "n": {"type": "count"}}
    driver = app_driver(app({"window": window, "aggregations": aggregations}))
    driver.pipe_all("in", [("a", {"amount": 5}, T), ("a", {"amount": 7}, T + 10_000)])
    assert list(driver.session_store("agg").fetch_all(0, T + MINUTE)) == [("a", T, T + 10_000, [12, 2])]


def test_a_record_without_a_field_an_aggregation_reads_fails_naming_it(app_driver: MakeDriver) -> None:
    aggregations = {"total": {"type": "sum", "field": "amount"}, "n": {"type": "count"}}
    driver = app_driver(app({"window": {"type": "tumbling", "size_ms": MINUTE}, "aggregations": aggregations}))
    with pytest.raises(Exception, match="has no field 'amount'"):
        driver.pipe("in", {"amout": 5}, key="a", timestamp=T)


def config_error(params: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as raised:
        parse_app({**app(params), "kafka": {"bootstrap_servers": "localhost:1"}})
    return str(raised.value)


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        (
            {"aggregation": {"type": "count"}, "aggregations": {"n": {"type": "count"}}},
            "processors[0].params: give aggregation (one) or aggregations (several, by name), not both",
        ),
        ({}, "processors[0].params: aggregation (one) or aggregations (several, by name) is required"),
        ({"aggregations": {}}, "processors[0].params.aggregations: Dictionary should have at least 1 item"),
        (
            {"aggregations": {"total": {"type": "sum"}}},
            "processors[0].params.aggregations.total.field: sum needs a field",
        ),
        (
            {"window": {"type": "session", "gap_ms": 1000},
             "aggregations": {"n": {"type": "count"}, "odd": {"type": "tests.support.aggregators:Unmergeable"}}},
            "processors[0].params.aggregations: odd: 'tests.support.aggregators:Unmergeable' has no merge",
        ),
    ],
)  # fmt: skip
def test_a_mistake_in_the_aggregations_names_its_field(params: dict[str, Any], expected: str) -> None:
    full = copy.deepcopy({"window": {"type": "tumbling", "size_ms": MINUTE}, **params})
    assert expected in config_error(full)
