"""Where in time a windowed example's run starts: after every event its input topic holds already.

A windowed app keeps its stream time, and its open windows, in its stores from one run to the next,
and the local broker keeps the topics. A run whose events were older than an earlier run's would
find them late, or joining that run's sessions; starting after them, each run's windows are its own.
"""

from __future__ import annotations

from collections.abc import Callable

from aiokafka import TopicPartition

from examples.payments.run import scan

MINUTE_MS = 60_000


async def start_after(
    bootstrap: str, topic: str, partitions: int, event_time: Callable[[bytes], int], first_ms: int, margin_ms: int
) -> int:
    """`first_ms` when `topic` is empty; else the first whole minute at least `margin_ms` after the latest
    `event_time` of its records' values."""
    latest = -1

    def keep(key: bytes | None, value: bytes) -> None:
        nonlocal latest
        latest = max(latest, event_time(value))

    await scan(bootstrap, [TopicPartition(topic, p) for p in range(partitions)], None, keep)
    if latest < 0:
        return first_ms
    return (latest + margin_ms) // MINUTE_MS * MINUTE_MS + MINUTE_MS
