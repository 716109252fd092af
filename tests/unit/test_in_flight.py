"""Records in flight together (runtime/task/in_flight.py): order per key, the limit, drain, failures."""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.record import Record
from runtime.errors import StopAfterCommit
from runtime.task.in_flight import InFlight, InFlightRecordFailed
from runtime.telemetry.trace_headers import UNTRACED, TraceDecision


class Raw(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: bytes | None


def record_of(raw: Raw) -> Record:
    return Record(raw.topic, raw.partition, raw.offset, 0, raw.key, None, [])


class Recorder:
    """A processor's stand-in: sleeps a random while, and notes when each record starts and ends."""

    def __init__(self, seed: int = 0, max_sleep_s: float = 0.003):
        self.random = random.Random(seed)
        self.max_sleep_s = max_sleep_s
        self.running = 0
        self.most_running = 0
        self.finished: list[Raw] = []
        self.running_keys: set[bytes | None] = set()
        self.overlapped_own_key = False
        self.fail_at: dict[int, Exception] = {}

    async def run(self, raw: Any, record: Record, decision: TraceDecision, stream_time: int) -> None:
        if raw.key in self.running_keys:
            self.overlapped_own_key = True
        self.running_keys.add(raw.key)
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await asyncio.sleep(self.random.random() * self.max_sleep_s)
            failure = self.fail_at.get(raw.offset)
            if failure is not None:
                raise failure
            self.finished.append(raw)
        finally:
            self.running -= 1
            self.running_keys.discard(raw.key)


def in_flight(recorder: Recorder, limit: int, by_key: bool = True) -> InFlight:
    return InFlight(limit, by_key, recorder.run, lambda: None, lambda: None)


async def hand_over(flight: InFlight, records: list[Raw]) -> None:
    for raw in records:
        await flight.submit(raw, record_of(raw), UNTRACED, raw.offset)


def keyed(count: int, keys: int, seed: int = 0) -> list[Raw]:
    rng = random.Random(seed)
    return [Raw("in", 0, offset, str(rng.randrange(keys)).encode()) for offset in range(count)]


@settings(max_examples=25, deadline=None)
@given(
    count=st.integers(1, 120),
    keys=st.integers(1, 30),
    limit=st.integers(1, 20),
    seed=st.integers(0, 1_000),
)
def test_each_key_is_processed_in_offset_order_one_at_a_time_within_the_limit(
    count: int, keys: int, limit: int, seed: int
) -> None:
    async def scenario() -> None:
        recorder = Recorder(seed)
        flight = in_flight(recorder, limit)
        records = keyed(count, keys, seed)
        await hand_over(flight, records)
        assert await flight.drain()
        assert flight.count == 0
        by_key: dict[bytes | None, list[int]] = defaultdict(list)
        for raw in recorder.finished:
            by_key[raw.key].append(raw.offset)
        for offsets in by_key.values():
            assert offsets == sorted(offsets)
        assert sorted(raw.offset for raw in recorder.finished) == list(range(count))
        assert not recorder.overlapped_own_key
        assert recorder.most_running <= limit

    asyncio.run(scenario())


def test_different_keys_overlap_up_to_the_limit_and_a_waiting_record_takes_no_slot() -> None:
    async def scenario() -> None:
        recorder = Recorder(max_sleep_s=0.01)
        flight = in_flight(recorder, limit=8)
        # A hot key's 50 records wait behind each other; the other keys' records still go past them.
        records = [Raw("in", 0, offset, b"hot" if offset % 2 else str(offset).encode()) for offset in range(100)]
        await hand_over(flight, records)
        assert flight.count > 0
        assert await flight.drain()
        assert recorder.most_running == 8
        hot = [raw.offset for raw in recorder.finished if raw.key == b"hot"]
        assert hot == list(range(1, 100, 2))
        assert recorder.finished.index(Raw("in", 0, 98, b"98")) < recorder.finished.index(Raw("in", 0, 99, b"hot"))

    asyncio.run(scenario())


def test_without_order_records_of_one_key_overlap() -> None:
    async def scenario() -> None:
        recorder = Recorder(max_sleep_s=0.005)
        flight = in_flight(recorder, limit=10, by_key=False)
        await hand_over(flight, [Raw("in", 0, offset, b"same") for offset in range(50)])
        assert await flight.drain()
        assert recorder.overlapped_own_key
        assert sorted(raw.offset for raw in recorder.finished) == list(range(50))

    asyncio.run(scenario())


def test_the_oldest_unfinished_record_is_the_lowest_handed_over() -> None:
    async def scenario() -> None:
        release = asyncio.Event()

        async def slow_first(raw: Any, record: Record, decision: TraceDecision, stream_time: int) -> None:
            if raw.offset == 0:
                await release.wait()

        flight = InFlight(4, True, slow_first, lambda: None, lambda: None)
        assert flight.oldest_age_s() == 0.0
        await hand_over(flight, keyed(1, 1))
        await asyncio.sleep(0.05)
        await hand_over(flight, [Raw("in", 0, 1, b"other")])
        await asyncio.sleep(0)
        assert flight.count == 1  # the second finished; the first still holds its key
        assert flight.oldest_age_s() >= 0.05
        assert not await flight.drain(timeout_s=0.05)
        release.set()
        assert await flight.drain(timeout_s=1)
        assert flight.oldest_age_s() == 0.0

    asyncio.run(scenario())


def test_a_record_failing_under_fail_is_raised_as_a_stop_without_commit() -> None:
    async def scenario() -> None:
        recorder = Recorder()
        recorder.fail_at[5] = StopAfterCommit("processing failed in processor 'p' for record in[0]@5")
        woken = []
        flight = InFlight(4, True, recorder.run, lambda: None, lambda: woken.append(True))
        with pytest.raises(InFlightRecordFailed, match=r"in\[0\]@5") as raised:
            await hand_over(flight, keyed(200, 10))
            await flight.drain()
        assert woken == [True]
        assert isinstance(raised.value.__cause__, StopAfterCommit)
        flight.abandon()

    asyncio.run(scenario())


def test_abandoned_records_leave_nothing_counted_and_new_ones_run() -> None:
    async def scenario() -> None:
        started = asyncio.Event()
        finished: list[int] = []

        async def forever_then_quick(raw: Any, record: Record, decision: TraceDecision, stream_time: int) -> None:
            if raw.offset < 3:
                started.set()
                await asyncio.sleep(3600)
            finished.append(raw.offset)

        flight = InFlight(3, True, forever_then_quick, lambda: None, lambda: None)
        await hand_over(flight, [Raw("in", 0, offset, str(offset).encode()) for offset in range(3)])
        await started.wait()
        flight.abandon()
        assert flight.count == 0 and await flight.drain(timeout_s=0.1)
        await hand_over(flight, [Raw("in", 0, offset, str(offset).encode()) for offset in range(3, 6)])
        assert await flight.drain(timeout_s=1)
        assert finished == [3, 4, 5]

    asyncio.run(scenario())


def test_finishing_records_report_each_one_for_the_queue_bound() -> None:
    async def scenario() -> None:
        finishes = []
        flight = InFlight(5, True, Recorder().run, lambda: finishes.append(flight.count), lambda: None)
        await hand_over(flight, keyed(30, 3))
        assert await flight.drain()
        assert len(finishes) == 30 and finishes[-1] == 0

    asyncio.run(scenario())
