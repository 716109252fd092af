"""What a worker's health endpoints answer.

Live means the event loop turns: a beat on the loop stamps the time every `BEAT_S`, and the answer,
given from the server's own thread, is no once the last beat is older than `stall_s` (a processor
blocked the loop with a call that hangs; restarting the worker is the cure). Ready means nothing keeps
the worker from processing its partitions: its global stores are bootstrapped, its partitions assigned
and their tasks' stores restored, Kafka is reachable, and it is not stopping. The worker says what
keeps it from being ready through `reasons`, read in the server's thread, so it only reads.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Final

Answer = tuple[bool, dict[str, Any]]

BEAT_S: Final = 1.0


class Probes:
    def __init__(self, stall_s: float, reasons: Callable[[], list[str]], clock: Callable[[], float] = time.monotonic):
        self._stall_s = stall_s
        self._reasons = reasons
        self._clock = clock
        self._last_beat = clock()

    async def beat(self) -> None:
        """Stamp the time the loop last turned; until cancelled."""
        while True:
            self._last_beat = self._clock()
            await asyncio.sleep(BEAT_S)

    def live(self) -> Answer:
        since = self._clock() - self._last_beat
        if since > self._stall_s:
            return False, {"live": False, "reason": f"the event loop has not turned for {since:.0f} s"}
        return True, {"live": True}

    def ready(self) -> Answer:
        reasons = self._reasons()
        if reasons:
            return False, {"ready": False, "reasons": reasons}
        return True, {"ready": True}
