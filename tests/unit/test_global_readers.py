"""Bootstrap readers: how partitions are shared among them, and a reader that fails."""

from __future__ import annotations

import pytest
from aiokafka import TopicPartition

from runtime.global_readers import ReaderFailed, ReaderJob, ReaderProcess, StoreSettings, plan

pytestmark = pytest.mark.anyio


def tps(topic: str, count: int) -> list[TopicPartition]:
    return [TopicPartition(topic, partition) for partition in range(count)]


def test_partitions_are_shared_by_backlog_and_partitions_with_nothing_to_read_are_left_out() -> None:
    a0, a1, a2, a3, a4 = tps("a", 5)
    ranges = {a0: (0, 100), a1: (50, 90), a2: (0, 60), a3: (10, 10), a4: (0, 20)}
    assert plan(ranges, 2) == [[a0, a4], [a2, a1]]
    assert plan(ranges, 8) == [[a0], [a2], [a1], [a4]]


def test_each_topic_gets_its_own_readers() -> None:
    (a0, a1), (b0,) = tps("a", 2), tps("b", 1)
    assert plan({a0: (0, 5), b0: (0, 9), a1: (0, 7)}, 1) == [[a1, a0], [b0]]
    assert plan({a0: (5, 5), b0: (9, 9)}, 4) == []


async def test_a_reader_that_ends_early_says_so() -> None:
    job = ReaderJob({"no_such_option": 1}, "table", {0: (0, 10)}, [StoreSettings("str", "json", None, {})])
    reader = await ReaderProcess.start(job)
    try:
        with pytest.raises(ReaderFailed, match=r"the reader of table \[0\] exited with 1"):
            async for _ in reader.batches():
                pass
    finally:
        await reader.stop()
