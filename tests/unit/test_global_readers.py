"""Bootstrap readers: how partitions are shared among them, and a reader that fails."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from aiokafka import TopicPartition

from runtime.global_stores.readers import ReaderFailed, ReaderJob, ReaderProcess, StoreSettings, plan
from stores.kafka_security import KafkaSecurity

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


def test_a_reader_takes_records_as_aiokafka_fetched_them() -> None:
    """In a process of its own, as it changes aiokafka; an aiokafka that no longer has the method shows here."""
    code = textwrap.dedent("""
        from aiokafka import TopicPartition
        from aiokafka.consumer.fetcher import PartitionRecords
        from aiokafka.record.default_records import DefaultRecordBatchBuilder
        from aiokafka.record.memory_records import MemoryRecords
        from runtime.global_stores.changes import ChangeMaker
        from runtime.global_stores.readers import take_records_as_fetched

        take_records_as_fetched()
        batch = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1024)
        batch.append(0, 1000, b"T1", b'{"terminalId": "T1", "acquirerId": "A1", "isActive": true}', [("h", b"v")])
        (record,) = PartitionRecords(TopicPartition("t", 0), MemoryRecords(bytes(batch.build())), [], 0, None, None,
                                     True, 1)
        print(type(record).__name__, record.offset, record.timestamp, record.headers)
        updater = "examples.acquirers.terminals:ActiveTerminals"
        print(ChangeMaker.configured("str", "json", updater).changes("t", 0, [record]))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["DefaultRecord 0 1000 [('h', b'v')]", """([(b'T1', b'"A1"')], [])"""]


async def test_a_reader_that_ends_early_says_so() -> None:
    job = ReaderJob(
        {"no_such_option": 1}, "table", {0: (0, 10)}, [StoreSettings("str", "json", None, {})], 1_000, KafkaSecurity()
    )
    reader = await ReaderProcess.start(job)
    try:
        with pytest.raises(ReaderFailed, match=r"the reader of table \[0\] exited with 1"):
            async for _ in reader.batches():
                pass
    finally:
        await reader.stop()
