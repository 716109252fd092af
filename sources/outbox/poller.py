"""The outbox poller: an outbox table's rows shipped to Kafka in id order, each exactly once.

A service writes its business rows and an outbox row in one database transaction; the poller reads
outbox rows after the last id it shipped, in id order, a batch at a time, and sends each to its topic
in one Kafka transaction together with the batch's last id, written to the outbox's position topic
(compacted, keyed by the outbox's name). So the records and the position that covers them become
visible together or not at all. The poller's transactional id is fixed: one that starts fences any
other still running and aborts what that one left open, then reads the position back and goes on
exactly after it.

Ids are handed out when a row is written but become visible when its transaction commits, so a long
transaction can commit a row with a smaller id than rows already shipped, and a poller that moved
past it would never ship it (seed 002's problem). The settle window guards against it: a row is
shipped only once `settle_ms` have passed since it was written (`created_column`, by the database's
clock), by which time every transaction that could still commit a smaller id is expected to have
ended. docs/databases.md describes the alternative that needs no such bound: ordering by commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Mapping
from typing import Any

import asyncpg
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import NewTopic
from aiokafka.errors import KafkaError, ProducerFenced, TopicAlreadyExistsError

from runtime.config import AppConfig, ConfigError
from runtime.counters import Counters
from runtime.kafka.connection import Clients, start_with_retries
from runtime.kafka.outputs import Outputs
from runtime.kafka.record_limits import Limits
from sources.outbox.config import OutboxConfig

log = logging.getLogger(__name__)

MAX_PAUSE_S = 5.0
# What a database that went away raises (see processors/sinks/postgres.py), and Kafka's retriable trouble.
GONE = (OSError, asyncio.TimeoutError, asyncpg.InterfaceError, asyncpg.PostgresConnectionError,
        asyncpg.OperatorInterventionError, asyncpg.InternalClientError)  # fmt: skip


class OutboxPoller:
    def __init__(
        self,
        name: str,
        app: AppConfig,
        clients: Clients,
        partition_counts: Mapping[str, int],
        counters: Counters,
        limits: Limits,
    ):
        self.name = name
        self.spec: OutboxConfig = app.outboxes[name]
        self.position_topic = app.outbox_position_topic(name)
        self.shipped = 0
        self._app = app
        self._clients = clients
        self._counts = {**partition_counts, self.position_topic: 1}
        self._counters = counters
        self._limits = limits
        self._last: Any = None  # the last id shipped; None before the first
        self._text_ids = False

    async def run(self) -> None:
        """Ship rows as they settle, until cancelled (a transaction cut off is aborted by the next start)."""
        await self._create_position_topic()
        producer = self._clients.producer(
            transactional_id=f"{self._app.app_id}-outbox-{self.name}",
            transaction_timeout_ms=self._app.transaction_timeout_ms,
            client_id=f"{self._app.app_id}-outbox-{self.name}",
        )
        await start_with_retries(f"outbox {self.name}'s producer", self._clients.bootstrap_servers, producer.start)
        try:
            self._last = await self._position()
            outputs = Outputs(producer, self._counts, self._counters, self._limits)
            connection = await self._connect()
            log.info("outbox %s: shipping %s after id %r", self.name, self.spec.table, self._last)
            try:
                while True:
                    shipped, connection = await self._ship_batch(producer, outputs, connection)
                    if shipped < self.spec.batch_size:
                        await asyncio.sleep(self.spec.poll_interval_ms / 1000)
            finally:
                connection.terminate()
        finally:
            with contextlib.suppress(Exception):
                await asyncio.shield(producer.stop())

    async def _ship_batch(
        self, producer: AIOKafkaProducer, outputs: Outputs, connection: asyncpg.Connection
    ) -> tuple[int, asyncpg.Connection]:
        """One batch of settled rows and its last id in one Kafka transaction; how many were shipped."""
        pause = 0.1
        while True:
            try:
                if self.spec.delete_shipped and self._last is not None:
                    await connection.execute(self._delete_sql(), self._last)
                rows = await connection.fetch(*self._select())
                break
            except GONE as error:
                log.warning("outbox %s: the database is out of reach (%r); trying again in %.1fs", self.name, error,
                            pause)  # fmt: skip
                await asyncio.sleep(pause)
                pause = min(pause * 2, MAX_PAUSE_S)
                connection.terminate()
                with contextlib.suppress(*GONE):
                    connection = await self._connect()
        if not rows:
            return 0, connection
        await producer.begin_transaction()
        try:
            for row in rows:
                topic = self.spec.topic or row["topic"]
                if topic not in self._counts:
                    raise ConfigError(f"outboxes.{self.name}: row {row['id']!r} names topic '{topic}', which is not "
                                      "declared under topics")  # fmt: skip
                outputs.append(topic, _bytes(row["key"]), _bytes(row["value"]), _headers(row["headers"]))
            last = rows[-1]["id"]
            outputs.append(self.position_topic, self.name.encode(), str(last).encode(), partition=0)
            await outputs.wait_acked()
            await producer.commit_transaction()
        except ProducerFenced:
            raise
        except KafkaError as error:
            log.warning("outbox %s: shipping %d rows failed (%r); aborted, trying again", self.name, len(rows), error)
            outputs.discard()
            with contextlib.suppress(KafkaError):
                await producer.abort_transaction()
            return 0, connection
        self._last = last
        self.shipped += len(rows)
        return len(rows), connection

    def _select(self) -> tuple[Any, ...]:
        spec = self.spec
        columns = [f"{spec.id_column} AS id", f"{spec.value_column} AS value",
                   f"{spec.key_column} AS key" if spec.key_column else "NULL AS key",
                   f"{spec.headers_column} AS headers" if spec.headers_column else "NULL AS headers",
                   f"{spec.topic_column} AS topic" if spec.topic_column else "NULL AS topic"]  # fmt: skip
        after = f"{spec.id_column} > $3 AND " if self._last is not None else "$3::text IS NULL AND "
        settled = f"{spec.created_column} <= now() - make_interval(secs => $1)"
        sql = f"SELECT {', '.join(columns)} FROM {spec.table} WHERE {after}{settled} ORDER BY {spec.id_column} LIMIT $2"
        last = self._last if self._last is None or not self._text_ids else str(self._last)
        return sql, spec.settle_ms / 1000, spec.batch_size, last

    def _delete_sql(self) -> str:
        return f"DELETE FROM {self.spec.table} WHERE {self.spec.id_column} <= $1"

    async def _connect(self) -> asyncpg.Connection:
        dsn = self.spec.dsn or os.environ.get("DATABASE_URL")
        if not dsn:
            raise ConfigError(f"outboxes.{self.name}.dsn is not set and neither is DATABASE_URL")
        connection = await asyncpg.connect(dsn, timeout=10)
        schema, _, table = self.spec.table.rpartition(".")
        kind = await connection.fetchval(
            "SELECT data_type FROM information_schema.columns WHERE table_schema = coalesce($1, current_schema()) "
            "AND table_name = $2 AND column_name = $3",
            schema or None, table, self.spec.id_column,
        )  # fmt: skip
        if kind is None:
            raise ConfigError(f"outboxes.{self.name}: table '{self.spec.table}' has no column "
                              f"'{self.spec.id_column}' (id_column), or does not exist")  # fmt: skip
        self._text_ids = kind in ("text", "character varying", "character")
        return connection

    async def _position(self) -> Any:
        """The last id shipped, as the position topic holds it (read_committed, after fencing)."""
        consumer = self._clients.consumer(group_id=None, client_id=f"{self._app.app_id}-outbox-{self.name}-position")
        await start_with_retries("outbox position reader", self._clients.bootstrap_servers, consumer.start)
        try:
            tp = TopicPartition(self.position_topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            end = (await consumer.end_offsets([tp]))[tp]
            last: bytes | None = None
            while await consumer.position(tp) < end:
                for record in (await consumer.getmany(tp, timeout_ms=500)).get(tp, []):
                    if record.key == self.name.encode():
                        last = record.value
        finally:
            await consumer.stop()
        if last is None:
            return None
        text = last.decode()
        return int(text) if text.lstrip("-").isdigit() else text

    async def _create_position_topic(self) -> None:
        admin = self._clients.admin()
        await start_with_retries("admin client", self._clients.bootstrap_servers, admin.start)
        try:
            topic = NewTopic(self.position_topic, 1, 1, topic_configs={"cleanup.policy": "compact"})
            with contextlib.suppress(TopicAlreadyExistsError):
                response = await admin.create_topics([topic])
                for name, code, message in response.topic_errors:
                    if code not in (0, 36):  # 36: it exists
                        raise ConfigError(f"outbox position topic {name} could not be created: {message}")
        finally:
            await admin.close()


def _bytes(found: Any) -> bytes | None:
    if found is None or isinstance(found, bytes):
        return found
    return str(found).encode()


def _headers(found: Any) -> list[tuple[str, bytes]]:
    if found is None:
        return []
    headers = json.loads(found) if isinstance(found, str) else found
    return [(str(name), str(value).encode()) for name, value in headers.items()]
