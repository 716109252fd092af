"""The windowed examples without Kafka: out-of-order arrival, the generators, the totals and sessions the
demos expect, and their checks."""

from __future__ import annotations

import random
from collections import Counter
from itertools import pairwise

import msgpack
import pytest

from examples.disorder import Disorder, in_arrival_order
from examples.minute_totals.expected import expected_totals
from examples.minute_totals.run import check_late
from examples.payments.generate import Payment, make_payments
from examples.sessions.clicks import make_activity
from examples.sessions.run import SessionApp, closed_sessions
from examples.window_results import check_windows


def test_events_arrive_by_time_plus_delay_and_in_time_order_without_delay() -> None:
    events = [(time, f"e{time}") for time in range(0, 10_000, 10)]
    assert list(in_arrival_order(events, Disorder(), random.Random(1))) == [event for _, event in events]

    disorder = Disorder(delayed_share=0.3, max_delay_ms=500, late_share=0.05, late_delay_ms=2000)
    rng, replay = random.Random(2), random.Random(2)
    arrived = list(in_arrival_order(events, disorder, rng))
    delays = {event: disorder.delay(replay) for _, event in events}
    arrival = {event: time + delays[event] for time, event in events}
    assert Counter(arrived) == Counter(event for _, event in events)
    assert [arrival[event] for event in arrived] == sorted(arrival.values())
    assert any(arrival[event] - time >= 2000 for time, event in events), "no event was delayed past 2 s"


def test_a_disorder_takes_shares_that_add_up_to_at_most_one() -> None:
    with pytest.raises(ValueError, match="add up to at most 1"):
        Disorder(delayed_share=0.8, late_share=0.3)
    with pytest.raises(ValueError, match="0 or more"):
        Disorder(delayed_share=0.1, max_delay_ms=-1)


def test_disorder_and_keys_change_only_the_order_and_keys_of_a_seeds_payments() -> None:
    plain = list(make_payments(2000, invalid_ratio=0, seed=5))
    disorder = Disorder(delayed_share=0.2, max_delay_ms=10_000, late_share=0.01, late_delay_ms=90_000)
    shuffled = list(make_payments(2000, invalid_ratio=0, seed=5, disorder=disorder, key_field="account"))
    assert shuffled != plain
    assert Counter(p.value for p in shuffled) == Counter(p.value for p in plain)
    assert all(p.key == msgpack.unpackb(p.value)["account"].encode() for p in shuffled)
    times = [msgpack.unpackb(p.value)["created_at"] for p in shuffled]
    assert any(later < earlier for earlier, later in pairwise(times))


def payment(payment_id: str, account: str, currency: str, amount: int, created_at: int) -> Payment:
    value = {"payment_id": payment_id, "account": account, "currency": currency, "amount_minor": amount,
             "created_at": created_at}  # fmt: skip
    return Payment(account.encode(), msgpack.packb(value), "valid")


def test_expected_totals_close_minutes_by_their_partitions_stream_time_and_leave_late_payments_out() -> None:
    a, b = "acc-a", "acc-b"  # one partition: one stream time
    payments = [
        payment("1", a, "RUB", 100, 5_000),
        payment("2", b, "RUB", 7, 30_000),
        payment("3", a, "RUB", 20, 65_000),
        payment("4", a, "USD", 1, 59_000),  # out of order, within the grace of its minute
        payment("5", a, "RUB", 50, 90_000),  # closes the first minute (60 s + 20 s grace)
        payment("6", b, "RUB", 3, 40_000),  # late: its minute has closed
    ]
    found = expected_totals(payments, 1, 60_000, 20_000)
    assert found.closed == {((a, "RUB"), 0, 60_000): 100, ((a, "USD"), 0, 60_000): 1, ((b, "RUB"), 0, 60_000): 7}
    assert found.still_open == {((a, "RUB"), 60_000, 120_000): 70}
    assert found.late == {"6"}
    assert found.out_of_order == 2


def test_the_window_check_names_each_kind_of_difference() -> None:
    expected = {("k", 0, 60): 3, ("k", 60, 120): 4, ("j", 0, 60): 1}
    assert check_windows(expected, {window: [result] for window, result in expected.items()}, "minute") == []
    sent = {("k", 0, 60): [3, 3], ("k", 60, 120): [5], ("j", 60, 120): [1]}
    problems = check_windows(expected, sent, "minute")
    assert [problem.split(",")[0] for problem in problems] == [
        "1 closed minutes with no result sent",
        "1 minutes sent more than once",
        "1 results of minutes that had not closed",
        "1 minutes with another result",
    ]


def test_the_late_check_wants_each_late_payment_once_and_counted() -> None:
    ids = {"1", "2", "3"}
    assert check_late({"2"}, Counter({"2": 1, "earlier-run": 1}), ids, counted=2) == []
    problems = check_late({"2", "3"}, Counter({"1": 1, "2": 2}), ids, counted=2)
    assert len(problems) == 4  # 3 missing, 1 on time, 2 twice, 2 counted but 3 routed


def test_sessions_are_made_with_gaps_the_app_tells_apart_and_close_by_their_partitions_stream_time() -> None:
    app = SessionApp("clicks", "click-sessions", gap_ms=300_000, grace_ms=30_000)
    activity = make_activity(40, 5, app.gap_ms, start_ms=0, seed=9)
    for user in {session.user for session in activity.sessions}:
        clicks = [click.at for click in activity.clicks if click.user == user]
        sessions = [s for s in activity.sessions if s.user == user]
        assert sum(s.clicks for s in sessions) == len(clicks)
        assert all(later.start - earlier.end > app.gap_ms for earlier, later in pairwise(sessions))
        gaps = [later - earlier for earlier, later in pairwise(clicks)]
        assert sum(gap > app.gap_ms for gap in gaps) == len(sessions) - 1  # the pauses, and no more
    closed, still_open = closed_sessions(app, activity, partitions=3)
    assert len(closed) + len(still_open) == 200 and still_open
    last = {session.user: session for session in activity.sessions}  # each user's last
    assert all(session == last[session.user] for session in still_open)
