"""Every part of aiokafka the runtime uses that aiokafka does not offer publicly, each as read from aiokafka 0.14.0.

aiokafka has no public way to do what these are for: hand over a fetch's records a record batch at a
time, without building a ConsumerRecord for each (runtime/kafka/fetched.py); keep a record the client
cannot parse from failing the rest of its fetch (runtime/kafka/unparseable.py); read a partition's
position without awaiting (runtime/worker/unfetched.py); fill a batch through the compiled builder
inside it (runtime/kafka/outputs.py); learn a topic's partitions before subscribing to it
(runtime/worker/worker.py); read a batch the client cannot parse (runtime/kafka/record_batches.py); commit a
transaction's offsets with the consumer's generation (runtime/kafka/transactional_offsets.py); rebalance
cooperatively (runtime/kafka/cooperative_coordinator.py): the two steps of a rebalance taken over from the
group coordinator aiokafka builds, and the fetch positions of the partitions a worker keeps carried over.
So every access to an aiokafka attribute whose name starts with `_`, and every import from a module
aiokafka does not document, is here: the one module to check when aiokafka is upgraded. `RELIED_ON`
names what they need, and tests/unit/test_aiokafka_internals.py fails when the installed aiokafka
lacks any of it; pyproject pins aiokafka below 0.15 for them.

No function here is called per record: what a record's path needs is bound once, per batch or per fetch.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaClient, AIOKafkaConsumer, AIOKafkaProducer, TopicPartition, cluster
from aiokafka.codec import (
    gzip_decode,
    gzip_encode,
    lz4_decode,
    lz4_encode,
    snappy_decode,
    snappy_encode,
    zstd_decode,
    zstd_encode,
)
from aiokafka.consumer import consumer as consumer_module
from aiokafka.consumer import fetcher
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.consumer.subscription_state import Assignment, Subscription, SubscriptionState, TopicPartitionState
from aiokafka.coordinator import protocol as group_protocol
from aiokafka.producer.message_accumulator import BatchBuilder, MessageAccumulator
from aiokafka.producer.transaction_manager import TransactionManager
from aiokafka.protocol.group import JoinGroupRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c, decode_varint, encode_varint

ClusterMetadata = cluster.ClusterMetadata
"""0.14.0 `aiokafka.cluster.ClusterMetadata`: what a partition assignor's `assign` is given (the store queries'
assignor, runtime/kafka/query_routing.py, carries each owner's address in the group's user data)."""
ConsumerProtocolMemberMetadata = group_protocol.ConsumerProtocolMemberMetadata
"""0.14.0 `aiokafka.coordinator.protocol`: a member's subscription, with its user data, as an assignor gives it."""
ConsumerProtocolMemberAssignment = group_protocol.ConsumerProtocolMemberAssignment
"""0.14.0 `aiokafka.coordinator.protocol`: a member's assignment, with its user data, as an assignor gives it."""

PartitionRecords = fetcher.PartitionRecords
"""0.14.0 `aiokafka.consumer.fetcher.PartitionRecords`: a partition's fetched records, subclassed to take them."""
FetchResult = fetcher.FetchResult
"""0.14.0 `aiokafka.consumer.fetcher.FetchResult`: what the fetcher keeps of a partition's fetch: its records."""
_READ_COMMITTED = fetcher.READ_COMMITTED
"""0.14.0 `aiokafka.consumer.fetcher.READ_COMMITTED`: the isolation level that skips aborted transactions."""

RELIED_ON: tuple[tuple[type, str], ...] = (
    (AIOKafkaConsumer, "_client"),
    (AIOKafkaConsumer, "_fetcher"),
    (AIOKafkaConsumer, "_subscription"),
    (fetcher.Fetcher, "_records"),
    (SubscriptionState, "subscription"),
    (Subscription, "assignment"),
    (Assignment, "state_value"),
    (TopicPartitionState, "has_valid_position"),
    (TopicPartitionState, "position"),
    (TopicPartitionState, "highwater"),
    (FetchResult, "_topic_partition"),
    (FetchResult, "_partition_records"),
    (FetchResult, "_update_position"),
    (FetchResult, "check_assignment"),
    (FetchResult, "has_more"),
    (FetchResult, "getall"),
    (PartitionRecords, "_tp"),
    (PartitionRecords, "_records"),
    (PartitionRecords, "_aborted_transactions"),
    (PartitionRecords, "next_fetch_offset"),
    (PartitionRecords, "_key_deserializer"),
    (PartitionRecords, "_value_deserializer"),
    (PartitionRecords, "_check_crcs"),
    (PartitionRecords, "_isolation_level"),
    (PartitionRecords, "_records_iterator"),
    (PartitionRecords, "_aborted_producers"),
    (PartitionRecords, "_consume_aborted_up_to"),
    (PartitionRecords, "_contains_abort_marker"),
    (PartitionRecords, "_consumer_record"),
    (BatchBuilder, "_builder"),
    (BatchBuilder, "_relative_offset"),
    (DefaultRecordBatchBuilder, "append"),
    (DefaultRecordBatchBuilder, "estimate_size_in_bytes"),
    (AIOKafkaConsumer, "_coordinator"),
    (GroupCoordinator, "group_id"),
    (GroupCoordinator, "generation"),
    (GroupCoordinator, "member_id"),
    (GroupCoordinator, "_group_instance_id"),
    (GroupCoordinator, "_send_req"),
    (JoinGroupRequest, "_group_protocols"),
    (GroupCoordinator, "_on_join_prepare"),
    (GroupCoordinator, "_on_join_complete"),
    (GroupCoordinator, "_subscription"),
    (GroupCoordinator, "_assignors"),
    (GroupCoordinator, "_group_subscription"),
    (GroupCoordinator, "_lookup_assignor"),
    (GroupCoordinator, "_stop_commit_offsets_refresh_task"),
    (GroupCoordinator, "start_commit_offsets_refresh_task"),
    (GroupCoordinator, "request_rejoin"),
    (SubscriptionState, "assign_from_subscribed"),
    (SubscriptionState, "listener"),
    (Assignment, "tps"),
    (Assignment, "_tp_state"),
    (TopicPartitionState, "_assignment"),
    (AIOKafkaProducer, "client"),
    (AIOKafkaProducer, "_message_accumulator"),
    (MessageAccumulator, "_batch_size"),
    (MessageAccumulator, "_compression_type"),
    (AIOKafkaProducer, "_txn_manager"),
    (TransactionManager, "transactional_id"),
    (TransactionManager, "producer_id"),
    (TransactionManager, "producer_epoch"),
    (TransactionManager, "consumer_group_added"),
    (TransactionManager, "wait_for_transaction_end"),
)
"""The attributes of aiokafka's classes that the runtime uses and aiokafka does not document: those named with
`_`, reached only here, and the members of the undocumented classes these hand over."""
PARTITION_RECORDS_PARAMETERS = (
    "tp",
    "records",
    "aborted_transactions",
    "fetch_offset",
    "key_deserializer",
    "value_deserializer",
    "check_crcs",
    "isolation_level",
)
"""0.14.0 `PartitionRecords.__init__`'s parameters: the order `partition_records_arguments` gives its fields in."""

_RecordSize = Callable[[bytes | None, bytes | None, Any], int]
estimate_record_size: _RecordSize = DefaultRecordBatchBuilder.estimate_size_in_bytes
"""0.14.0 `DefaultRecordBatchBuilder.estimate_size_in_bytes`: the size of a batch of this record alone, as `send`
checks it (the producer's own bound)."""
crc32c: Callable[[bytes], int] = calc_crc32c
"""0.14.0 `aiokafka.record.util.calc_crc32c`: a v2 batch's checksum, to check a batch the client cannot parse."""
write_varint: Callable[[int, Callable[[int], object]], int] = encode_varint
"""0.14.0 `aiokafka.record.util.encode_varint`: a zigzag varint, as a record's lengths and deltas are written, a byte
at a time through the callable given."""
read_varint: Callable[[bytes, int], tuple[int, int]] = decode_varint
"""0.14.0 `aiokafka.record.util.decode_varint`: the zigzag varint at a position, and the position after it."""
decompress_gzip: Callable[[bytes], bytes] = gzip_decode
"""0.14.0 `aiokafka.codec.gzip_decode`: a gzip batch's records, to read a batch the client cannot parse."""
decompress_snappy: Callable[[bytes], bytes] = snappy_decode
"""0.14.0 `aiokafka.codec.snappy_decode`: a snappy batch's records, likewise."""
decompress_lz4: Callable[[bytes], bytes] = lz4_decode
"""0.14.0 `aiokafka.codec.lz4_decode`: an lz4 batch's records, likewise."""
decompress_zstd: Callable[[bytes], bytes] = zstd_decode
"""0.14.0 `aiokafka.codec.zstd_decode`: a zstd batch's records, likewise."""
COMPRESSORS: dict[int, Callable[[bytes], bytes]] = {1: gzip_encode, 2: snappy_encode, 3: lz4_encode, 4: zstd_encode}
"""0.14.0 `aiokafka.codec`'s encoders, by the codec a batch's attributes name (as `BatchSettings.codec` gives it):
how a batch the runtime encodes compresses its records, as aiokafka's builder does."""


def consumer_client(consumer: AIOKafkaConsumer) -> AIOKafkaClient:
    """0.14.0 `AIOKafkaConsumer._client`: the consumer's own client, to add topics to its metadata or fetch a batch."""
    client: AIOKafkaClient = consumer._client
    return client


def fetch_results(consumer: AIOKafkaConsumer) -> OrderedDict[TopicPartition, Any]:
    """0.14.0 `AIOKafkaConsumer._fetcher._records`: the started consumer's fetch results, by partition."""
    results: OrderedDict[TopicPartition, Any] = consumer._fetcher._records
    return results


def set_fetch_results(consumer: AIOKafkaConsumer, results: OrderedDict[TopicPartition, Any]) -> None:
    """0.14.0 `AIOKafkaConsumer._fetcher._records`: replaced, to see each result the fetcher stores in it."""
    consumer._fetcher._records = results


def position_and_highwater(consumer: AIOKafkaConsumer, tp: TopicPartition) -> tuple[int | None, int | None] | None:
    """0.14.0 `AIOKafkaConsumer._subscription`: an assigned partition's position and high watermark (each None while
    not known), without awaiting; None when the partition is not assigned."""
    subscription = consumer._subscription.subscription
    assignment = subscription.assignment if subscription is not None else None
    state = assignment.state_value(tp) if assignment is not None else None
    if state is None:
        return None
    position = int(state.position) if state.has_valid_position else None
    return position, None if state.highwater is None else int(state.highwater)


def result_partition(result: Any) -> TopicPartition:
    """0.14.0 `FetchResult._topic_partition`: the partition a fetch result is of."""
    tp: TopicPartition = result._topic_partition
    return tp


def partition_records(result: Any) -> Any:
    """0.14.0 `FetchResult._partition_records`: a fetch result's records not handed over yet, None once none is left."""
    return result._partition_records


def set_partition_records(result: Any, records: Any) -> None:
    """0.14.0 `FetchResult._partition_records`: set to records of the runtime's kind, or to None once all are taken."""
    result._partition_records = records


def update_position(result: Any) -> None:
    """0.14.0 `FetchResult._update_position`: moves the consumer's position to the records' `next_fetch_offset`."""
    result._update_position()


def partition_records_arguments(records: Any) -> tuple[Any, ...]:
    """0.14.0 `PartitionRecords`' fields: the arguments it was built with (`PARTITION_RECORDS_PARAMETERS`), to build
    records of the runtime's kind in its place."""
    return (
        records._tp,
        records._records,
        records._aborted_transactions,
        records.next_fetch_offset,
        records._key_deserializer,
        records._value_deserializer,
        records._check_crcs,
        records._isolation_level,
    )


def drop_record_generator(records: Any) -> None:
    """0.14.0 `PartitionRecords._records_iterator`: dropped unstarted, as it holds the records in a reference cycle."""
    records._records_iterator = None


def topic_partition(records: Any) -> TopicPartition:
    """0.14.0 `PartitionRecords._tp`: the partition the records are of."""
    tp: TopicPartition = records._tp
    return tp


def record_set(records: Any) -> Any:
    """0.14.0 `PartitionRecords._records`: the fetched bytes as aiokafka's record set, walked a batch at a time."""
    return records._records


def checks_crcs(records: Any) -> bool:
    """0.14.0 `PartitionRecords._check_crcs`: whether each batch's checksum is checked (the consumer's `check_crcs`)."""
    checks: bool = records._check_crcs
    return checks


def reads_committed(records: Any) -> bool:
    """0.14.0 `PartitionRecords._isolation_level`: whether the batches of aborted transactions are skipped."""
    committed: bool = records._isolation_level == _READ_COMMITTED
    return committed


def consume_aborted_up_to(records: Any, offset: int) -> None:
    """0.14.0 `PartitionRecords._consume_aborted_up_to`: the producers of the transactions aborted that began
    at or before `offset` join `aborted_producers`."""
    records._consume_aborted_up_to(offset)


def contains_abort_marker(records: Any, batch: Any) -> bool:
    """0.14.0 `PartitionRecords._contains_abort_marker`: whether a control batch ends its transaction by aborting it."""
    aborts: bool = records._contains_abort_marker(batch)
    return aborts


def aborted_producers(records: Any) -> set[int]:
    """0.14.0 `PartitionRecords._aborted_producers`: the producers whose transaction open here was aborted."""
    producers: set[int] = records._aborted_producers
    return producers


def replace_consumer_record(build: Callable[[Any, TopicPartition, Any], Any]) -> None:
    """0.14.0 `PartitionRecords._consumer_record`: replaced in the whole process, so records are built by `build`."""
    PartitionRecords._consumer_record = build


def batch_append(batch: BatchBuilder) -> Callable[..., Any]:
    """0.14.0 `BatchBuilder._builder`: the append of the compiled builder inside a batch, which takes the record's
    offset in the batch and returns None when it is full, without `BatchBuilder.append`'s two Python frames."""
    append: Callable[..., Any] = batch._builder.append
    return append


@dataclass(frozen=True)
class BatchSettings:
    """What a producer builds its batches with, so that a batch the runtime encodes itself is built alike."""

    batch_size: int
    codec: int
    """The compression codec of the batch's attributes (0: none)."""
    transactional: bool


def batch_settings(producer: AIOKafkaProducer | Any) -> BatchSettings | None:
    """0.14.0 `AIOKafkaProducer._message_accumulator`: what `create_batch` builds the producer's batches with, as
    `MessageAccumulator.create_builder` reads it; None for a producer that is not aiokafka's (the test kit's)."""
    if not isinstance(producer, AIOKafkaProducer):
        return None
    accumulator = producer._message_accumulator
    transaction = producer._txn_manager
    transactional = transaction is not None and transaction.transactional_id is not None
    return BatchSettings(accumulator._batch_size, accumulator._compression_type, transactional)


def set_record_count(batch: BatchBuilder, count: int) -> None:
    """0.14.0 `BatchBuilder._relative_offset`: the record count a batch is sent with (the idempotent producer's
    sequence numbers count by it), which `batch_append` leaves behind."""
    batch._relative_offset = count


def record_count(batch: BatchBuilder) -> int:
    """0.14.0 `BatchBuilder._relative_offset`: the record count a batch is sent with, as `set_record_count` set it."""
    count: int = batch._relative_offset
    return count


def transaction_error(producer: AIOKafkaProducer) -> BaseException | None:
    """0.14.0 `TransactionManager._transaction_waiter`: why the producer's transaction broke (the broker refused
    a partition of it), which `send_batch` hides behind "not in transaction"."""
    manager = producer._txn_manager
    waiter = manager.wait_for_transaction_end() if manager is not None else None
    if waiter is None or not waiter.done() or waiter.cancelled():
        return None
    error: BaseException | None = waiter.exception()
    return error


@dataclass(frozen=True)
class GroupGeneration:
    """What the group coordinator knows a member by, in the generation it joined: KIP-447's fencing of a zombie."""

    group_id: str
    generation_id: int
    """-1 while the consumer is not a member of a generation (before it joined, or after it was dropped)."""
    member_id: str
    group_instance_id: str | None


@dataclass(frozen=True)
class TransactionIdentity:
    """A transactional producer as the transaction coordinator knows it, once `start` initialized it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


def group_coordinator(consumer: AIOKafkaConsumer) -> GroupCoordinator | None:
    """0.14.0 `AIOKafkaConsumer._coordinator`: the consumer's group coordinator, None without a group."""
    coordinator = consumer._coordinator
    return coordinator if isinstance(coordinator, GroupCoordinator) else None


def group_generation(consumer: AIOKafkaConsumer) -> GroupGeneration:
    """0.14.0 `GroupCoordinator`'s `generation`, `member_id` and `_group_instance_id`: the consumer's membership
    now, which aiokafka's `send_offsets_to_transaction` does not send."""
    coordinator = group_coordinator(consumer)
    if coordinator is None:
        raise TypeError("the consumer has no group: its offsets cannot be committed in a transaction")
    return GroupGeneration(
        coordinator.group_id, coordinator.generation, coordinator.member_id, coordinator._group_instance_id
    )


def producer_client(producer: AIOKafkaProducer) -> AIOKafkaClient:
    """0.14.0 `AIOKafkaProducer.client`: the producer's own client, whose connections its transaction uses."""
    client: AIOKafkaClient = producer.client
    return client


def transaction_identity(producer: AIOKafkaProducer) -> TransactionIdentity:
    """0.14.0 `AIOKafkaProducer._txn_manager`: the started transactional producer's id and epoch."""
    manager = producer._txn_manager
    if manager is None or manager.transactional_id is None:
        raise TypeError("the producer is not transactional")
    return TransactionIdentity(manager.transactional_id, manager.producer_id, manager.producer_epoch)


def offsets_added_to_transaction(producer: AIOKafkaProducer, group_id: str) -> None:
    """0.14.0 `TransactionManager.consumer_group_added`: the group's offsets are part of the open transaction,
    so that its end is sent to the coordinator even when it wrote no record."""
    manager = producer._txn_manager
    if manager is None:
        raise TypeError("the producer is not transactional")
    manager.consumer_group_added(group_id)


NO_GENERATION = -1
"""0.14.0 `GroupCoordinator.generation` while the consumer is in no generation: never joined, or dropped."""


class RebalanceSteps(GroupCoordinator):  # type: ignore[misc]
    """0.14.0 `GroupCoordinator`, with the two steps of a rebalance under public names for a subclass to take
    over: `prepare_join` before the member joins (aiokafka's `_on_join_prepare`: revoke every partition) and
    `complete_join` once the group's leader assigned it partitions (`_on_join_complete`). As they are, they
    are aiokafka's own.

    It also joins once per rebalance whatever the number of protocols offered: 0.14.0's
    `CoordinatorGroupRebalance.perform_group_join` sends a JoinGroup after adding each assignor's protocol
    (its loop over them encloses the send), so a consumer offering two joins with the first alone, then
    again with both; the leader's second join starts another rebalance, and the group never settles.
    The first JoinGroup of a join carries every protocol, and the next ones of the same join are answered
    with its response, unsent."""

    _joined: tuple[list[tuple[str, bytes]], Any] | None = None
    """The protocols list of the last JoinGroup accepted, with the response; the next ones share the list."""

    async def _send_req(self, request: Any) -> Any:
        if not isinstance(request, JoinGroupRequest):
            return await GroupCoordinator._send_req(self, request)
        protocols = request._group_protocols
        if self._joined is not None and self._joined[0] is protocols:
            return self._joined[1]
        offered = dict(reversed(protocols))  # one per name, the first kept (a retry adds the next one again)
        topics = self._subscription.subscription.topics
        protocols[:] = [
            (assignor.name, offered.get(assignor.name) or assignor.metadata(topics).encode())
            for assignor in self._assignors
        ]
        response = await GroupCoordinator._send_req(self, request)
        if response.error_code == 0:
            self._joined = (protocols, response)
        return response

    async def _on_join_prepare(self, previous_assignment: Any) -> None:
        await self.prepare_join(previous_assignment)

    async def _on_join_complete(
        self, generation: int, member_id: str, protocol: str, member_assignment_bytes: bytes
    ) -> None:
        await self.complete_join(protocol, ConsumerProtocolMemberAssignment.decode(member_assignment_bytes))

    async def prepare_join(self, previous_assignment: Any) -> None:
        """`previous_assignment`: aiokafka's assignment of the generation before, None at the first join."""
        await revoke_all_before_join(self, previous_assignment)

    async def complete_join(self, protocol: str, assignment: Any) -> None:
        await GroupCoordinator._on_join_complete(self, self.generation, self.member_id, protocol, assignment.encode())


async def revoke_all_before_join(coordinator: GroupCoordinator, previous_assignment: Any) -> None:
    """0.14.0 `GroupCoordinator._on_join_prepare`: the eager protocol's step: every partition revoked, and
    no record handed over until the next assignment."""
    await GroupCoordinator._on_join_prepare(coordinator, previous_assignment)


def forget_group_subscription(coordinator: GroupCoordinator) -> None:
    """0.14.0 `GroupCoordinator._group_subscription`: the topics the group subscribed to, which the leader
    learns again at each join (aiokafka's `_on_join_prepare` forgets them as well)."""
    coordinator._group_subscription = None


def assignors(coordinator: GroupCoordinator) -> tuple[Any, ...]:
    """0.14.0 `GroupCoordinator._assignors`: the consumer's `partition_assignment_strategy`."""
    return tuple(coordinator._assignors)


def assignor_named(coordinator: GroupCoordinator, protocol: str) -> Any:
    """0.14.0 `GroupCoordinator._lookup_assignor`: the assignor of the protocol the group chose."""
    assignor = coordinator._lookup_assignor(protocol)
    if assignor is None:
        raise TypeError(f"the group chose protocol {protocol!r}, which this consumer did not offer")
    return assignor


def rebalance_listener(coordinator: GroupCoordinator) -> Any:
    """0.14.0 `GroupCoordinator._subscription`'s listener: what `subscribe` was given, None if nothing."""
    return coordinator._subscription.listener


def assigned_partitions(coordinator: GroupCoordinator) -> frozenset[TopicPartition]:
    """0.14.0 `GroupCoordinator._subscription`: the partitions of the consumer's assignment now."""
    return frozenset(coordinator._subscription.assigned_partitions())


def assign_keeping(
    coordinator: GroupCoordinator, partitions: frozenset[TopicPartition], kept: frozenset[TopicPartition]
) -> Any:
    """0.14.0 `SubscriptionState.assign_from_subscribed`, whose new `Assignment` starts every partition at its
    committed offset: the `kept` ones take their state over from the assignment before instead (their fetch
    position, pause and high watermark), in the same step, before the fetcher sees the new assignment.
    Records fetched for the old assignment and not handed over yet are dropped by the fetcher, and fetched
    again from the kept position. Returns the new assignment."""
    subscription = coordinator._subscription
    before = subscription.subscription.assignment if subscription.subscription is not None else None
    carried = {tp: before.state_value(tp) for tp in kept} if before is not None else {}
    subscription.assign_from_subscribed(set(partitions))
    after = subscription.subscription.assignment
    for tp, state in carried.items():
        if state is not None and tp in after.tps:
            state._assignment = after
            after._tp_state[tp] = state
    return after


async def refresh_committed_for(coordinator: GroupCoordinator, assignment: Any) -> None:
    """0.14.0 `GroupCoordinator._stop_commit_offsets_refresh_task`: the task that fetches committed offsets
    follows the new assignment, as aiokafka's `_on_join_complete` has it."""
    await coordinator._stop_commit_offsets_refresh_task()
    coordinator.start_commit_offsets_refresh_task(assignment)


def build_group_coordinators_as(coordinator_class: type[RebalanceSteps]) -> None:
    """0.14.0 `aiokafka.consumer.consumer.GroupCoordinator`: the class `AIOKafkaConsumer.start` builds for a
    consumer with a group, which it offers no way to choose. Replaced for the whole process: a subclass of
    `RebalanceSteps` that acts as aiokafka's own unless its group chose a protocol it knows better."""
    consumer_module.GroupCoordinator = coordinator_class
