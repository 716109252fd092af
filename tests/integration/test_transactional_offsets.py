"""Against a broker, a transaction's offsets carry the member's generation (KIP-447): once the group moved on,
the coordinator refuses a zombie's offsets, and its transaction commits none of them; and a new owner asking for
stable offsets is answered once the transaction holding them ended."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from runtime.kafka.aiokafka_internals import GroupGeneration, consumer_client, group_generation, producer_client
from runtime.kafka.stable_offsets import fetch_committed, stable_committed
from runtime.kafka.transactional_offsets import (
    GroupMembershipLost,
    commit_offsets_in_transaction,
    supports_group_fencing,
)
from tests.conftest import TopicNamer
from tests.support.kafka_helpers import create_topic

pytestmark = pytest.mark.anyio


async def test_a_zombies_offsets_are_refused_by_generation(kafka_bootstrap: str, topic_name: TopicNamer) -> None:
    topic, group = topic_name("in"), topic_name("group")
    await create_topic(kafka_bootstrap, topic, partitions=2)
    tp = TopicPartition(topic, 0)
    members = [
        AIOKafkaConsumer(
            topic,
            bootstrap_servers=kafka_bootstrap,
            group_id=group,
            heartbeat_interval_ms=200,
            enable_auto_commit=False,
        )
        for _ in range(2)
    ]
    zombie, successor = members
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=topic_name("txn"))
    await producer.start()
    await zombie.start()
    try:
        assert await supports_group_fencing(producer_client(producer))
        await joined(zombie)
        stale = group_generation(zombie)
        await committed_in_transaction(producer, {tp: 1}, stale)
        assert await committed(zombie, tp, 1) == 1

        await successor.start()
        await asyncio.gather(joined(successor), joined(zombie, after=stale.generation_id))
        await producer.begin_transaction()
        with pytest.raises(GroupMembershipLost, match="IllegalGeneration"):
            await commit_offsets_in_transaction(producer, {tp: 2}, stale)
        await producer.abort_transaction()
        assert await committed(successor, tp, 1) == 1

        await committed_in_transaction(producer, {tp: 3}, group_generation(zombie))  # its generation now
        assert await committed(successor, tp, 3) == 3
    finally:
        for member in members:
            await member.stop()
        await producer.stop()


async def joined(consumer: AIOKafkaConsumer, after: int = -1) -> None:
    """Until the consumer has partitions in a generation later than `after`."""
    while not consumer.assignment() or group_generation(consumer).generation_id <= after:
        await consumer.getmany(timeout_ms=100)


async def committed_in_transaction(
    producer: AIOKafkaProducer, offsets: dict[TopicPartition, int], generation: GroupGeneration
) -> None:
    await producer.begin_transaction()
    await commit_offsets_in_transaction(producer, offsets, generation)
    await producer.commit_transaction()


async def committed(consumer: AIOKafkaConsumer, tp: TopicPartition, expected: int) -> int | None:
    """The group's offset once it is `expected`, or as it is after 10 s: a transaction's offsets reach the group
    with its commit marker, which the coordinator writes after `commit_transaction` returns."""
    for _ in range(100):
        offset: int | None = await consumer.committed(tp)
        if offset == expected:
            break
        await asyncio.sleep(0.1)
    return offset


async def test_a_static_members_zombie_is_refused_by_its_instance_id(
    kafka_bootstrap: str, topic_name: TopicNamer
) -> None:
    """A worker restarted with the same group instance id takes its partitions over without a rebalance, in
    the same generation: the one it replaced is told apart by its member id."""
    topic, group = topic_name("in"), topic_name("group")
    await create_topic(kafka_bootstrap, topic)
    tp = TopicPartition(topic, 0)
    members = [
        AIOKafkaConsumer(
            topic,
            bootstrap_servers=kafka_bootstrap,
            group_id=group,
            group_instance_id="worker-1",
            enable_auto_commit=False,
        )
        for _ in range(2)
    ]
    zombie, successor = members
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=topic_name("txn"))
    await producer.start()
    await zombie.start()
    try:
        await joined(zombie)
        stale = group_generation(zombie)
        await successor.start()
        await joined(successor)
        assert group_generation(successor).member_id != stale.member_id
        await producer.begin_transaction()
        with pytest.raises(GroupMembershipLost, match="FENCED_INSTANCE_ID"):
            await commit_offsets_in_transaction(producer, {tp: 2}, stale)
        await producer.abort_transaction()
        await committed_in_transaction(producer, {tp: 3}, group_generation(successor))
        assert await committed(successor, tp, 3) == 3
    finally:
        for member in members:
            await member.stop()
        await producer.stop()


async def test_stable_offsets_wait_for_the_transaction_holding_them(
    kafka_bootstrap: str, topic_name: TopicNamer
) -> None:
    topic, group = topic_name("in"), topic_name("group")
    await create_topic(kafka_bootstrap, topic)
    tp = TopicPartition(topic, 0)
    member = AIOKafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, group_id=group, enable_auto_commit=False)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=topic_name("txn"))
    await producer.start()
    await member.start()
    try:
        await joined(member)
        await committed_in_transaction(producer, {tp: 1}, group_generation(member))
        assert await stable_committed(consumer_client(member), group, [tp]) == {tp: 1}

        await producer.begin_transaction()
        await commit_offsets_in_transaction(producer, {tp: 5}, group_generation(member))
        assert await member.committed(tp) == 1  # what aiokafka's OffsetFetch answers meanwhile
        assert (await fetch_committed(consumer_client(member), group, [tp])).unstable == {tp}
        asked = asyncio.ensure_future(stable_committed(consumer_client(member), group, [tp]))
        await producer.commit_transaction()
        assert await asked == {tp: 5}
    finally:
        await member.stop()
        await producer.stop()
