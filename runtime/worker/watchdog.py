"""The last resort of a stop: a thread that ends the process once the stop has outlasted its deadline.

A processor that blocks the event loop (a synchronous call that never returns) keeps every step of
the stop from running, the cancellations of `StopDeadline.bound` included; only another thread can
still act. It logs what the worker was doing, as the stop's one line, and ends the process with exit
status 1 at once (`os._exit`: a clean exit would wait for the blocked thread).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from runtime.worker.stop_deadline import StopDeadline

log = logging.getLogger(__name__)

EXIT_ABANDONED = 1


class Watchdog(threading.Thread):
    def __init__(self, deadline: StopDeadline, doing: Callable[[], list[str]]):
        super().__init__(name="stop watchdog", daemon=True)
        self._deadline = deadline
        self._doing = doing

    def stand_down(self) -> None:
        """The worker has stopped (or never started its stop): nothing is left to end."""
        self._deadline.finish()

    def run(self) -> None:
        deadline = self._deadline
        deadline.started.wait()
        if deadline.finished.wait(deadline.watchdog_left()):
            return
        try:
            doing = "; ".join(self._doing()) or "nothing it could name"
        except Exception as error:  # the worker's objects read from another thread, mid-change
            doing = f"what it was doing, which could not be read ({error!r})"
        deadline.abandoned.append(doing)
        log.error("%s; the process ends here", deadline.report())
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(EXIT_ABANDONED)
