"""Properties of the stream-stream join over records of both sides taken out of order: the left and outer
joins make every pair the inner join makes, every pair of on-time records is made once, no record is both
joined and sent alone, and every on-time record a left (outer) join answers for comes out once no on-time
record can meet it any more."""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from hypothesis import given, settings
from hypothesis import strategies as st

from processors.joins import WindowJoin
from processors.record import Record
from tests.support.window_context import WindowContext


class Event(NamedTuple):
    side: str  # "L" or "R"
    key: str
    timestamp: int
    number: int  # the record's own, sent as its value


class Pair(NamedTuple):
    key: str
    left: int | None
    right: int | None
    timestamp: int


class Case(NamedTuple):
    events: list[Event]
    before: int  # a right record joins left records this much younger than it, at most
    after: int  # and this much older
    grace: int


# A record: its side, its key, how far time moves on before it, how much older than that time it is.
STEP = st.tuples(
    st.sampled_from("LR"), st.sampled_from("abc"), st.integers(0, 6), st.sampled_from([0, 0, 0, *range(1, 26)])
)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """Records of both sides over a few keys, in the order taken: time moves on by small steps, and some
    records are up to 25 ms older than their step, so out of order and some of them late."""
    events, now = [], 0
    for number, (side, key, step, lag) in enumerate(draw(st.lists(STEP, max_size=30))):
        now += step
        events.append(Event(side, key, max(0, now - lag), number))
    before = draw(st.integers(0, 10))
    after = draw(st.one_of(st.just(before), st.integers(0, 10)))  # as often symmetric as not
    return Case(events, before, after, draw(st.integers(0, 5)))


def run(case: Case, join: str) -> list[Pair]:
    params = {"left": "L", "right": "R", "before_ms": case.before, "after_ms": case.after, "grace_ms": case.grace,
              "join": join, "output": "out"}  # fmt: skip
    context = WindowContext.of(WindowJoin, params, name="join")
    processor = WindowJoin()
    processor.init(context)
    for offset, event in enumerate(case.events):
        processor.process(Record(event.side, 0, offset, event.timestamp, event.key, {"n": event.number}), context)

    def number(side: dict[str, int] | None) -> int | None:
        return None if side is None else side["n"]

    return [Pair(sent.key, number(sent.value["left"]), number(sent.value["right"]), sent.timestamp or 0)
            for sent in context.sent]  # fmt: skip


def on_time(case: Case) -> tuple[list[Event], int]:
    """The records not late when taken (stream time at most the end of their window, `after` past a left
    record and `before` past a right one, plus the grace), and the stream time at the end."""
    kept, stream_time = [], -1
    for event in case.events:
        ahead = case.after if event.side == "L" else case.before
        if event.timestamp + ahead + case.grace >= stream_time:
            kept.append(event)
            stream_time = max(stream_time, event.timestamp)
    return kept, stream_time


def violations(case: Case) -> list[str]:
    """What the three joins of `case` do against the properties, one line each; none when they hold."""
    found = []
    kept, stream_time = on_time(case)
    lefts = [event for event in kept if event.side == "L"]
    rights = [event for event in kept if event.side == "R"]
    every_pair = Counter(
        Pair(left.key, left.number, right.number, max(left.timestamp, right.timestamp))
        for left in lefts
        for right in rights
        if left.key == right.key and -case.before <= right.timestamp - left.timestamp <= case.after
    )
    inner = Counter(run(case, "inner"))
    if inner != every_pair:
        found.append(f"inner: {sorted(inner - every_pair)} made, {sorted(every_pair - inner)} missing")
    joined_by_inner = {(side, number) for pair in inner for side, number in (("L", pair.left), ("R", pair.right))}
    unmatchable_after = case.before + case.after + case.grace  # no on-time record can meet one this much older
    for join, answered_for in (("left", lefts), ("outer", kept)):
        sent = run(case, join)
        joined = Counter(pair for pair in sent if pair.left is not None and pair.right is not None)
        if joined != inner:
            found.append(f"{join}: {sorted(inner - joined)} missing, {sorted(joined - inner)} more")
        sent_joined = {(side, number) for pair in joined for side, number in (("L", pair.left), ("R", pair.right))}
        alone = Counter(
            ("L", pair.left) if pair.right is None else ("R", pair.right) for pair in sent if pair not in joined
        )
        if both := sorted(sent_joined & set(alone)):
            found.append(f"{join}: {both} sent joined and sent alone")
        if met := sorted(joined_by_inner & set(alone)):
            found.append(f"{join}: {met} sent alone, joined by the inner join")
        if twice := sorted(record for record, times in alone.items() if times > 1):
            found.append(f"{join}: {twice} sent alone more than once")
        for event in answered_for:
            record = (event.side, event.number)
            closed = event.timestamp + unmatchable_after < stream_time
            if closed and record not in sent_joined and record not in alone:
                found.append(f"{join}: {event} never came out")
            if not closed and record in alone:
                found.append(f"{join}: {event} sent alone while a record could still meet it")
        if late := sorted(record for record in alone if record not in {(e.side, e.number) for e in answered_for}):
            found.append(f"{join}: {late} sent alone, late or of a side it does not answer for")
    return found


@settings(max_examples=1000, deadline=None, derandomize=True)
@given(case=cases())
def test_left_and_outer_joins_lose_no_pair_and_send_no_joined_record_alone(case: Case) -> None:
    assert violations(case) == []
