"""How long a worker's stop may take, and what becomes of the work still running when the time is up.

From the first request to stop (a signal, a failure, the end of a bounded run) the batches in flight
get `shutdown_timeout_s`; the final commit, the processors' and stores' close and the clients' stop
get `FINAL_S` more, so a batch that used the whole timeout does not cost the other tasks their commit.
A step still running at its deadline is cancelled and named as abandoned: the worker goes on stopping
and exits 1, saying in one line what it left. What a cancellation cannot reach (a processor that
blocks the event loop, so that nothing of the stop ever runs) the watchdog thread ends with the
process, `WATCHDOG_S` after that (`runtime/worker/watchdog.py`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

FINAL_S = 2.0
"""After the shutdown timeout: the final commit, the close, the clients' stop."""
WATCHDOG_S = 1.5
"""After that: the process is ended whatever it is doing."""
UNWIND_S = 0.5
"""How long a cancelled step may take to unwind before the stop goes on without it."""
LAST_CHANCE_S = 0.2
"""What a step is given when the deadline has passed: enough to close a client that has nothing left to do."""


class StopDeadline:
    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self.abandoned: list[str] = []
        self.step: Callable[[], str] | None = None  # what the step being awaited is doing, in words
        self.started = threading.Event()  # the watchdog thread waits on it
        self.finished = threading.Event()
        self._starting = False
        self._started_at = 0.0

    def start(self) -> None:
        """The stop begins now; later calls change nothing. Safe from a signal handler and from any thread:
        a second signal whose handler runs while the first one's is inside `Event.set` (which holds the
        event's lock, not reentrant) returns at once, rather than wait for that lock forever."""
        if self._starting:
            return
        self._starting = True
        self._started_at = time.monotonic()
        self.started.set()

    def finish(self) -> None:
        """The stop is done: the watchdog stands down."""
        self.finished.set()

    def left(self, final: bool = True) -> float:
        """Seconds left for the batches in flight, or (`final`) for the steps after them."""
        end = self._started_at + self.timeout_s + (FINAL_S if final else 0.0)
        return max(0.0, end - time.monotonic())

    def watchdog_left(self) -> float:
        """Seconds left before the watchdog ends the process (the stop has started)."""
        return max(0.0, self._started_at + self.timeout_s + FINAL_S + WATCHDOG_S - time.monotonic())

    def elapsed(self) -> float:
        return time.monotonic() - self._started_at if self.started.is_set() else 0.0

    async def bound(self, work: Awaitable[T], abandoning: Callable[[], str], final: bool = True) -> bool:
        """Await `work` until the deadline, once the stop has started (before, as long as it takes); past it,
        name what it was doing (`abandoning()`, asked before it is cancelled, while it still shows), cancel
        it and return False. Its exception is raised as usual."""
        if not self.started.is_set():
            await work
            return True
        task = asyncio.ensure_future(work)
        self.step = abandoning
        try:
            done, _ = await asyncio.wait([task], timeout=max(LAST_CHANCE_S, self.left(final)))
        finally:
            self.step = None
        if task in done:
            if not task.cancelled():  # aiokafka's stop lets the cancellation of a task of its own out
                task.result()
            return True
        self.abandoned.append(abandoning())
        task.cancel()
        await asyncio.wait([task], timeout=UNWIND_S)
        return False

    def report(self) -> str:
        """The one line that says what the stop abandoned."""
        return (
            f"stopped {self.elapsed():.1f} s after the request to stop (shutdown_timeout_s: {self.timeout_s:g}), "
            f"abandoning {'; '.join(self.abandoned)}: what it had not committed is processed again by the "
            "partitions' next owner"
        )
