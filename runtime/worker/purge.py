"""Repartition topics are the app's own scratch: once the group committed past a record of one, nobody
reads it again, so it is deleted (the broker's DeleteRecords, below the committed offset), as Kafka Streams
purges its repartition topics, rather than kept for the topic's whole retention."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.errors import KafkaError

log = logging.getLogger(__name__)

PURGE_EVERY_S = 30.0  # Kafka Streams' repartition.purge.interval.ms


class RepartitionPurge:
    def __init__(self, consumer: AIOKafkaConsumer, new_admin: Callable[[], AIOKafkaAdminClient], topics: set[str]):
        self._consumer = consumer
        self._new_admin = new_admin
        self._topics = topics
        self._purged: dict[TopicPartition, int] = {}  # the offset below which each partition was purged

    async def periodically(self, every_s: float = PURGE_EVERY_S) -> None:
        """Until cancelled."""
        while True:
            await asyncio.sleep(every_s)
            await self.once()

    async def once(self) -> None:
        """Delete what the group committed past, in the partitions of this worker; a failure is logged, and
        the next purge tries again (the records are only kept longer)."""
        below: dict[TopicPartition, int] = {}
        for tp in self._consumer.assignment():
            if tp.topic in self._topics:
                committed = await self._consumer.committed(tp)
                if committed is not None and committed > self._purged.get(tp, 0):
                    below[tp] = committed
        if not below:
            return
        admin = self._new_admin()
        try:
            await admin.start()
            await admin.delete_records({tp: RecordsToDelete(offset) for tp, offset in below.items()})
            self._purged.update(below)
            log.debug("purged repartition partitions below %s", below)
        except KafkaError as error:
            log.warning("could not purge the repartition topics (%r); trying again later", error)
        finally:
            await admin.close()
