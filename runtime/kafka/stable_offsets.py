"""A group's committed offsets once no transaction holding offsets for them is open (KIP-447's `require_stable`).

A task's new owner resumes from the offsets its previous owner committed. While that owner's transaction is
open or being ended, the group coordinator holds its offsets pending, and OffsetFetch before v7, which aiokafka
sends, answers the offsets committed before them: the new owner would redo records that transaction covers.
With one transactional id per task, `init_transactions` waits until that transaction ended; with one per
worker, nothing does, so the new owner asks with `require_stable`, and the coordinator answers
UNSTABLE_OFFSET_COMMIT until the transaction ended.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from aiokafka import AIOKafkaClient, TopicPartition
from aiokafka.client import CoordinationType
from aiokafka.errors import for_code
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Boolean, CompactArray, CompactString, Int16, Int32, Int64, Schema, TaggedFields

__all__ = ["Fetched", "OffsetFetchRequest", "fetch_committed", "stable_committed"]

log = logging.getLogger(__name__)

OFFSET_FETCH = 9
"""OffsetFetch's API key."""
UNSTABLE_OFFSET_COMMIT = 88
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
TRY_AGAIN = {UNSTABLE_OFFSET_COMMIT, 14, 15, 16}
"""A transaction holds offsets of the partition; COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
NOT_COORDINATOR (the coordinator is looked up again for each attempt)."""
BACKOFF_S = 0.1


class OffsetFetchResponseV7(Response):  # type: ignore[misc]
    API_KEY = OFFSET_FETCH
    API_VERSION = 7
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
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
                        ("metadata", CompactString("utf-8")),
                        ("error_code", Int16),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("error_code", Int16),
        ("tags", TaggedFields),
    )


class OffsetFetchRequestV7(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = OFFSET_FETCH
    API_VERSION = 7
    RESPONSE_TYPE = OffsetFetchResponseV7
    SCHEMA = Schema(
        ("group_id", CompactString("utf-8")),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")), ("partition_indexes", CompactArray(Int32)), ("tags", TaggedFields)
            ),
        ),
        ("require_stable", Boolean),
        ("tags", TaggedFields),
    )


OffsetFetchRequestStruct: TypeAlias = OffsetFetchRequestV7


class OffsetFetchRequest(Request[OffsetFetchRequestStruct]):  # type: ignore[misc]
    """v7 only: the first version with `require_stable` (Kafka 2.5, as TxnOffsetCommit v3), and the last one
    before v8 asks for several groups at once."""

    API_KEY = OFFSET_FETCH

    def __init__(self, group_id: str, partitions: Iterable[TopicPartition]):
        self._group_id = group_id
        self._partitions = partitions

    def build(self, request_struct_class: type[OffsetFetchRequestStruct]) -> OffsetFetchRequestStruct:
        by_topic: defaultdict[str, list[int]] = defaultdict(list)
        for tp in sorted(self._partitions):
            by_topic[tp.topic].append(tp.partition)
        return request_struct_class(
            self._group_id, [(topic, partitions, {}) for topic, partitions in by_topic.items()], True, {}
        )


@dataclass
class Fetched:
    """One answer of the group coordinator: the offsets it gave, and the partitions whose offsets an open
    transaction holds (or whose coordinator moved), to ask for again."""

    offsets: dict[TopicPartition, int | None] = field(default_factory=dict)
    unstable: set[TopicPartition] = field(default_factory=set)


async def stable_committed(
    client: AIOKafkaClient, group_id: str, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, int | None]:
    """Each partition's committed offset (None when the group committed none), once no open transaction holds
    one for it: asked again while one does, which lasts at most the transaction's timeout."""
    pending = set(partitions)
    offsets: dict[TopicPartition, int | None] = {}
    while pending:
        fetched = await fetch_committed(client, group_id, pending)
        offsets.update(fetched.offsets)
        pending = fetched.unstable
        if pending:
            log.debug("group %s: offsets of %d partitions wait for a transaction to end", group_id, len(pending))
            await asyncio.sleep(BACKOFF_S)
    return offsets


async def fetch_committed(client: AIOKafkaClient, group_id: str, partitions: Iterable[TopicPartition]) -> Fetched:
    """Ask the group's coordinator once, requiring stable offsets."""
    asked = set(partitions)
    coordinator = await client.coordinator_lookup(CoordinationType.GROUP, group_id)
    response: Any = await client.send(coordinator, OffsetFetchRequest(group_id, asked))
    if response.error_code in TRY_AGAIN:
        return Fetched(unstable=asked)
    if response.error_code != 0:
        refused = response.error_code == GROUP_AUTHORIZATION_FAILED  # named as runtime/kafka/authorization.py tells it
        raise for_code(response.error_code)(group_id if refused else f"fetching group {group_id}'s committed offsets")
    fetched = Fetched()
    for name, answered, _ in response.topics:
        for partition, offset, _, _, code, _ in answered:
            tp = TopicPartition(name, partition)
            if code in TRY_AGAIN:
                fetched.unstable.add(tp)
            elif code != 0:
                refused = code == TOPIC_AUTHORIZATION_FAILED
                raise for_code(code)(tp.topic if refused else f"fetching group {group_id}'s committed offset of {tp}")
            else:
                fetched.offsets[tp] = offset if offset >= 0 else None
    return fetched
