"""TxnOffsetCommit v3 and OffsetFetch v7 as Kafka's request schemas lay them out, in aiokafka's protocol types."""

from __future__ import annotations

from io import BytesIO

import pytest
from aiokafka import TopicPartition
from aiokafka.protocol.types import Int16, Int32, Int64, UnsignedVarInt32

from runtime.errors import TaskLost
from runtime.kafka.aiokafka_internals import GroupGeneration, TransactionIdentity
from runtime.kafka.stable_offsets import OFFSET_FETCH, OffsetFetchRequest
from runtime.kafka.transactional_offsets import (
    GROUP_FENCING_VERSION,
    TXN_OFFSET_COMMIT,
    GroupMembershipLost,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponseV3,
)

TRANSACTION = TransactionIdentity("app-worker-1", producer_id=7, producer_epoch=3)
GROUP = GroupGeneration("app", generation_id=12, member_id="member-a", group_instance_id=None)
OFFSETS = {TopicPartition("in", 1): 40, TopicPartition("in", 0): 30}


def compact(text: str | None) -> bytes:
    """A flexible version's string: its length plus one as a varint (0 for null), then its bytes."""
    length: bytes = UnsignedVarInt32.encode(0 if text is None else len(text) + 1)
    return length + (text or "").encode()


def partition(index: int, offset: int) -> bytes:
    """A partition's offset, without a leader epoch or metadata, and no tagged field."""
    encoded: bytes = Int32.encode(index) + Int64.encode(offset) + Int32.encode(-1)
    return encoded + compact("") + b"\0"


def test_a_broker_taking_v3_gets_v3_with_the_members_generation() -> None:
    built = TxnOffsetCommitRequest(TRANSACTION, GROUP, OFFSETS).prepare({TXN_OFFSET_COMMIT: (0, 5)})
    assert built.API_VERSION == GROUP_FENCING_VERSION
    assert built.FLEXIBLE_VERSION  # the request header carries tagged fields from v3 on
    expected = (
        compact("app-worker-1")
        + compact("app")
        + Int64.encode(7)
        + Int16.encode(3)
        + Int32.encode(12)
        + compact("member-a")
        + compact(None)  # no group instance id: a dynamic member
        + UnsignedVarInt32.encode(2)  # one topic
        + compact("in")
        + UnsignedVarInt32.encode(3)  # two partitions, in order
        + partition(0, 30)
        + partition(1, 40)
        + b"\0"
        + b"\0"
    )
    assert built.encode() == expected


def test_a_static_member_is_named_by_its_instance_id() -> None:
    static = GroupGeneration("app", 4, "member-b", "worker-2")
    built = TxnOffsetCommitRequest(TRANSACTION, static, OFFSETS).prepare({TXN_OFFSET_COMMIT: (0, 3)})
    assert compact("member-b") + compact("worker-2") in built.encode()


def test_a_broker_without_v3_is_refused_rather_than_sent_offsets_it_cannot_fence() -> None:
    with pytest.raises(NotImplementedError):
        TxnOffsetCommitRequest(TRANSACTION, GROUP, OFFSETS).prepare({TXN_OFFSET_COMMIT: (0, 2)})


def test_the_response_gives_each_partitions_error() -> None:
    encoded = (
        Int32.encode(0)
        + UnsignedVarInt32.encode(2)
        + compact("in")
        + UnsignedVarInt32.encode(3)
        + Int32.encode(0) + Int16.encode(0) + b"\0"
        + Int32.encode(1) + Int16.encode(22) + b"\0"
        + b"\0"
        + b"\0"
    )  # fmt: skip
    response = TxnOffsetCommitResponseV3.decode(BytesIO(encoded))
    assert [(name, [(p, code) for p, code, _ in partitions]) for name, partitions, _ in response.topics] == [
        ("in", [(0, 0), (1, 22)])
    ]


def test_a_generation_that_is_over_loses_the_tasks() -> None:
    assert issubclass(GroupMembershipLost, TaskLost)


def test_offsets_are_asked_for_stable_with_offset_fetch_v7() -> None:
    asked = [TopicPartition("in", 1), TopicPartition("in", 0)]
    built = OffsetFetchRequest("app", asked).prepare({OFFSET_FETCH: (1, 9)})
    assert built.API_VERSION == 7
    assert built.encode() == (
        compact("app") + UnsignedVarInt32.encode(2) + compact("in") + UnsignedVarInt32.encode(3)
        + Int32.encode(0) + Int32.encode(1) + b"\0" + b"\1" + b"\0"
    )  # fmt: skip
