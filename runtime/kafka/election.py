"""One process of all an app runs, on any number of machines, runs each of its singletons (an outbox's
poller, a table follower), elected through Kafka itself.

Each singleton has a consumer group of its own, whose members all subscribe to one topic of one
partition: the member the group gives partition 0 runs the singleton. Kafka's group protocol gives a
partition to one member at a time, and a member gives it up only once its revocation has returned; the
singleton is stopped there (its transactional producer with it), so the next owner starts it only after
this one has stopped. A process that dies keeps the partition until its session times out (the group's
`session_timeout_ms`, small so that a standby takes over within seconds). A process that stalls past
its session and comes back believing it still owns the partition (a zombie) is fenced by the
transactional id the singleton has in every process: the new owner's `init_transactions` bumps its
epoch, the zombie's next transaction is refused, and the zombie stands by until the group assigns it
the partition again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Protocol

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import InvalidProducerEpoch, ProducerFenced

from runtime.config import InternalTopicsConfig
from runtime.kafka.connection import Clients, start_with_retries
from runtime.kafka.topics import InternalTopic, ensure_internal_topics

log = logging.getLogger(__name__)

FENCED = (ProducerFenced, InvalidProducerEpoch)
POLL_MS = 1000
"""How often the election's consumer is polled: it must be, or it leaves its group after
`max_poll_interval_ms`; a singleton's failure is raised at the next poll."""


class Singleton(Protocol):
    async def run(self) -> None:
        """Run until cancelled; the object runs again when it is elected again."""


class Election(ConsumerRebalanceListener):  # type: ignore[misc]
    """Runs `singleton` while this process owns partition 0 of `topic` in `group`."""

    def __init__(
        self,
        what: str,
        singleton: Singleton,
        clients: Clients,
        topic: InternalTopic,
        internal_topics: InternalTopicsConfig,
        group: str,
        session_timeout_ms: int,
    ):
        self.what = what
        self._singleton = singleton
        self._clients = clients
        self._topic, self._internal_topics = topic, internal_topics
        self._partition = TopicPartition(topic.name, 0)
        self._group = group
        self._session_timeout_ms = session_timeout_ms
        self._consumer: AIOKafkaConsumer | None = None
        self._running: asyncio.Task[None] | None = None
        self._closing = False
        self._failure: BaseException | None = None  # the singleton's, raised by `run`

    async def run(self) -> None:
        """Stand for election until cancelled; a failure of the singleton (other than being fenced) raises."""
        await self._create_topic()
        consumer = self._consumer = self._clients.consumer(
            group_id=self._group,
            client_id=self._group,
            session_timeout_ms=self._session_timeout_ms,
            heartbeat_interval_ms=self._session_timeout_ms // 3,
            group_instance_id=None,  # a static member leaves no group when it stops: a standby would wait a session
        )
        await start_with_retries(f"{self.what}'s election", self._clients.bootstrap_servers, consumer.start)
        try:
            consumer.subscribe([self._partition.topic], listener=self)
            while True:
                await consumer.getmany(timeout_ms=POLL_MS)
                self._raise_failure()
        finally:
            self._closing = True
            await asyncio.shield(self._stop())
            await consumer.stop()  # leaves the group: a standby is elected at once

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        if self._closing or self._consumer is None:
            return
        if self._partition not in set(assigned):
            log.info("%s: another process runs it; this one stands by", self.what)
            return
        self._consumer.pause(self._partition)  # its records are never read: no fetches
        log.info("%s: this process runs it now (elected in group %s)", self.what, self._group)
        self._running = asyncio.create_task(self._singleton.run(), name=self.what)

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self._stop()

    async def _stop(self) -> None:
        """Stop the singleton, if it runs here, and wait until it has: only then may the partition move."""
        running, self._running = self._running, None
        if running is None:
            return
        running.cancel()
        await asyncio.wait([running])
        if not self._ended(running):
            log.info("%s: stopped here, to be run by whichever process the group elects", self.what)

    def _raise_failure(self) -> None:
        running = self._running
        if running is not None and running.done():
            self._running = None
            self._ended(running)
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def _ended(self, running: asyncio.Task[None]) -> bool:
        """Whether the singleton ended by itself: fenced, which a standby shrugs off, or failed."""
        error = None if running.cancelled() else running.exception()
        if isinstance(error, FENCED):
            log.warning("%s: fenced by another process, which runs it now; this one stands by", self.what)
        elif error is not None:
            self._failure = error
        return error is not None

    async def _create_topic(self) -> None:
        admin = self._clients.admin()
        await start_with_retries("admin client", self._clients.bootstrap_servers, admin.start)
        try:
            await ensure_internal_topics(admin, self._internal_topics, [self._topic])
        finally:
            await admin.close()
