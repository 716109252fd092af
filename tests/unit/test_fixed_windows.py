"""Tumbling and hopping windows in the `Aggregate` processor: which windows a record updates, and the
closing of windows as the stream time passes them, against the window definitions themselves."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from processors.windows.aggregations import Count
from processors.windows.definitions import Hopping, Tumbling, Window
from processors.windows.fixed import FixedWindows
from processors.windows.windowing import WindowResult
from stores import BufferedKeyValueStore, MemoryBackend, WindowView
from stores.serdes import BytesSerde


@st.composite
def definitions(draw: st.DrawFn) -> Tumbling | Hopping:
    size, grace = draw(st.integers(1, 50)), draw(st.integers(0, 30))
    if draw(st.booleans()):
        return Tumbling(size, grace)
    return Hopping(size, draw(st.integers(1, size)), grace)


def fixed_windows(windows: Tumbling | Hopping, final: bool = True) -> tuple[FixedWindows, WindowView]:
    raw = BufferedKeyValueStore(MemoryBackend(), BytesSerde(), BytesSerde(), name="w")
    store = WindowView(raw, windows.retention_ms)
    return FixedWindows(windows, Count(), store, final), store


@settings(max_examples=300, deadline=None)
@given(windows=definitions(), timestamp=st.integers(0, 500), lag=st.integers(0, 120))
def test_a_record_counts_in_each_window_of_its_definition_still_open(
    windows: Tumbling | Hopping, timestamp: int, lag: int
) -> None:
    fixed, store = fixed_windows(windows)
    stream_time = timestamp + lag
    store.advance(stream_time - 1)
    late = fixed.add("k", None, timestamp, stream_time)
    open_starts = [w.start for w in windows.windows_for(timestamp) if stream_time < windows.close_time(w)]
    assert [start for start, _ in store.fetch("k", 0, 10**6)] == open_starts
    if open_starts:
        assert late is None
    else:
        last = windows.windows_for(timestamp)[-1]
        closed_at = windows.close_time(last)
        assert late == f"window [{last.start}, {last.end}), the last that holds it, closed at {closed_at}"


@settings(max_examples=200, deadline=None)
@given(windows=definitions(), steps=st.lists(st.integers(0, 40), min_size=1, max_size=30))
def test_windows_close_once_each_when_the_stream_time_reaches_their_close_time(
    windows: Tumbling | Hopping, steps: list[int]
) -> None:
    """Each window is emitted once, by start then key, at the first stream time at or after its close
    time, and is gone from the store from then on."""
    fixed, store = fixed_windows(windows)
    stream_time, closed = -1, []
    for step in steps:
        timestamp = stream_time + step if stream_time >= 0 else step
        new_time = max(stream_time, timestamp)
        for key in ("b", "a"):
            fixed.add(key, None, timestamp, new_time)
        if new_time > stream_time:
            results = fixed.close(stream_time, new_time)
            assert results == sorted(results, key=lambda result: (result.start, result.key))
            for result in results:
                assert stream_time < windows.close_time(Window(result.start, result.end)) <= new_time
                assert store.get(result.key, result.start) is None
            closed.extend(results)
            store.advance(new_time)
            stream_time = new_time
    assert len(set(closed)) == len(closed)
    assert all(isinstance(result, WindowResult) and result.end - result.start == windows.size_ms for result in closed)


def test_windows_close_again_after_an_abort_took_the_stream_time_and_their_closing_back() -> None:
    tumbling = Tumbling(60_000)
    raw = BufferedKeyValueStore(MemoryBackend(), BytesSerde(), BytesSerde(), name="w", changelog=True)
    store = WindowView(raw, tumbling.retention_ms)
    fixed = FixedWindows(tumbling, Count(), store, True)

    def record(key: str, timestamp: int) -> list[tuple[str, int, int]]:
        """What the Aggregate processor does with a record: add it, then close what the stream time passed."""
        previous = store.stream_time
        stream_time = max(previous, timestamp)
        fixed.add(key, None, timestamp, stream_time)
        closed = fixed.close(previous, stream_time) if stream_time > previous else []
        store.advance(timestamp)
        return [(result.key, result.start, result.aggregate) for result in closed]

    assert record("a", 1_000) == record("a", 2_000) == []
    store.write_stream_time()
    raw.flush(1)  # committed: window 0 holds a twice, the stream time is 2,000
    assert record("b", 30_000) == []
    assert record("b", 60_005) == [("a", 0, 2), ("b", 0, 1)]
    assert record("b", 60_010) == [], "a window closes once"
    raw.discard()  # the transaction aborted: its records come again, from the stream time it committed
    assert store.stream_time == 2_000
    assert record("b", 30_000) == []
    assert record("b", 60_005) == [("a", 0, 2), ("b", 0, 1)]
