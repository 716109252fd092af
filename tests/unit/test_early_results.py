"""Early results of windows emitting final results (`early:`), on the test kit's driver: a window's current
result, marked `"early": true`, after every N-th record of it (`every_records`), and for each window changed
since its last early result when stream time crosses a multiple of `every_ms`; the final result is still
sent once, unmarked, and equal to the one an app without early results sends."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime.config import ConfigError, parse_app
from runtime.testkit import AppDriver

MakeDriver = Callable[..., AppDriver]
T = 1_740_000_000_000  # a multiple of every window size and early interval below
MINUTE = 60_000
TOPIC = {"partitions": 1, "key_serde": "str", "value_serde": "json"}
Result = tuple[str, int, int, Any, bool]  # key, start, end, value, early


def app(params: dict[str, Any]) -> dict[str, Any]:
    """The app of an `Aggregate` with these params; a count, unless they give aggregations."""
    if "aggregations" not in params:
        params = {"aggregation": {"type": "count"}, **params}
    return {
        "app_id": "early",
        "topics": {"in": TOPIC, "out": TOPIC},
        "processors": [{"name": "agg", "class": "processors.windows:Aggregate", "inputs": ["in"], "outputs": ["out"],
                        "params": {"output": "out", **params}}],
    }  # fmt: skip


def results(driver: AppDriver) -> list[Result]:
    return [
        (r.key, r.value["start"] - T, r.value["end"] - T, r.value["value"], r.value.get("early", False))
        for r in driver.read("out")
    ]


def test_every_nth_record_of_a_window_sends_its_result_early_and_the_final_result_once(app_driver: MakeDriver) -> None:
    window = {"type": "tumbling", "size_ms": MINUTE}
    driver = app_driver(app({"window": window, "early": {"every_records": 2}}))
    driver.pipe_all("in", [("a", {}, T + i * 1000) for i in range(5)] + [("b", {}, T + 6000)])
    early = [r for r in driver.read("out")]
    assert [(r.key, r.value, r.timestamp) for r in early] == [
        ("a", {"start": T, "end": T + MINUTE, "value": 2, "early": True}, T + MINUTE - 1),
        ("a", {"start": T, "end": T + MINUTE, "value": 4, "early": True}, T + MINUTE - 1),
    ]
    driver.advance_stream_time(T + MINUTE)
    assert results(driver) == [("a", 0, MINUTE, 5, False), ("b", 0, MINUTE, 1, False)]


def test_a_merged_session_adds_up_the_records_its_sessions_got_since_their_early_results(
    app_driver: MakeDriver,
) -> None:
    window = {"type": "session", "gap_ms": 5000, "grace_ms": 10_000}
    driver = app_driver(app({"window": window, "early": {"every_records": 3}}))
    driver.pipe_all("in", [("a", {}, T), ("a", {}, T + 1000), ("a", {}, T + 10_000), ("a", {}, T + 11_000)])
    assert results(driver) == []  # two records in each session
    driver.pipe("in", {}, key="a", timestamp=T + 5500)  # merges them: 2 + 2 + 1 records since an early result
    assert results(driver) == [("a", 0, 11_000, 5, True)]
    driver.pipe_all("in", [("a", {}, T + 12_000), ("a", {}, T + 13_000)])
    assert results(driver) == []
    driver.pipe("in", {}, key="a", timestamp=T + 14_000)
    assert results(driver) == [("a", 0, 14_000, 8, True)]
    driver.advance_stream_time(T + 14_000 + 5000 + 1 + 10_000)
    assert results(driver) == [("a", 0, 14_000, 8, False)]


def test_the_count_since_the_last_early_result_is_restored_with_the_window(tmp_path: Path) -> None:
    params = {"window": {"type": "tumbling", "size_ms": MINUTE}, "early": {"every_records": 3}}
    with AppDriver(app(params), state_dir=tmp_path) as first:
        first.pipe_all("in", [("a", {}, T + 1000), ("a", {}, T + 2000)])
        first.commit()
    with AppDriver(app(params), state_dir=tmp_path) as second:
        second.pipe("in", {}, key="a", timestamp=T + 3000)
        assert results(second) == [("a", 0, MINUTE, 3, True)]


WINDOWS: dict[str, dict[str, Any]] = {
    "tumbling": {"type": "tumbling", "size_ms": MINUTE, "grace_ms": 30_000},
    "hopping": {"type": "hopping", "size_ms": MINUTE, "advance_ms": 20_000, "grace_ms": 30_000},
    "sliding": {"type": "sliding", "time_difference_ms": 5000, "grace_ms": 30_000},
    "session": {"type": "session", "gap_ms": 5000, "grace_ms": 30_000},
}
# Two rounds of 10 s; in the second, T + 12 s merges a's sessions of T + 9 s (sent early in the first round,
# so announced removed) and of T + 15 s.
ROUNDS = [
    [("a", {"n": 1}, T + 1000), ("a", {"n": 2}, T + 3000), ("b", {"n": 3}, T + 4000), ("a", {"n": 4}, T + 9000)],
    [("a", {"n": 5}, T + 15_000), ("a", {"n": 6}, T + 12_000), ("b", {"n": 7}, T + 19_000)],
]


@pytest.mark.parametrize("kind", WINDOWS)
def test_every_interval_of_stream_time_sends_the_windows_changed_in_it_as_updates_would_be_at_a_commit(
    app_driver: MakeDriver, kind: str
) -> None:
    aggregations = {"n": {"type": "count"}, "values": {"type": "list", "max_items": 10, "field": "n"}}
    plain = {"window": WINDOWS[kind], "aggregations": aggregations}
    early = app_driver(app({**plain, "early": {"every_ms": 10_000}}))
    updates = app_driver(app({**plain, "emit": "updates"}))
    final = app_driver(app(plain))
    for number, records in enumerate(ROUNDS, start=1):
        for driver in (early, updates, final):
            driver.pipe_all("in", records)
        early.commit()  # a commit sends nothing early
        assert results(early) == []
        early.advance_stream_time(T + number * 10_000)
        updates.commit()
        sent = results(early)
        assert all(result[-1] for result in sent)
        assert [result[:-1] for result in sent] == [result[:-1] for result in results(updates)]
        assert len(sent) >= 2
        if kind == "session" and number == 2:
            assert ("a", 9000, 9000, None, True) in sent  # the removal notice
    for driver in (early, final):
        driver.advance_stream_time(T + 10 * MINUTE)
    finals = results(early)
    assert finals == results(final)
    assert finals and not any(result[-1] for result in finals)


def test_a_window_sent_early_is_not_sent_again_until_it_changes_nor_once_it_has_closed(app_driver: MakeDriver) -> None:
    window = {"type": "tumbling", "size_ms": MINUTE}
    driver = app_driver(app({"window": window, "early": {"every_ms": 20_000, "every_records": 3}}))
    # T + 21 s: stream time crosses T + 20 s; T + 45 s: the third record, then T + 40 s, with nothing new.
    driver.pipe_all("in", [("a", {}, T + 1000), ("a", {}, T + 21_000), ("a", {}, T + 45_000), ("a", {}, T + 50_000)])
    assert results(driver) == [("a", 0, MINUTE, 2, True), ("a", 0, MINUTE, 3, True)]
    driver.pipe("in", {}, key="b", timestamp=T + MINUTE)  # closes a's minute, changed since, at T + 60 s
    assert results(driver) == [("a", 0, MINUTE, 4, False), ("b", MINUTE, 2 * MINUTE, 1, True)]
    driver.advance_stream_time(T + 2 * MINUTE)
    assert results(driver) == [("b", MINUTE, 2 * MINUTE, 1, False)]


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"early": {}}, "processors[0].params.early: early needs every_records, every_ms, or both"),
        ({"early": {"every_records": 0}}, "processors[0].params.early.every_records: Input should be greater than 0"),
        ({"early": {"every_ms": 1000}, "emit": "updates"}, "processors[0].params.early: early results "
                                                           "are for emit: final"),
        ({"early": {"every_records": 5}, "window": {"type": "sliding", "time_difference_ms": 1000}},
         "processors[0].params.early: sliding windows are aggregated from their records"),
        ({"early": {"every_count": 5}}, "processors[0].params.early.every_count: Extra inputs are not permitted"),
        ({"early": {"every_records": 2}, "window": {"type": "count", "size": 10}},
         "processors[0].params.early: count windows are sent as their last record comes"),
    ],
)  # fmt: skip
def test_a_mistake_in_early_names_its_field(params: dict[str, Any], expected: str) -> None:
    full = app({"window": {"type": "tumbling", "size_ms": MINUTE}, **params})
    with pytest.raises(ConfigError) as raised:
        parse_app({**full, "kafka": {"bootstrap_servers": "localhost:1"}})
    assert expected in str(raised.value)
