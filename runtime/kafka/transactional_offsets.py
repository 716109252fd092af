"""A transaction's input offsets committed with the consumer group's generation (KIP-447).

aiokafka's `send_offsets_to_transaction` sends TxnOffsetCommit v0, which names the group but not the
member: the broker cannot tell a zombie's commit from its owner's, so the runtime fenced zombies by
giving every task its own transactional id. From v3 on, the request carries the member's generation,
member id and group instance id, and the group coordinator refuses it once the group has moved on
(ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID): a worker's one producer can then commit
every task's offsets, and a worker that lost its partitions in a rebalance cannot commit them.

These are aiokafka's protocol structures, the v3 ones defined here as Kafka's
TxnOffsetCommitRequest.json gives them, sent through the producer's own client: AddOffsetsToTxn to the
transaction coordinator (so that the end of the transaction reaches the group's offsets too), then
TxnOffsetCommit to the group coordinator.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Mapping
from typing import Any, TypeAlias

from aiokafka import AIOKafkaClient, AIOKafkaProducer, TopicPartition
from aiokafka.client import CoordinationType
from aiokafka.errors import KafkaError, ProducerFenced, for_code
from aiokafka.protocol.admin import ApiVersionRequest
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.transaction import AddOffsetsToTxnRequest
from aiokafka.protocol.types import (
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

from runtime.errors import TaskLost
from runtime.kafka.aiokafka_internals import (
    GroupGeneration,
    TransactionIdentity,
    group_generation,
    offsets_added_to_transaction,
    producer_client,
    transaction_identity,
)

__all__ = [
    "GroupGeneration",
    "GroupMembershipLost",
    "TxnOffsetCommitRequest",
    "commit_offsets_in_transaction",
    "group_generation",
    "supports_group_fencing",
]

log = logging.getLogger(__name__)

TXN_OFFSET_COMMIT = 28
"""TxnOffsetCommit's API key."""
GROUP_FENCING_VERSION = 3
"""The first TxnOffsetCommit version carrying the member's generation, member id and instance id (KIP-447)."""
NO_LEADER_EPOCH = -1

ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
FENCED_INSTANCE_ID = 82
INVALID_PRODUCER_EPOCH = 47
PRODUCER_FENCED = 90
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
GROUP_MOVED_ON = {ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID}
"""The group coordinator's answers to a member whose generation is over: another owns its partitions now."""
PRODUCER_MOVED_ON = {INVALID_PRODUCER_EPOCH, PRODUCER_FENCED}
TRY_AGAIN = {3, 7, 14, 15, 16, 51}
"""UNKNOWN_TOPIC_OR_PARTITION, REQUEST_TIMED_OUT, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
NOT_COORDINATOR (the coordinator is looked up again for each attempt), CONCURRENT_TRANSACTIONS."""
ATTEMPTS = 50
BACKOFF_S = 0.1
"""A coordinator that moves or loads is waited for up to about 5 s, then the commit fails (and is redone)."""


class GroupMembershipLost(TaskLost):
    """The group coordinator refused the offsets of a generation that is over: the worker's partitions
    belong to the group's next generation, and its open transaction must be aborted, not committed."""


class TxnOffsetCommitResponseV3(Response):  # type: ignore[misc]
    API_KEY = TXN_OFFSET_COMMIT
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                ("partitions", CompactArray(("partition_index", Int32), ("error_code", Int16), ("tags", TaggedFields))),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class TxnOffsetCommitRequestV3(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = TXN_OFFSET_COMMIT
    API_VERSION = 3
    RESPONSE_TYPE = TxnOffsetCommitResponseV3
    SCHEMA = Schema(
        ("transactional_id", CompactString("utf-8")),
        ("group_id", CompactString("utf-8")),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("generation_id", Int32),
        ("member_id", CompactString("utf-8")),
        ("group_instance_id", CompactString("utf-8")),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                (
                    "partitions",
                    CompactArray(
                        ("partition_index", Int32),
                        ("committed_offset", Int64),
                        ("committed_leader_epoch", Int32),
                        ("committed_metadata", CompactString("utf-8")),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


TxnOffsetCommitRequestStruct: TypeAlias = TxnOffsetCommitRequestV3


class TxnOffsetCommitRequest(Request[TxnOffsetCommitRequestStruct]):  # type: ignore[misc]
    """Built as the highest version both sides know; v3 is the only one here, as the earlier ones cannot
    fence by generation (`supports_group_fencing` tells whether the broker takes it)."""

    API_KEY = TXN_OFFSET_COMMIT

    def __init__(self, transaction: TransactionIdentity, group: GroupGeneration, offsets: Mapping[TopicPartition, int]):
        self._transaction = transaction
        self._group = group
        self._offsets = offsets

    def build(self, request_struct_class: type[TxnOffsetCommitRequestStruct]) -> TxnOffsetCommitRequestStruct:
        by_topic: defaultdict[str, list[tuple[int, int, int, str, dict[int, bytes]]]] = defaultdict(list)
        for tp, offset in sorted(self._offsets.items()):
            by_topic[tp.topic].append((tp.partition, offset, NO_LEADER_EPOCH, "", {}))
        transaction, group = self._transaction, self._group
        return request_struct_class(
            transaction.transactional_id,
            group.group_id,
            transaction.producer_id,
            transaction.producer_epoch,
            group.generation_id,
            group.member_id,
            group.group_instance_id,
            [(topic, partitions, {}) for topic, partitions in by_topic.items()],
            {},
        )


async def supports_group_fencing(client: AIOKafkaClient) -> bool:
    """Whether the broker takes TxnOffsetCommit v3 (Kafka 2.5 and later): asked once, of any broker, as
    a cluster's brokers run one version but for the span of a rolling upgrade."""
    node_id = client.get_random_node()
    if node_id is None:
        raise KafkaError("no broker is known to ask which TxnOffsetCommit versions it takes")
    response: Any = await client.send(node_id, ApiVersionRequest())
    versions = {api_key: (low, high) for api_key, low, high, *_ in response.api_versions}
    low, high = versions.get(TXN_OFFSET_COMMIT, (0, -1))
    return bool(low <= GROUP_FENCING_VERSION <= high)


async def commit_offsets_in_transaction(
    producer: AIOKafkaProducer, offsets: Mapping[TopicPartition, int], group: GroupGeneration
) -> None:
    """Add the group's offsets to the producer's open transaction, as of the member's generation: they are
    committed or aborted with it. Raises `ProducerFenced` when another producer took the transactional id,
    `GroupMembershipLost` when the group's generation moved on."""
    if not offsets:
        return
    if group.generation_id < 0:  # offsets sent without a generation would not be fenced
        raise GroupMembershipLost(f"the worker is not a member of group {group.group_id} now: its offsets wait")
    client = producer_client(producer)
    transaction = transaction_identity(producer)
    await _add_offsets_to_transaction(client, transaction, group.group_id)
    offsets_added_to_transaction(producer, group.group_id)
    await _commit_offsets(client, transaction, group, offsets)


async def _add_offsets_to_transaction(client: AIOKafkaClient, transaction: TransactionIdentity, group_id: str) -> None:
    request = AddOffsetsToTxnRequest(
        transactional_id=transaction.transactional_id,
        producer_id=transaction.producer_id,
        producer_epoch=transaction.producer_epoch,
        group_id=group_id,
    )
    for _ in range(ATTEMPTS):
        coordinator = await client.coordinator_lookup(CoordinationType.TRANSACTION, transaction.transactional_id)
        response: Any = await client.send(coordinator, request)
        code = response.error_code
        if code == 0:
            return
        _raise_unless_transient(
            code, f"adding group {group_id}'s offsets to {transaction.transactional_id}", group_id, transaction
        )
        await asyncio.sleep(BACKOFF_S)
    raise for_code(code)(f"adding group {group_id}'s offsets to the transaction: the coordinator kept answering so")


async def _commit_offsets(
    client: AIOKafkaClient,
    transaction: TransactionIdentity,
    group: GroupGeneration,
    offsets: Mapping[TopicPartition, int],
) -> None:
    pending = dict(offsets)
    for _ in range(ATTEMPTS):
        coordinator = await client.coordinator_lookup(CoordinationType.GROUP, group.group_id)
        response: Any = await client.send(coordinator, TxnOffsetCommitRequest(transaction, group, pending))
        codes = {
            TopicPartition(name, partition): code
            for name, partitions, _ in response.topics
            for partition, code, _ in partitions
        }
        for tp, code in codes.items():
            if code == 0:
                pending.pop(tp, None)
            else:
                doing = f"committing {tp} for group {group.group_id} in generation {group.generation_id}"
                _raise_unless_transient(code, doing, group.group_id, transaction, tp.topic)
        if not pending:
            return
        await asyncio.sleep(BACKOFF_S)
    raise KafkaError(f"committing offsets for group {group.group_id}: the coordinator kept answering {codes}")


def _raise_unless_transient(
    code: int, doing: str, group_id: str, transaction: TransactionIdentity, topic: str | None = None
) -> None:
    """An authorization error names what was refused, as runtime/kafka/authorization.py tells it."""
    if code in TRY_AGAIN:
        log.debug("%s: the coordinator answered %s; trying again", doing, for_code(code).__name__)
        return
    if code in PRODUCER_MOVED_ON:
        raise ProducerFenced()
    error = for_code(code)
    if code in GROUP_MOVED_ON:
        name = {FENCED_INSTANCE_ID: "FENCED_INSTANCE_ID"}.get(code, error.__name__)
        raise GroupMembershipLost(f"{doing}: the group has moved on ({name}); another worker owns the partitions")
    named = {
        TOPIC_AUTHORIZATION_FAILED: topic,
        GROUP_AUTHORIZATION_FAILED: group_id,
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED: transaction.transactional_id,
    }.get(code)
    raise error(named if named is not None else doing)
