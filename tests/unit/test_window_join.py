"""The stream-stream join against a plain-Python join of the whole input: every pair of the two sides with the
same key and a right timestamp from `before` below to `after` above the left one, and, for left and outer
joins, each record that met none, sent alone once no on-time record can meet it (stream time past its
timestamp plus before, after and the grace), never before."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.joins import WindowJoin
from processors.record import Record
from tests.support.window_context import WindowContext

Event = tuple[str, str, int, int]  # (side, key, timestamp, number)


@st.composite
def both_sides(draw: st.DrawFn) -> list[Event]:
    """Records of both sides, each side's in time order; the task takes them in timestamp order (a tie:
    the left input first, as it is listed first)."""
    events, now = [], 0
    for number in range(draw(st.integers(0, 40))):
        now += draw(st.integers(0, 6))
        events.append((draw(st.sampled_from(["L", "R"])), draw(st.sampled_from("ab")), now, number))
    return sorted(events, key=lambda event: (event[2], event[0] != "L"))


def run(events: list[Event], difference: int, grace: int, join: str, after: int | None = None) -> WindowContext:
    """`difference` is `before_ms`, and `after_ms` too unless `after` is given."""
    window = {"time_difference_ms": difference} if after is None else {"before_ms": difference, "after_ms": after}
    params = {"left": "L", "right": "R", **window, "grace_ms": grace, "join": join, "output": "out"}
    context = WindowContext.of(WindowJoin, params, name="join")
    processor = WindowJoin()
    processor.init(context)
    for offset, (side, key, timestamp, number) in enumerate(events):
        processor.process(Record(side, 0, offset, timestamp, key, {"n": number}), context)
    return context


def reference(events: list[Event], difference: int, grace: int, join: str, after: int | None = None) -> Counter[Any]:
    before, after = difference, difference if after is None else after
    lefts = [event for event in events if event[0] == "L"]
    rights = [event for event in events if event[0] == "R"]
    stream_time = max((event[2] for event in events), default=-1)
    out: Counter[Any] = Counter()
    met: set[Event] = set()
    for left, right in itertools.product(lefts, rights):
        if left[1] == right[1] and -before <= right[2] - left[2] <= after:
            out[(left[1], left[3], right[3], max(left[2], right[2]))] += 1
            met |= {left, right}
    alone = {"inner": [], "left": lefts, "outer": [*lefts, *rights]}[join]
    for event in alone:
        if event not in met and event[2] + before + after + grace < stream_time:  # nothing on time can meet it
            pair = (event[3], None) if event[0] == "L" else (None, event[3])
            out[(event[1], *pair, event[2])] += 1
    return out


def emitted(context: WindowContext) -> Counter[Any]:
    def number(side: Any) -> Any:
        return None if side is None else side["n"]

    return Counter((sent.key, number(sent.value["left"]), number(sent.value["right"]), sent.timestamp)
                   for sent in context.taken("out"))  # fmt: skip


@pytest.mark.parametrize("join", ["inner", "left", "outer"])
@settings(max_examples=150, deadline=None)
@given(events=both_sides(), difference=st.integers(0, 10), grace=st.integers(0, 5))
def test_the_join_equals_the_plain_python_join(join: str, events: list[Event], difference: int, grace: int) -> None:
    assert emitted(run(events, difference, grace, join)) == reference(events, difference, grace, join)


@pytest.mark.parametrize("join", ["inner", "left", "outer"])
@settings(max_examples=150, deadline=None)
@given(events=both_sides(), before=st.integers(0, 10), after=st.integers(0, 10), grace=st.integers(0, 5))
def test_a_join_reaching_further_back_than_ahead_equals_the_plain_python_join(
    join: str, events: list[Event], before: int, after: int, grace: int
) -> None:
    assert emitted(run(events, before, grace, join, after)) == reference(events, before, grace, join, after)


def test_a_record_after_its_window_closed_is_late_counted_and_dropped() -> None:
    events = [("L", "a", 10, 0), ("R", "a", 30, 1), ("R", "a", 12, 2)]  # the last is 18 behind stream time 30
    context = run(events, 5, 2, "outer")
    assert context.counts["late_records"] == 1
    assert emitted(context) == Counter({("a", 0, None, 10): 1}), "the late right record joined nothing"


def test_a_left_record_is_sent_alone_only_once_no_on_time_right_record_can_meet_it() -> None:
    context = run([("L", "a", 10, 0), ("R", "a", 14, 1)], 5, 0, "left")
    assert emitted(context) == Counter({("a", 0, 1, 14): 1})
    context = run([("L", "a", 10, 0), ("R", "b", 20, 1)], 5, 0, "left")
    assert emitted(context) == Counter(), "at stream time 20 a right record of 15 is on time, and meets it"
    context = run([("L", "a", 10, 0), ("R", "b", 21, 1)], 5, 0, "left")
    assert emitted(context) == Counter({("a", 0, None, 10): 1})
