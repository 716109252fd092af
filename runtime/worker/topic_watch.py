"""A topic deleted while the app runs stops the worker within seconds, naming the topic.

aiokafka does not fail when a topic it uses is deleted: the consumer fetches, the producer sends and the
offset commits retry for as long as the topic is gone, and a commit waiting on it never ends. So the
worker asks the broker itself: at once for a topic the client said is missing (runtime/kafka/missing_topics.py
folds what it says), and every `CHECK_S` for all of them, which also covers a changelog or a dead-letter
topic nothing has written since it went. One metadata request each time, never one per record.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from runtime.errors import StopAbandoningCommit
from runtime.kafka.connection import start_with_retries
from runtime.kafka.missing_topics import MISSING_TOPICS
from runtime.kafka.topics import UNKNOWN_TOPIC, named

SUSPECT_S = 0.5
"""How soon a topic the client said is missing is looked up."""
CHECK_S = 5.0
"""How often every topic is."""
CONFIRM_S = 2.0
"""How long a topic must stay missing before it counts as deleted: on a cluster, a broker may not know yet
of a topic another broker has just created, and answers as if it did not exist."""


class TopicDeleted(StopAbandoningCommit):
    """A topic the app uses is no longer in the cluster."""


class TopicWatch:
    def __init__(self, new_admin: Callable[[], AIOKafkaAdminClient], bootstrap: str, uses: Mapping[str, str]):
        """`uses`: the app's topics, each with what it is to the app."""
        self._new_admin = new_admin
        self._bootstrap = bootstrap
        self._uses = uses
        self._missing_since: dict[str, float] = {}

    async def run(self) -> None:
        """Until cancelled, or a topic is found deleted: `TopicDeleted`."""
        admin = self._new_admin()
        await start_with_retries("admin client", self._bootstrap, admin.start)
        try:
            waited = 0.0
            while True:
                await asyncio.sleep(SUSPECT_S)
                waited += SUSPECT_S
                topics = MISSING_TOPICS.suspects & self._uses.keys()
                if waited >= CHECK_S:
                    topics, waited = set(self._uses), 0.0
                if topics:
                    await self._check(admin, sorted(topics))
        finally:
            await admin.close()

    async def _check(self, admin: AIOKafkaAdminClient, topics: list[str]) -> None:
        try:
            described: list[dict[str, Any]] = await admin.describe_topics(topics)
        except KafkaError:
            return  # Kafka unreachable: told as an outage, and asked again next time
        missing = {entry["topic"] for entry in described if entry["error_code"] == UNKNOWN_TOPIC}
        for topic in set(topics) - missing:
            MISSING_TOPICS.present(topic)
            self._missing_since.pop(topic, None)
        now = time.monotonic()
        deleted = sorted(t for t in missing if now - self._missing_since.setdefault(t, now) >= CONFIRM_S)
        if deleted:
            folded = sum(MISSING_TOPICS.folded[topic] for topic in deleted)
            raise TopicDeleted(
                f"topic {named(deleted, self._uses)} was deleted while the app ran: stopping without committing "
                f"more ({folded} client messages about it not printed)"
            )
