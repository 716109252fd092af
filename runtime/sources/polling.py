"""What an outbox and a table follower share: a database table polled a batch at a time, each batch shipped
with the position it reaches (runtime/sources/shipper.py), until cancelled. Cancelling is safe at any point: a
Kafka transaction cut off is aborted when the source starts again, and it goes on from its position."""

from __future__ import annotations

import asyncio
import logging
import os
from abc import ABC, abstractmethod
from typing import Protocol

import asyncpg

from runtime.config import ConfigError
from runtime.sources.database import Database
from runtime.sources.shipper import Shipper, ShippingSetup

log = logging.getLogger(__name__)


class PolledTable(Protocol):
    """What the YAML says of any polled table: where its database is, and how much to read how often."""

    @property
    def dsn(self) -> str | None: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def poll_interval_ms(self) -> int: ...


class PollingSource(ABC):
    """`run` ships batches while there are; between them, it waits `poll_interval_ms`."""

    def __init__(
        self,
        name: str,
        section: str,  # the YAML's: "outboxes", "table_followers"
        position_topic: str,  # <app_id>-<kind>-<name>-position, the shipper's transactional id without "-position"
        table: PolledTable,
        setup: ShippingSetup,
    ):
        self.name = name
        found = table.dsn or os.environ.get("DATABASE_URL")
        if not found:
            raise ConfigError(f"{section}.{name}.dsn is not set and neither is DATABASE_URL")
        self._what = f"{section}.{name}"
        self._batch_size, self._pause_s = table.batch_size, table.poll_interval_ms / 1000
        self._database = Database(found, self._what)
        self._shipper = Shipper(name, position_topic, position_topic.removesuffix("-position"), setup)

    async def run(self) -> None:
        await self._shipper.start()
        try:
            await self._database.run(self._prepare)
            log.info("%s: shipping from %s", self._what, self._shipper.position or "the start")
            while True:
                if await self._ship_batch() < self._batch_size:
                    await asyncio.sleep(self._pause_s)
        finally:
            self._database.close()
            await asyncio.shield(self._shipper.stop())

    @abstractmethod
    async def _prepare(self, connection: asyncpg.Connection) -> None:
        """Check the table once connected (a missing column is a ConfigError naming the YAML field)."""

    @abstractmethod
    async def _ship_batch(self) -> int:
        """Ship the next batch, if there is one; how many records it held (0: none, or Kafka refused it)."""
