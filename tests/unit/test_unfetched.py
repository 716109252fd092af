"""Whether Kafka holds records of a partition the consumer has not handed over, read from a real
aiokafka consumer's partition state (no broker: the state is set as its fetcher would set it)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from runtime.worker.unfetched import Unfetched

pytestmark = pytest.mark.anyio

TP = TopicPartition("in", 0)


@pytest.fixture
async def consumer() -> AsyncIterator[AIOKafkaConsumer]:
    consumer = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:1")  # never connected
    yield consumer
    await consumer.stop()


async def test_records_below_the_high_watermark_are_unfetched_until_handed_over(consumer: AIOKafkaConsumer) -> None:
    unfetched = Unfetched(consumer, None)
    assert not unfetched(TP)  # not assigned: nothing to wait for
    consumer.assign([TP])
    assert unfetched(TP)  # neither the position nor the end is known yet

    state = consumer._subscription.subscription.assignment.state_value(TP)
    state.reset_to(5)  # as the consumer finds its committed offset
    assert unfetched(TP)  # no fetch response yet: the end is unknown
    state.highwater = 10
    assert unfetched(TP)
    state.consumed_to(10)  # getmany() handed over everything up to the end
    assert not unfetched(TP)
    state.highwater = 12  # new records (or an open transaction's)
    assert unfetched(TP)
    assert not unfetched(TopicPartition("in", 1))


async def test_nothing_past_a_bounded_runs_end_is_waited_for(consumer: AIOKafkaConsumer) -> None:
    consumer.assign([TP])
    state = consumer._subscription.subscription.assignment.state_value(TP)
    state.reset_to(5)
    state.highwater = 10

    assert not Unfetched(consumer, {TP: 5})(TP)
    assert Unfetched(consumer, {TP: 6})(TP)
