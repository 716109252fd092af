"""The aggregations: results, merges of sessions' aggregates, state that survives msgpack, and the
errors of a user's aggregator class."""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from processors.windows.aggregations import SIMPLE, Aggregation, CappedList, Custom, import_aggregator
from tests.support.aggregators import Distinct

ALL: dict[str, Aggregation] = {**{name: kind() for name, kind in SIMPLE.items()}, "list": CappedList(3),
                               "distinct": Custom(Distinct())}  # fmt: skip
# (timestamp, value) pairs, distinct timestamps: records of one session, in time order.
timed = (
    st.lists(st.integers(-100, 100), min_size=1, max_size=20, unique=True)
    .map(sorted)
    .flatmap(lambda times: st.tuples(*(st.tuples(st.just(time), st.integers(-50, 50)) for time in times)))
)


def aggregate(aggregation: Aggregation, records: Sequence[tuple[int, Any]]) -> Any:
    """Added one by one, the state passing through msgpack each time, as it does through a store."""
    state = aggregation.initial()
    for timestamp, value in records:
        state = msgpack.unpackb(msgpack.packb(aggregation.add(state, value, timestamp)))
    return state


def test_results() -> None:
    records = [(30, 4), (10, 7), (20, -2), (10, 9)]  # out of order; two at 10, 7 first
    results = {name: aggregation.result(aggregate(aggregation, records)) for name, aggregation in ALL.items()}
    assert results == {
        "count": 4,
        "sum": 18,
        "min": -2,
        "max": 9,
        "mean": 4.5,
        "first": 7,
        "last": 4,
        "list": [9, -2, 4],  # the latest three, in timestamp order
        "distinct": [-2, 4, 7, 9],
    }


@pytest.mark.parametrize("name", list(ALL))
@given(records=timed, split=st.integers(0, 20))
def test_merging_two_sessions_gives_what_adding_all_their_records_gives(
    name: str, records: tuple[tuple[int, int], ...], split: int
) -> None:
    aggregation = ALL[name]
    earlier, later = records[:split], records[split:]
    merged = reduce(aggregation.merge, [aggregate(aggregation, part) for part in (earlier, later) if part])
    assert aggregation.result(merged) == aggregation.result(aggregate(aggregation, records))


def test_a_capped_list_keeps_the_latest_values_however_they_come() -> None:
    capped = CappedList(2)
    assert capped.result(aggregate(capped, [(5, "e"), (1, "a"), (9, "i"), (3, "c")])) == ["e", "i"]
    assert capped.result(capped.merge(aggregate(capped, [(1, "a"), (2, "b")]), aggregate(capped, [(7, "g")]))) == [
        "b",
        "g",
    ]


def test_a_user_aggregator_is_imported_by_path() -> None:
    assert import_aggregator("tests.support.aggregators:Distinct") is Distinct
    with pytest.raises(ImportError, match="No module named 'nowhere'"):
        import_aggregator("nowhere:Thing")
    with pytest.raises(ImportError, match="has no attribute 'Missing'"):
        import_aggregator("tests.support.aggregators:Missing")
    with pytest.raises(ImportError, match="not a built-in aggregation nor an import path"):
        import_aggregator("median")
    with pytest.raises(TypeError, match=r"not a class with initial\(\) and add\(aggregate, value\)"):
        import_aggregator("json:dumps")
