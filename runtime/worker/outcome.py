"""Why a worker stops: it was asked to, or something failed; the first failure is the one reported."""

from __future__ import annotations

import asyncio
import logging

from runtime.errors import EngineError, StopAfterCommit
from stores import StoreError

log = logging.getLogger(__name__)


class Outcome:
    def __init__(self) -> None:
        self.failure: BaseException | None = None
        self._stop = asyncio.Event()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        """Stop taking records, finish those in flight, commit, close (safe from a signal handler)."""
        self._stop.set()

    def fail(self, error: BaseException, what: str = "the worker") -> None:
        """Record a failure and stop; later failures are logged only, as they usually follow from it."""
        if not isinstance(error, EngineError | StoreError):  # their messages say it all; others need a trace
            log.error("%s failed", what, exc_info=error)
        if self.failure is None:
            self.failure = error
            log.error("stopping: %s", error)
        self._stop.set()

    def commits_at_stop(self, transactional: bool) -> bool:
        """After a failed record, at-least-once commits the work before it; exactly-once aborts instead,
        as the failed record's store writes cannot be told apart from those before it. A broken output
        path commits nothing: it would claim outputs that may be lost."""
        if self.failure is None:
            return True
        return isinstance(self.failure, StopAfterCommit) and not transactional
