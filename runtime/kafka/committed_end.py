"""Where a read-committed reader of a partition has read everything committed so far.

Such a reader stops at the partition's last stable offset: the first record of the oldest transaction
still open, whichever producer opened it. Its own end offset is that offset, so a reader that stops
there misses what other producers committed after it; and a producer that died with a transaction open
holds the offset back until the broker aborts that transaction (its transaction timeout, then the
broker's next check, 10 s by default). The end to read to is the high watermark, open transactions
included: read committed, the reader gets there once every transaction begun before is over, and has
then seen every record committed before it asked.
"""

from __future__ import annotations

import logging
import time

from aiokafka import TopicPartition

from runtime.kafka.connection import Clients, start_with_retries

log = logging.getLogger(__name__)

TELL_AFTER_S = 2.0


async def high_watermark(clients: Clients, tp: TopicPartition, client_id: str) -> int:
    """The partition's end now, records of transactions still open included."""
    consumer = clients.consumer(group_id=None, isolation_level="read_uncommitted", client_id=client_id)
    await start_with_retries(f"{client_id} (the end of {tp.topic})", clients.bootstrap_servers, consumer.start)
    try:
        return int((await consumer.end_offsets([tp]))[tp])
    finally:
        await consumer.stop()


class HeldBack:
    """Says once, when a reader has waited long, that a transaction left open is what it waits for."""

    def __init__(self, tp: TopicPartition, reader: str):
        self._tp = tp
        self._reader = reader
        self._since = time.monotonic()
        self._told = False

    def still_waiting(self, position: int, end: int) -> None:
        if self._told or time.monotonic() - self._since < TELL_AFTER_S:
            return
        self._told = True
        log.info(
            "%s waits at %s[%d]@%d for a transaction left open there to end (up to its transaction timeout "
            "after its producer stopped) before reading on to %d",
            self._reader,
            self._tp.topic,
            self._tp.partition,
            position,
            end,
        )
