"""What windowed aggregations must give, computed in plain Python over the whole input, for the tests.

Written from the definitions (docs/windows.md), not from the processor's code: it keeps every record
and looks at all of them for each window. Stream time is the largest timestamp seen so far. A record
counts in a window only if it arrived before the window closed (stream time below its close time), and
a record is late, and counts nowhere, when every window it belongs to had closed when it arrived.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Arrival = tuple[str, int, Any]  # (key, timestamp, value), in arrival order
Member = tuple[int, int, Any]  # (timestamp, arrival, value) of a record a window holds
WindowKey = tuple[str, int, int]  # (key, start, end)


@dataclass
class Expected:
    windows: dict[WindowKey, list[Member]]  # every window that exists, with its records
    close_times: dict[WindowKey, int]
    late: list[int]  # arrival numbers of the late records
    stream_time: int

    def closed(self) -> dict[WindowKey, list[Member]]:
        """The windows whose final results were emitted by the end of the input."""
        return {window: members for window, members in self.windows.items()
                if self.close_times[window] <= self.stream_time}  # fmt: skip


def fixed(arrivals: Sequence[Arrival], size: int, advance: int, grace: int) -> Expected:
    """Hopping windows (tumbling ones when `advance == size`): [start, start + size) for every start
    that is a multiple of `advance`, from 0."""
    windows: dict[WindowKey, list[Member]] = defaultdict(list)
    late, stream_time = [], -1
    for arrival, (key, timestamp, value) in enumerate(arrivals):
        stream_time = max(stream_time, timestamp)
        counted = False
        earliest = max(0, timestamp - size)  # every start from a multiple of `advance` at or before it
        for start in range(earliest - earliest % advance, timestamp + 1, advance):
            if start + size > timestamp and stream_time < start + size + grace:
                windows[(key, start, start + size)].append((timestamp, arrival, value))
                counted = True
        if not counted:
            late.append(arrival)
    return Expected(dict(windows), {window: window[2] + grace for window in windows}, late, stream_time)


def sliding(arrivals: Sequence[Arrival], difference: int, grace: int) -> Expected:
    """Windows [start, start + difference], both ends included: each record's left window, which ends at
    it, and its right window, which starts just after it, if it holds records."""

    def close_time(start: int) -> int:
        return start + difference + 1 + grace

    kept: list[tuple[str, int, int, Any, int]] = []  # records not late, with the stream time they came at
    late, stream_time = [], -1
    for arrival, (key, timestamp, value) in enumerate(arrivals):
        stream_time = max(stream_time, timestamp)
        if stream_time >= close_time(timestamp):  # [t, t + difference] is the last window that holds it
            late.append(arrival)
        else:
            kept.append((key, timestamp, arrival, value, stream_time))
    defined = set()
    for key, timestamp, _, _, came_at in kept:
        if came_at < close_time(timestamp - difference):  # a left window that closed before it came is not made
            defined.add((key, timestamp - difference))
        defined.add((key, timestamp + 1))
    windows: dict[WindowKey, list[Member]] = {}
    for key, start in defined:
        members = [
            (timestamp, arrival, value)
            for other, timestamp, arrival, value, came_at in kept
            if other == key and start <= timestamp <= start + difference and came_at < close_time(start)
        ]
        if members:
            windows[(key, start, start + difference)] = members
    return Expected(windows, {window: close_time(window[1]) for window in windows}, late, stream_time)


def sessions(arrivals: Sequence[Arrival], gap: int, grace: int) -> Expected:
    """A key's records within `gap` of each other are one session [first timestamp, last timestamp]. A
    record is late when the session it would start has closed, or when it is within the gap of a session
    that has closed (joining it would change a final result)."""

    def close_time(end: int) -> int:
        return end + gap + 1 + grace

    kept: dict[str, list[Member]] = defaultdict(list)
    late, stream_time = [], -1
    for arrival, (key, timestamp, value) in enumerate(arrivals):
        stream_time = max(stream_time, timestamp)
        joins_closed = any(
            end >= timestamp - gap and start <= timestamp + gap and stream_time >= close_time(end)
            for start, end, _ in _sessions_of(kept[key], gap)
        )
        if stream_time >= close_time(timestamp) or joins_closed:
            late.append(arrival)
        else:
            kept[key].append((timestamp, arrival, value))
    windows = {(key, start, end): members for key, records in kept.items()
               for start, end, members in _sessions_of(records, gap)}  # fmt: skip
    return Expected(windows, {window: close_time(window[2]) for window in windows}, late, stream_time)


def _sessions_of(members: Iterable[Member], gap: int) -> list[tuple[int, int, list[Member]]]:
    found: list[tuple[int, int, list[Member]]] = []
    for member in sorted(members):
        if found and member[0] - found[-1][1] <= gap:
            start, _, held = found[-1]
            found[-1] = (start, member[0], [*held, member])
        else:
            found.append((member[0], member[0], [member]))
    return found


def result(aggregation: str, members: Sequence[Member], max_items: int = 0) -> Any:
    """What the aggregation of the members' values must give; first, last and list go by timestamp,
    then by arrival."""
    values = [value for _, _, value in sorted(members)]
    if aggregation == "count":
        return len(values)
    if aggregation == "sum":
        return sum(values)
    if aggregation == "min":
        return min(values)
    if aggregation == "max":
        return max(values)
    if aggregation == "mean":
        return sum(values) / len(values)
    if aggregation == "first":
        return values[0]
    if aggregation == "last":
        return values[-1]
    if aggregation == "list":
        return values[-max_items:]
    if aggregation == "tests.support.aggregators:Distinct":
        return sorted(set(values))
    raise AssertionError(f"no reference for {aggregation}")


def expected_for(window: Mapping[str, Any], arrivals: Sequence[Arrival]) -> Expected:
    """The reference for the Aggregate processor's `window` params."""
    grace = window.get("grace_ms", 0)
    if window["type"] == "tumbling":
        return fixed(arrivals, window["size_ms"], window["size_ms"], grace)
    if window["type"] == "hopping":
        return fixed(arrivals, window["size_ms"], window["advance_ms"], grace)
    if window["type"] == "sliding":
        return sliding(arrivals, window["time_difference_ms"], grace)
    return sessions(arrivals, window["gap_ms"], grace)


def results(windows: Mapping[WindowKey, list[Member]], aggregation: Mapping[str, Any]) -> Counter[Any]:
    """(key, start, end, result) of each window, for the Aggregate processor's `aggregation` params; lists
    as tuples, so that results can be counted."""
    kind, max_items = aggregation["type"], aggregation.get("max_items", 0)
    return Counter(
        (key, start, end, frozen(result(kind, members, max_items))) for (key, start, end), members in windows.items()
    )


def frozen(value: Any) -> Any:
    return tuple(frozen(item) for item in value) if isinstance(value, list) else value
