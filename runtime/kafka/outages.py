"""A broker outage told once: while Kafka is unreachable, the Kafka client's repeated connection errors are
folded into the runtime's own lines.

aiokafka logs an ERROR for every failed attempt of every client it runs: thousands over a minute's
outage ("Unable connect to node", "Unable to update metadata", "Failed fetch messages", "Group
Coordinator Request failed"), and nothing when it is over. The first of those opens an outage, told
in one WARNING line with the error itself; while it lasts, those errors, and what the client says of the
outage's consequences (the group coordinator marked dead, heartbeats failing, requests to a node not
ready), are counted by kind instead of printed, and a reminder every `REMIND_S` says how long it has
been; once no error has come for `QUIET_S`, the outage is over, told with how long it lasted and what was
not printed. Every other message passes as it is, and so does everything outside an outage.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable

from runtime.counters import Counters
from runtime.kafka.refusals import REPORTED, is_refusal

log = logging.getLogger("runtime.kafka")

FOLDED = ("Unable connect to", "Unable to update metadata", "Failed fetch messages", "Group Coordinator Request failed")
# Said of an outage's consequences, once or a few times each: folded only while an outage is open.
CONSEQUENCES = {
    "coordinator dead": "the group coordinator marked dead",
    "Heartbeat": "failed heartbeats",
    "NodeNotReadyError": "requests to a node not ready",
    "KafkaConnectionError": "connections closed",
}
REMIND_S = 30.0
QUIET_S = 5.0


class Outages(logging.Filter):
    """Installed on the log handlers; `tick`, called every second or so, closes an outage in time (without
    it, the next error closes the one before and opens another)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self._clock = clock
        self.since: float | None = None  # when the current outage began
        self._last_error = 0.0
        self._reminded = 0.0
        self._quiet_until = 0.0  # no errors are expected before then: the runtime waits before trying again
        self.folded: Counter[str] = Counter()  # client messages not printed in the current outage, by kind
        self.outages = 0
        self.seconds = 0.0  # of the outages that ended

    @property
    def unreachable(self) -> bool:
        return self.since is not None

    def retrying_in(self, seconds: float) -> None:
        """The runtime waits `seconds` before its next attempt: no error until then does not end the outage."""
        self._quiet_until = max(self._quiet_until, self._clock() + seconds)

    def unreachable_for(self) -> float:
        return 0.0 if self.since is None else self._clock() - self.since

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("aiokafka") or record.levelno < logging.WARNING:
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        if any(is_refusal(arg) for arg in args):  # Kafka answered: not an outage
            return not getattr(record, REPORTED, False)
        message = record.getMessage()
        error = next((kind for kind in FOLDED if message.startswith(kind)), None)
        if error is None or record.levelno < logging.ERROR:
            return self._consequence(message)
        now = self._clock()
        if self.since is not None and self._over(now):
            self.tick()  # the one before is over (in a process that does not tick)
        self._last_error = now
        if self.since is None:
            self.since = self._reminded = now
            self.folded = Counter()
            self.outages += 1
            log.warning(
                "Kafka is unreachable: %s (the client's errors like this one are not printed until it is back)", message
            )
        else:
            self.folded[f"'{error}'"] += 1
        return False

    def _consequence(self, message: str) -> bool:
        """Whether to print a client message that opens no outage: not if it tells of the open one's consequences."""
        if self.since is None:
            return True
        kind = next((kind for pattern, kind in CONSEQUENCES.items() if pattern in message), None)
        if kind is None:
            return True
        self.folded[kind] += 1
        return False

    def _not_printed(self) -> str:
        kinds = ", ".join(f"{count} {kind}" for kind, count in self.folded.most_common())
        return f"{self.folded.total()} client messages not printed" + (f": {kinds}" if kinds else "")

    def _over(self, now: float) -> bool:
        return now - max(self._last_error, self._quiet_until) >= QUIET_S

    def tick(self) -> None:
        if self.since is None:
            return
        now = self._clock()
        if self._over(now):
            lasted = self._last_error - self.since
            self.seconds += lasted
            self.since = None
            log.warning("Kafka is reachable again, after %.0f s unreachable (%s)", lasted, self._not_printed())
        elif now - self._reminded >= REMIND_S:
            self._reminded = now
            log.warning(
                "Kafka has been unreachable for %.0f s (%d client messages not printed)",
                now - self.since,
                self.folded.total(),
            )


OUTAGES = Outages()


async def report_outages(counters: Counters, every_s: float = 1.0) -> None:
    """Close the outages that are over, and keep the worker's counters of them; until cancelled."""
    while True:
        await asyncio.sleep(every_s)
        OUTAGES.tick()
        counters.broker_outages, counters.broker_outage_seconds = OUTAGES.outages, OUTAGES.seconds
