"""A source's connection to its database: made once the database answers, again after it went away; one that
refuses the connection stops the worker, naming the source and the cause."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg

from processors.sinks.postgres_connection import GONE, CannotConnect, connect
from runtime.errors import StopAfterCommit

log = logging.getLogger(__name__)

MAX_PAUSE_S = 5.0
T = TypeVar("T")


class Database:
    """One connection; `run` retries what it is given across the database going away and coming back."""

    def __init__(self, dsn: str, what: str):
        self.dsn = dsn
        self.what = what
        self.connection: asyncpg.Connection | None = None

    async def run(self, work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        pause = 0.1
        while True:
            try:
                if self.connection is None:
                    self.connection = await connect(self.dsn)
                return await work(self.connection)
            except CannotConnect as refused:
                raise StopAfterCommit(f"{self.what}: {refused}") from None
            except GONE as error:
                log.warning("%s: the database is out of reach (%r); trying again in %.1fs", self.what, error, pause)
                self.close()
                await asyncio.sleep(pause)
                pause = min(pause * 2, MAX_PAUSE_S)

    def close(self) -> None:
        if self.connection is not None:
            with contextlib.suppress(Exception):
                self.connection.terminate()
            self.connection = None
