"""Many records of one task in flight at once, in offset order per key.

A processor with `concurrency: {max_in_flight: N, order: key}` has up to N of its task's records
processing at once, so a processor that awaits a database or an HTTP call waits on many at once. A record
whose key already has one in flight waits behind it; records of other keys go past it. Each key with
records in flight is one chain: an asyncio task that processes that key's records one after another, in
offset order, and ends when none is left. A slot is held by a chain, not by a record, so a record waiting
behind its key takes none. With `order: none` every record is a chain of its own.

What a commit covers stays exact because a commit first waits until nothing is in flight (`drain`):
then every record handed over is finished, its outputs released and its store changes made, and the
offsets after the last record handed over cover exactly that, in the same transaction under exactly-once.
The price is the tail of the work in flight at each commit (docs/concurrency.md measures it). The other
way, holding each finished record's outputs and store changes until every record below it has finished,
keeps the slots full across a commit but needs every store write held back per record; the drain needs
nothing of the stores, the outputs or the committers. Punctuations drain first too, so they still never
run while a record is processed.

A record that fails goes to the error policy in its chain, and the others go on. Under `fail` the chain
keeps the failure for the task to raise (`raise_failure`) as `InFlightRecordFailed`: records after the
failed one may have finished already, so nothing since the last commit is committed, and all of it is
processed again. A failure of the engine itself (an output refused past its offset, a registry out of
reach) is kept and raised as it is.

Records waiting behind their key count in the task's queue (`count`), so a slow key pauses the
partition's fetching as a slow processor does, and memory stays bounded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

from processors.record import Record
from runtime.errors import StopAfterCommit, StopWithoutCommit
from runtime.telemetry.trace_headers import TraceDecision

log = logging.getLogger(__name__)

Run = Callable[[Any, Record, TraceDecision, int], Awaitable[None]]
"""Processes one record: the raw record, the record, its trace decision, the stream time as of the record."""
Waiting = tuple[Any, Record, TraceDecision, int, float]  # `Run`'s arguments, and since when it waits


class InFlightRecordFailed(StopWithoutCommit):
    """A record failed under the `fail` policy while others were in flight: the worker stops and commits
    nothing since its last commit, as records after it may have finished already."""


class InFlight:
    """The records of one task in flight; `submit` hands one over, in offset order."""

    def __init__(
        self,
        limit: int,
        by_key: bool,
        run: Run,
        on_finish: Callable[[], None],
        on_failure: Callable[[], None],
        on_wait: Callable[[float], None] | None = None,
    ):
        self.limit = limit
        self.failure: BaseException | None = None
        self._by_key = by_key
        self._run = run
        self._on_finish = on_finish  # the task's queue went down by one
        self._on_failure = on_failure  # wakes the task, which raises it
        self._on_wait = on_wait  # milliseconds a record waited behind its key, when measured
        self._chains: dict[Hashable, deque[Waiting]] = {}  # keys with a chain running -> records behind it
        self._running = 0  # chains
        # Handing over waits while every slot is taken, until an eighth of them is free again: one wake-up
        # per several chains ended rather than one per record.
        self._resume_at = limit - max(1, limit // 8)
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots_free = asyncio.Event()
        self._drained = asyncio.Event()  # nothing in flight (or a failure to raise)
        # Records not finished, in the order they were handed over -> when: the first is the oldest.
        self._unfinished: dict[tuple[str, int, int], float] = {}
        self._generation = 0  # abandoned chains belong to an earlier one and leave everything as it is

    async def submit(self, raw: Any, record: Record, decision: TraceDecision, stream_time: int) -> None:
        """Hand over the next record: behind its key's chain if it has one, else as a new chain once a
        slot is free."""
        self.raise_failure()
        now = time.monotonic()
        self._unfinished[(raw.topic, raw.partition, raw.offset)] = now
        key = raw.key
        if self._by_key:
            waiting = self._chains.get(key)
            if waiting is not None:
                waiting.append((raw, record, decision, stream_time, now))
                return
        while self._running >= self.limit:
            self._slots_free.clear()
            await self._slots_free.wait()
            self.raise_failure()
        self._running += 1
        if self._by_key:
            self._chains[key] = deque()
        task = asyncio.create_task(self._chain(self._generation, key, raw, record, decision, stream_time))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self, timeout_s: float | None = None) -> bool:
        """Wait until every record handed over is finished (False if `timeout_s` passed first); a
        failure meanwhile is raised."""
        try:
            async with asyncio.timeout(timeout_s):
                while self.count:
                    self.raise_failure()
                    self._drained.clear()
                    await self._drained.wait()
        except TimeoutError:
            return False
        self.raise_failure()
        return True

    async def drain_for_commit(self, timeout_s: float | None, task: str) -> bool:
        """Step 1.0 of the commit protocol for a task with concurrency: `drain`. A task that leaves waits up
        to the shutdown timeout, then takes no part in the commit: what is in flight is abandoned."""
        if await self.drain(timeout_s):
            return True
        log.error("task %s: %d records still in flight after %.0fs; they stay uncommitted", task, self.count, timeout_s)
        self.abandon()
        return False

    def abandon(self) -> None:
        """Cancel what is in flight: its records stay uncommitted (the task goes back to its last commit,
        or leaves)."""
        for task in self._tasks:
            task.cancel()
        self._generation += 1
        self._chains.clear()
        self._unfinished.clear()
        self._running = 0
        self._slots_free.set()
        self._drained.set()

    @property
    def count(self) -> int:
        """Records handed over and not finished, waiting behind their key or not."""
        return len(self._unfinished)

    def raise_failure(self) -> None:
        if self.failure is not None:
            raise self.failure

    def oldest_age_s(self) -> float:
        """How long the lowest unfinished record has been in flight (0 when none is)."""
        for since in self._unfinished.values():
            return time.monotonic() - since
        return 0.0

    async def _chain(
        self, generation: int, key: Hashable, raw: Any, record: Record, decision: TraceDecision, stream_time: int
    ) -> None:
        try:
            while True:
                await self._run(raw, record, decision, stream_time)
                if generation != self._generation:
                    return
                self._finished(raw)
                if not self._by_key:
                    return
                waiting = self._chains[key]
                if not waiting:
                    del self._chains[key]
                    return
                raw, record, decision, stream_time, since = waiting.popleft()
                if self._on_wait is not None:
                    self._on_wait((time.monotonic() - since) * 1000)
        except StopAfterCommit as error:
            self._fail(generation, InFlightRecordFailed(str(error)), error)
        except Exception as error:
            self._fail(generation, error, None)
        finally:
            if generation == self._generation:
                self._running -= 1
                if self._running <= self._resume_at:
                    self._slots_free.set()

    def _finished(self, raw: Any) -> None:
        del self._unfinished[(raw.topic, raw.partition, raw.offset)]
        if not self._unfinished:
            self._drained.set()
        self._on_finish()

    def _fail(self, generation: int, failure: BaseException, cause: BaseException | None) -> None:
        if generation != self._generation or self.failure is not None:
            return
        if cause is not None:
            failure.__cause__ = cause
        self.failure = failure
        self._slots_free.set()
        self._drained.set()
        self._on_failure()
