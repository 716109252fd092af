"""The output path's bound on what records sent and not yet acknowledged hold: past it, `flush` waits for acks."""

from __future__ import annotations

import asyncio
from collections import namedtuple
from typing import Any

import pytest
from aiokafka.errors import MessageSizeTooLargeError
from aiokafka.producer.message_accumulator import BatchBuilder

from runtime.counters import Counters
from runtime.kafka import outputs as outputs_module
from runtime.kafka.outputs import Outputs, OutputsRefused

Acked = namedtuple("Acked", "offset")
VALUE = bytes(1000)
pytestmark = pytest.mark.anyio


class SlowBroker:
    """A producer whose sends the test acknowledges (or fails) itself, in order."""

    def __init__(self) -> None:
        self.sends: list[asyncio.Future[Any]] = []

    def create_batch(self) -> BatchBuilder:
        return BatchBuilder(16384, 0)

    async def send_batch(self, batch: BatchBuilder, topic: str, *, partition: int) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.sends.append(future)
        return future


def outputs_of(broker: SlowBroker) -> Outputs:
    return Outputs(broker, {"out": 4}, Counters())


def fill(outputs: Outputs, records: int) -> None:
    for n in range(records):
        outputs.append("out", f"key-{n}".encode(), VALUE, partition=n % 4)


async def test_flush_waits_for_acks_once_the_unacked_bytes_pass_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outputs_module, "HELD_CHANGE_BYTES", 0)  # a batch holds twice its bytes
    monkeypatch.setattr(outputs_module, "UNACKED_BYTES", 42_000)  # two batches of 10 KB
    broker = SlowBroker()
    outputs = outputs_of(broker)
    fill(outputs, 8)  # 4 batches of 2 records, about 2 KB each
    await outputs.flush()
    assert len(broker.sends) == 4
    fill(outputs, 40)  # 4 batches of 10 records, about 10 KB each: the first fits, the second does not
    flushing = asyncio.create_task(outputs.flush())
    await asyncio.sleep(0.01)
    assert not flushing.done() and len(broker.sends) == 5
    for future in broker.sends[:3]:
        future.set_result(Acked(0))
    await asyncio.sleep(0.01)
    assert not flushing.done() and len(broker.sends) == 5, "12 KB unacknowledged: no room for 10 KB more"
    broker.sends[3].set_result(Acked(0))
    await asyncio.sleep(0.01)
    assert not flushing.done() and len(broker.sends) == 6, "room for one more batch, not two"
    for n in (4, 5):
        broker.sends[n].set_result(Acked(0))
        await asyncio.sleep(0.01)
    await asyncio.wait_for(flushing, 1)
    assert len(broker.sends) == 8
    for future in broker.sends[6:]:
        future.set_result(Acked(0))
    await asyncio.wait_for(outputs.wait_acked(), 1)
    assert outputs._unacked_bytes == 0


async def test_a_failed_send_frees_its_room_and_is_reported_by_wait_acked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outputs_module, "HELD_CHANGE_BYTES", 0)
    monkeypatch.setattr(outputs_module, "UNACKED_BYTES", 24_000)
    broker = SlowBroker()
    outputs = outputs_of(broker)
    fill(outputs, 40)
    flushing = asyncio.create_task(outputs.flush())
    await asyncio.sleep(0.01)
    assert len(broker.sends) == 1
    broker.sends[0].set_exception(MessageSizeTooLargeError())
    await asyncio.sleep(0.01)
    assert len(broker.sends) == 2, "the failed send's room went to the next batch"
    for n in range(1, 4):
        broker.sends[n].set_result(Acked(0))
        await asyncio.sleep(0.01)
    await asyncio.wait_for(flushing, 1)
    with pytest.raises(OutputsRefused, match="MessageSizeTooLargeError"):
        await outputs.wait_acked()  # without an error policy to call, a refusal is raised


@pytest.mark.parametrize(
    ("source", "sent_at_once"),
    [(object(), 1), (None, 2)],
    ids=["from-an-input-about-53-KB-a-batch", "from-no-input-about-21-KB-a-batch"],
)
async def test_small_records_are_bounded_by_what_each_holds_not_by_their_bytes(
    monkeypatch: pytest.MonkeyPatch, source: object, sent_at_once: int
) -> None:
    monkeypatch.setattr(outputs_module, "UNACKED_BYTES", 60_000)
    broker = SlowBroker()
    outputs = outputs_of(broker)
    for n in range(400):  # 4 batches of 100 records of a few bytes: about 1 KB each by their bytes alone
        outputs.append("out", b"k", b"v", partition=n % 4, source=source)
    flushing = asyncio.create_task(outputs.flush())
    await asyncio.sleep(0.01)
    assert len(broker.sends) == sent_at_once, "what the records kept hold, not their bytes, fills the bound"
    for n in range(4):
        broker.sends[n].set_result(Acked(0))
        await asyncio.sleep(0.01)
    await asyncio.wait_for(flushing, 1)
    assert len(broker.sends) == 4
