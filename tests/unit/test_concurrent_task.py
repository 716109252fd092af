"""A task whose processor has concurrency, without a broker: order per key, commits and punctuations
that wait for the records in flight, the error policies while others are in flight, leaving.

Every test runs with telemetry off, traced, dropped and with metrics, as the task's other loops do.
"""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from processors.context import Context
from processors.processor import Processor
from processors.record import Record
from runtime.config import ErrorPolicy
from runtime.config.processors import ConcurrencyConfig
from runtime.task.commits import TaskCommit
from runtime.task.in_flight import InFlightRecordFailed
from runtime.telemetry import Telemetry
from tests.support.engine_fakes import (
    DEAD,
    IN,
    OUT,
    fake_outputs,
    make_services,
    make_task,
    running,
    sent,
    telemetry_variant,
    until_idle,
    value,
)

pytestmark = pytest.mark.anyio

TP = TopicPartition(IN, 0)
BY_KEY = ConcurrencyConfig(max_in_flight=16, order="key")  # type: ignore[arg-type]


@pytest.fixture(params=["off", "traced", "dropped", "metrics"])
def telemetry(request: pytest.FixtureRequest) -> Iterator[Telemetry]:
    telemetry = telemetry_variant(request.param)
    yield telemetry
    telemetry.shutdown()


def keyed(offsets: range, keys: int, seed: int = 1, **extra: Any) -> list[Any]:
    rng = random.Random(seed)
    keys_of = [f"k{rng.randrange(keys)}".encode() for _ in offsets]
    return [
        ConsumerRecord(IN, 0, offset, 1_000 + offset, 0, key, value(offset, **extra), None, 0, 0, [])
        for offset, key in zip(offsets, keys_of, strict=True)
    ]


class Enrich(Processor):
    """Awaits a random while (a lookup), then sends the record on; a value marked `fail` raises."""

    def __init__(self, seed: int = 0) -> None:
        self.random = random.Random(seed)
        self.in_flight = 0
        self.most_in_flight = 0
        self.gate: asyncio.Event | None = None  # when set, every record waits for it
        self.stream_times: dict[int, int] = {}  # offset -> ctx.stream_time as the record saw it

    async def process(self, record: Record, ctx: Context) -> None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.random.random() * 0.004)
            if self.gate is not None:
                await self.gate.wait()
            self.stream_times[record.offset] = ctx.stream_time
            ctx.send(OUT, {**record.value, "key": record.key}, key=record.key)
            if record.value.get("fail") == record.offset:
                raise ValueError(f"lookup failed for offset {record.offset}")
        finally:
            self.in_flight -= 1


async def test_records_overlap_and_each_keys_outputs_keep_its_input_order(telemetry: Telemetry) -> None:
    processor = Enrich()
    task = make_task(processor, make_services(telemetry), concurrency=BY_KEY)
    inputs = keyed(range(400), keys=25)
    async with running(task):
        for start in range(0, 400, 100):
            task.enqueue(TP, inputs[start : start + 100])
        await until_idle(task)
    outputs = sent(fake_outputs(task))
    assert sorted(output["n"] for output in outputs) == list(range(400))
    per_key: dict[str, list[int]] = defaultdict(list)
    for output in outputs:
        per_key[output["key"]].append(output["n"])
    assert all(offsets == sorted(offsets) for offsets in per_key.values())
    assert outputs != sorted(outputs, key=lambda output: output["n"])  # keys went past each other
    assert 1 < processor.most_in_flight <= 16
    # Each record's stream time is as of itself (the inputs' times grow), however long it waited behind its key.
    assert processor.stream_times == {offset: 1_000 + offset for offset in range(400)}
    assert task.next_offsets == {TP: 400}
    assert task.context.pending == []


async def test_a_commit_waits_until_nothing_is_in_flight(telemetry: Telemetry) -> None:
    processor = Enrich()
    processor.gate = asyncio.Event()
    task = make_task(processor, make_services(telemetry), concurrency=BY_KEY)
    task.enqueue(TP, keyed(range(10), keys=1_000_000, seed=3))  # ten different keys
    async with running(task):
        while task.in_flight is None or task.in_flight.count < 10 or processor.in_flight < 10:  # noqa: ASYNC110
            await asyncio.sleep(0.001)
        assert task.queued == 10  # in flight counts in the queue bound
        commit = asyncio.create_task(_prepare(task))
        await asyncio.sleep(0.05)
        assert not commit.done()
        processor.gate.set()
        task_commit = await commit
    assert task_commit == TaskCommit(task, {TP: 10})
    assert len(sent(fake_outputs(task))) == 10


async def _prepare(task: Any) -> TaskCommit | None:
    async with task.commit_turn():
        result: TaskCommit | None = await task.prepare_commit()
        return result


async def test_a_punctuation_runs_only_while_nothing_is_in_flight(telemetry: Telemetry) -> None:
    class Punctuating(Enrich):
        def init(self, ctx: Context) -> None:
            self.seen_in_flight: list[int] = []
            ctx.schedule(1, lambda: self.seen_in_flight.append(self.in_flight))

    processor = Punctuating()
    task = make_task(processor, make_services(telemetry), concurrency=BY_KEY)
    async with running(task):
        for start in range(0, 300, 30):
            task.enqueue(TP, keyed(range(start, start + 30), keys=50))
            await asyncio.sleep(0.003)
        await until_idle(task)
    assert processor.seen_in_flight and set(processor.seen_in_flight) == {0}
    assert len(sent(fake_outputs(task))) == 300


@pytest.mark.parametrize("policy", [ErrorPolicy.SKIP, ErrorPolicy.DEAD_LETTER])
async def test_a_failing_record_goes_to_the_policy_and_the_others_go_on(
    telemetry: Telemetry, policy: ErrorPolicy
) -> None:
    task = make_task(Enrich(), make_services(telemetry, policy), concurrency=BY_KEY)
    async with running(task):
        task.enqueue(TP, keyed(range(200), keys=20, fail=77))
        await until_idle(task)
    outputs = fake_outputs(task)
    assert sorted(output["n"] for output in sent(outputs)) == [n for n in range(200) if n != 77]
    assert len(sent(outputs, DEAD)) == (1 if policy is ErrorPolicy.DEAD_LETTER else 0)
    assert task._services.counters.processed == 199


async def test_a_failing_record_under_fail_stops_the_task_without_a_commit(telemetry: Telemetry) -> None:
    task = make_task(Enrich(), make_services(telemetry, ErrorPolicy.FAIL), concurrency=BY_KEY)
    task.enqueue(TP, keyed(range(200), keys=20, fail=77))
    with pytest.raises(InFlightRecordFailed, match=r"in\[0\]@77"):
        await asyncio.wait_for(task.run(), 5)  # the actor raises it by itself, within the 5 s
    await task.close()


async def test_a_leaving_task_waits_for_its_records_up_to_the_shutdown_timeout(telemetry: Telemetry) -> None:
    processor = Enrich()
    processor.gate = asyncio.Event()  # never opened: the records are stuck
    services = make_services(telemetry)
    services.shutdown_timeout_s = 0.2
    task = make_task(processor, services, concurrency=BY_KEY)
    async with running(task):
        task.enqueue(TP, keyed(range(5), keys=1_000_000))
        await asyncio.sleep(0.05)
    assert task.in_flight is not None and task.in_flight.count == 5
    assert await _prepare(task) is None  # abandoned after 0.2 s: nothing of it is committed
    assert task.in_flight.count == 0 and sent(fake_outputs(task)) == []
    await task.close()
