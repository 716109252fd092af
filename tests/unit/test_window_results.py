"""The Aggregate processor's results, for random inputs with out-of-order and late records, against the
plain-Python reference of tests/support/window_reference.py: for every window type and aggregation,
emitting final results and emitting updates, with the engine's window and session stores in memory."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processors import Record
from processors.windows import Aggregate
from processors.windows.late import LATE_REASON
from tests.support.window_context import WindowContext
from tests.support.window_reference import Arrival, expected_for, frozen, results

AGGREGATIONS = ["count", "sum", "min", "max", "mean", "first", "last", "list", "tests.support.aggregators:Distinct"]
WINDOW_TYPES = ["tumbling", "hopping", "sliding", "session"]


@st.composite
def arrivals(draw: st.DrawFn) -> list[Arrival]:
    """Records whose timestamps mostly move forward, some of them out of order by up to 40 ms: within
    the grace period or not, so some are late."""
    records, now = [], 0
    for _ in range(draw(st.integers(0, 60))):
        now += draw(st.integers(0, 8))
        timestamp = max(0, now - draw(st.sampled_from([0, 0, 0, 1, 3, 10, 40])))
        records.append((draw(st.sampled_from("ab")), timestamp, draw(st.integers(-20, 20))))
    return records


durations = st.integers(1, 40)
graces = st.integers(0, 30)


@st.composite
def windows(draw: st.DrawFn, kind: str) -> dict[str, Any]:
    grace = draw(graces)
    if kind == "tumbling":
        return {"type": kind, "size_ms": draw(durations), "grace_ms": grace}
    if kind == "hopping":
        size = draw(durations)
        return {"type": kind, "size_ms": size, "advance_ms": draw(st.integers(1, size)), "grace_ms": grace}
    if kind == "sliding":
        return {"type": kind, "time_difference_ms": draw(durations), "grace_ms": grace}
    return {"type": kind, "gap_ms": draw(durations), "grace_ms": grace}


@st.composite
def aggregations(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(AGGREGATIONS))
    if kind == "count":
        return {"type": kind}
    if kind == "list":
        return {"type": kind, "field": "n", "max_items": draw(st.integers(1, 4))}
    return {"type": kind, "field": "n"}


def run(params: dict[str, Any], records: Sequence[Arrival]) -> WindowContext:
    """Process the records in order, then flush, as a commit would."""
    context = WindowContext.of(Aggregate, params)
    processor = Aggregate()
    processor.init(context)
    for offset, (key, timestamp, value) in enumerate(records):
        processor.process(Record("in", 0, offset, timestamp, key, {"n": value}, [("trace", b"x")]), context)
    processor.flush(context)
    return context


@pytest.mark.parametrize("kind", WINDOW_TYPES)
@settings(max_examples=150, deadline=None)
@given(data=st.data(), records=arrivals(), aggregation=aggregations())
def test_final_results_equal_the_reference(kind: str, data: st.DataObject, records: list[Arrival],
                                           aggregation: dict[str, Any]) -> None:  # fmt: skip
    window = data.draw(windows(kind))
    params = {"window": window, "aggregation": aggregation, "output": "out", "late_topic": "late"}
    context = run(params, records)
    expected = expected_for(window, records)

    out = context.taken("out")
    emitted = Counter((sent.key, sent.value["start"], sent.value["end"], frozen(sent.value["value"])) for sent in out)
    assert emitted == results(expected.closed(), aggregation)
    assert max(emitted.values(), default=1) == 1, "a window's final result was emitted twice"
    last_ms = [sent.value["end"] - (kind in ("tumbling", "hopping")) for sent in out]
    assert [sent.timestamp for sent in out] == last_ms, "a result's timestamp is the last millisecond of its window"
    late = context.taken("late")
    assert [int(dict(sent.headers)["source.offset"]) for sent in late] == expected.late
    assert [(sent.key, sent.value) for sent in late] == [(records[n][0], {"n": records[n][2]}) for n in expected.late]
    assert all(sent.headers[0] == ("trace", b"x") and dict(sent.headers)[LATE_REASON] for sent in late)
    assert context.counts["late_records"] == len(expected.late)


@pytest.mark.parametrize("kind", WINDOW_TYPES)
@settings(max_examples=60, deadline=None)
@given(data=st.data(), records=arrivals())
def test_without_a_late_topic_late_records_are_counted_and_dropped(
    kind: str, data: st.DataObject, records: list[Arrival]
) -> None:
    window = data.draw(windows(kind))
    aggregation = {"type": "count"}
    context = run({"window": window, "aggregation": aggregation, "output": "out"}, records)
    expected = expected_for(window, records)
    out = context.taken("out")
    emitted = Counter((sent.key, sent.value["start"], sent.value["end"], frozen(sent.value["value"])) for sent in out)
    assert emitted == results(expected.closed(), aggregation), "late records change no result"
    assert context.sent == [], "nothing but the results is sent"
    assert context.counts.get("late_records", 0) == len(expected.late)


@pytest.mark.parametrize("kind", WINDOW_TYPES)
@settings(max_examples=150, deadline=None)
@given(data=st.data(), records=arrivals(), aggregation=aggregations(), commits=st.frozensets(st.integers(0, 59)))
def test_updates_come_once_per_window_and_commit_and_end_at_the_windows_results(
    kind: str, data: st.DataObject, records: list[Arrival], aggregation: dict[str, Any], commits: frozenset[int]
) -> None:
    window = data.draw(windows(kind))
    params = {"window": window, "aggregation": aggregation, "output": "out", "emit": "updates"}
    context = WindowContext.of(Aggregate, params)
    processor = Aggregate()
    processor.init(context)
    latest: dict[tuple[str, int, int], Any] = {}
    for offset, (key, timestamp, value) in enumerate(records):
        processor.process(Record("in", 0, offset, timestamp, key, {"n": value}), context)
        if offset in commits or offset == len(records) - 1:
            processor.flush(context)
            sent = context.taken("out")
            updated = [(update.key, update.value["start"], update.value["end"]) for update in sent]
            assert len(updated) == len(set(updated)), "a window was updated twice in one commit"
            for where, update in zip(updated, sent, strict=True):
                if update.value.get("removed"):  # a session merged into another: sent before, and no more
                    assert kind == "session" and update.value["value"] is None
                    assert update.timestamp == where[2], "a removal notice is stamped as the session's updates"
                    del latest[where]
                else:
                    latest[where] = frozen(update.value["value"])
    expected = expected_for(window, records)
    final = {(key, start, end): value for key, start, end, value in results(expected.windows, aggregation)}
    assert latest == final, "what the removal notices leave of the updates is every window's result, once"
    assert context.counts["late_records"] == len(expected.late)


@pytest.mark.parametrize(
    ("window", "records", "reason"),
    [
        (
            {"type": "tumbling", "size_ms": 10},
            [("a", 25, 1), ("a", 9, 1)],
            "window [0, 10), the last that holds it, closed at 10",
        ),
        (
            {"type": "hopping", "size_ms": 10, "advance_ms": 5, "grace_ms": 2},
            [("a", 30, 1), ("a", 7, 1)],
            "window [5, 15), the last that holds it, closed at 17",
        ),
        (
            {"type": "sliding", "time_difference_ms": 10},
            [("a", 30, 1), ("a", 7, 1)],
            "window [7, 17], the last that can hold it, closed at 18",
        ),
        ({"type": "session", "gap_ms": 5}, [("a", 30, 1), ("a", 7, 1)], "the session it would start closed at 13"),
        (
            {"type": "session", "gap_ms": 5, "grace_ms": 10},
            [("a", 10, 1), ("b", 26, 1), ("a", 14, 1)],
            "it falls within the gap of session [10, 10], which closed at 26",
        ),
    ],
)
def test_a_late_record_goes_on_as_it_came_saying_why(
    window: dict[str, Any], records: list[Arrival], reason: str
) -> None:
    params = {"window": window, "aggregation": {"type": "count"}, "output": "out", "late_topic": "late"}
    (late,) = run(params, records).taken("late")
    late_at = len(records) - 1
    assert (late.key, late.value) == (records[late_at][0], {"n": records[late_at][2]})
    assert late.headers == (
        ("trace", b"x"),
        ("source.topic", b"in"),
        ("source.partition", b"0"),
        ("source.offset", str(late_at).encode()),
        ("source.timestamp", str(records[late_at][1]).encode()),
        (LATE_REASON, reason.encode()),
        ("late.stream_time", str(max(timestamp for _, timestamp, _ in records)).encode()),
    )
