"""When a batch lets the event loop run: every `YIELD_AFTER_S` of processing.

A synchronous `process` never yields by itself, nor an `async def` one that awaits nothing that
suspends, and the consumer's heartbeat and the poll loop run on the same event loop. A batch of
hundreds of records at 100 ms each would hold the loop past the group's session timeout, and the
group would take the partitions away. So the record loops read the clock every `stride` records, a
countdown a record, and give the event loop one turn once `YIELD_AFTER_S` has passed since they last
did. A heartbeat's request goes out in the turn after its timer falls due, and the broker counts it
when it arrives, so one is sent at least every heartbeat interval plus `YIELD_AFTER_S`; its answer
takes a few turns more, well within a session of several seconds.

A turn is not free: the poll loop, the producer's sender and the other tasks run in it, in smaller
steps. The stateless benchmark under cachegrind, where processing is some 50 times slower and turns
thus 50 times more frequent per record than in a real run, executed 4% more instructions per record
with a turn every 100 ms, 20% with ten turns, and 1.2 to 1.6% with one every half second (0.6% for
the countdown and the readings alone, without turns).

The stride is as many records as took a quarter of `YIELD_AFTER_S` at the rate since the last reading
(at most twice the last stride): 1 for a slow processor (every record), up to `MAX_STRIDE` for a fast
one, whose records then pay a reading of the clock every 64.
"""

from __future__ import annotations

import time

YIELD_AFTER_S = 0.5
MAX_STRIDE = 64


class Pace:
    """One per record loop. The countdown, the stride and the times carry over from batch to batch, so a
    batch costs no reading of the clock: a loop that holds the event loop over several batches in a row
    yields as one that holds it over one batch does."""

    __slots__ = ("_read_at", "_yield_at", "countdown", "stride")

    def __init__(self) -> None:
        self.stride = self.countdown = 1  # the first record reads the clock
        self._read_at = now = time.monotonic()
        self._yield_at = now + YIELD_AFTER_S

    def due(self) -> bool:
        """Reads the clock (`stride` records after the last reading): whether to yield now."""
        now = time.monotonic()
        took, self._read_at = now - self._read_at, now
        rate_stride = int(self.stride * YIELD_AFTER_S / 4 / took) if took > 0.0 else MAX_STRIDE
        self.stride = max(1, min(MAX_STRIDE, 2 * self.stride, rate_stride))  # a processor that sped up, by steps
        if now < self._yield_at:
            return False
        self._yield_at = now + YIELD_AFTER_S
        return True
