"""Records shipped into Kafka from elsewhere, each batch with the position it reaches, in one Kafka
transaction: what a source (the outbox, the table follower) needs to ship each row exactly once.

The position goes to a compacted topic of one partition, keyed by the source's name, in the same
transaction as the batch's records, so that both become visible together or not at all. The
transactional id is fixed per source: a shipper that starts fences any other still running with it
and aborts what that one left open; only then is the position read back, so no transaction left
open can still commit behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import InvalidProducerEpoch, KafkaError, ProducerFenced

from runtime.config import AppConfig
from runtime.counters import Counters
from runtime.kafka.committed_end import HeldBack, high_watermark
from runtime.kafka.connection import Clients, start_with_retries
from runtime.kafka.outputs import HeaderList, Outputs
from runtime.kafka.record_limits import Limits
from runtime.kafka.topics import InternalTopic, ensure_internal_topics

log = logging.getLogger(__name__)

Shipped = tuple[str, bytes | None, bytes | None, HeaderList, int | None]  # topic, key, value, headers, timestamp


@dataclass(frozen=True)
class ShippingSetup:
    """What a shipper writes with: `app` gives the transaction timeout and how internal topics are created, and
    `partition_counts` names the topics it may write to (a worker's sources share one; a replay job has its own)."""

    app: AppConfig
    clients: Clients
    partition_counts: Mapping[str, int]
    counters: Counters
    limits: Limits


class Shipper:
    def __init__(self, name: str, position_topic: str, transactional_id: str, setup: ShippingSetup):
        self.name = name
        self.position_topic = position_topic
        self.position: str | None = None  # the last one shipped
        self._transactional_id = transactional_id
        self._clients = setup.clients
        self._counts = {**setup.partition_counts, position_topic: 1}
        self._counters = setup.counters
        self._limits = setup.limits
        self._internal_topics = setup.app.internal_topics
        self._timeout_ms = setup.app.transaction_timeout_ms
        self._producer: AIOKafkaProducer  # each start its own: a producer once stopped does not start again
        self._outputs: Outputs

    def knows(self, topic: str) -> bool:
        return topic in self._counts

    async def start(self) -> None:
        """Create the position topic if needed, fence the source's other shippers, read the position back:
        whichever process starts it, it goes on exactly where the last one to commit stopped."""
        await self._create_position_topic()
        self._producer = self._clients.producer(
            transactional_id=self._transactional_id,
            client_id=self._transactional_id,
            transaction_timeout_ms=self._timeout_ms,
        )
        self._outputs = Outputs(self._producer, self._counts, self._counters, self._limits)
        try:
            await start_with_retries(f"{self.name}'s producer", self._clients.bootstrap_servers, self._producer.start)
            self.position = await self._read_position()
        except BaseException:  # cancelled too: the singleton moved to another process while it started
            await asyncio.shield(self._producer.stop())
            raise

    async def stop(self) -> None:
        await self._producer.stop()

    async def ship(self, records: Sequence[Shipped], position: str) -> bool:
        """The records and the position after them, in one transaction; False when Kafka refused it (it was
        aborted: ship them again). Being fenced raises."""
        await self._producer.begin_transaction()
        try:
            for topic, key, value, headers, timestamp_ms in records:
                self._outputs.append(topic, key, value, headers, timestamp_ms=timestamp_ms)
            self._outputs.append(self.position_topic, self.name.encode(), position.encode(), partition=0)
            await self._outputs.wait_acked()
            await self._producer.commit_transaction()
        except (ProducerFenced, InvalidProducerEpoch):
            self._outputs.discard()
            raise
        except KafkaError as error:
            log.warning(
                "%s: shipping %d records failed (%r); aborted, to be shipped again", self.name, len(records), error
            )
            self._outputs.discard()
            with contextlib.suppress(KafkaError):
                await self._producer.abort_transaction()
            return False
        self.position = position
        return True

    async def _read_position(self) -> str | None:
        """The last position committed: read to the topic's high watermark, not to its last stable offset,
        which another source's transaction left open holds back before this source's latest commits."""
        client_id = f"{self._transactional_id}-position"
        tp = TopicPartition(self.position_topic, 0)
        end = await high_watermark(self._clients, tp, client_id)
        consumer = self._clients.consumer(group_id=None, client_id=client_id)
        await start_with_retries(f"{self.name}'s position reader", self._clients.bootstrap_servers, consumer.start)
        try:
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            last: bytes | None = None
            held_back = HeldBack(tp, f"{self.name}'s position reader")
            while (position := await consumer.position(tp)) < end:
                held_back.still_waiting(position, end)
                for record in (await consumer.getmany(tp, timeout_ms=500)).get(tp, []):
                    if record.key == self.name.encode():
                        last = record.value
        finally:
            await consumer.stop()
        return None if last is None else last.decode()

    async def _create_position_topic(self) -> None:
        admin = self._clients.admin()
        await start_with_retries("admin client", self._clients.bootstrap_servers, admin.start)
        try:
            await ensure_internal_topics(
                admin, self._internal_topics, [InternalTopic(self.position_topic, compacted=True)]
            )
        finally:
            await admin.close()
