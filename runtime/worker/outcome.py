"""Why a worker stops: it was asked to, or something failed; the first failure is the one reported."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from runtime.errors import EngineError, StopAbandoningCommit, StopAfterCommit
from runtime.kafka.authorization import Authorization
from runtime.worker.stop_deadline import UNWIND_S
from stores import StoreError

log = logging.getLogger(__name__)


class Outcome:
    """`authorization` tells a refused permission as the ACL to grant, whichever part of the worker met it."""

    def __init__(self, authorization: Authorization | None = None) -> None:
        self._authorization = authorization
        self.failure: BaseException | None = None
        self._stop = asyncio.Event()
        self._abandon = asyncio.Event()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        """Stop taking records, finish those in flight, commit, close (safe from a signal handler)."""
        self._stop.set()

    async def stopped(self) -> None:
        """Returns once the worker is asked to stop, or fails."""
        await self._stop.wait()

    def fail(self, error: BaseException, what: str = "the worker") -> None:
        """Record a failure and stop; later failures are logged only, as they usually follow from it."""
        if self._authorization is not None:
            error = self._authorization.translated(error)
        if not isinstance(error, EngineError | StoreError):  # their messages say it all; others need a trace
            log.error("%s failed", what, exc_info=error)
        if self.failure is None:
            self.failure = error
            log.error("stopping: %s", error)
        if isinstance(error, StopAbandoningCommit):
            self._abandon.set()
        self._stop.set()

    def commits_at_stop(self, transactional: bool) -> bool:
        """After a failed record, at-least-once commits the work before it; exactly-once aborts instead,
        as the failed record's store writes cannot be told apart from those before it. A broken output
        path commits nothing: it would claim outputs that may be lost."""
        if self.failure is None:
            return True
        return isinstance(self.failure, StopAfterCommit) and not transactional

    @property
    def abandoning(self) -> bool:
        """A failure abandons what waits on Kafka: a commit, a batch, a release would never end."""
        return self._abandon.is_set()

    async def unless_abandoned(self, work: Coroutine[Any, Any, None]) -> None:
        """Await `work`, or cancel it when a failure abandons what waits on Kafka."""
        if self._abandon.is_set():
            work.close()
            return
        running = asyncio.ensure_future(work)
        abandoned = asyncio.ensure_future(self._abandon.wait())
        try:
            await asyncio.wait([running, abandoned], return_when=asyncio.FIRST_COMPLETED)
        finally:
            abandoned.cancel()
            if not running.done():
                running.cancel()
                await asyncio.wait([running], timeout=UNWIND_S)  # its `finally` runs, what it raises is read
        if running.done() and not running.cancelled():
            running.result()  # its exception, as if it had been awaited
