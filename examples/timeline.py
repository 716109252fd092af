"""Where in time a windowed example's run starts: after every event its input topic holds already.

A windowed app keeps its stream time, and its open windows, in its stores from one run to the next,
and the local broker keeps the topics. A run whose events were older than an earlier run's would
find them late, or joining that run's sessions; starting after them, each run's windows are its own.

Results carry the event time of their windows, and the broker refuses records more than an hour
ahead of its clock (`log.message.timestamp.after.max.ms`) and deletes those older than a topic's
retention (7 days unless set). So runs start a day back, each after the last; when the next run would
reach past the clock, the app starts over (its input emptied, `python -m runtime reset`) and the run a day back again.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

from examples.payments.run import ROOT, end_offsets, scan

MINUTE_MS = 60_000


def a_day_ago() -> int:
    return (time.time_ns() // 1_000_000 - 86_400_000) // MINUTE_MS * MINUTE_MS


async def start_after(
    bootstrap: str, topic: str, partitions: int, event_time: Callable[[bytes], int], margin_ms: int
) -> int:
    """`a_day_ago()`, or the first whole minute at least `margin_ms` after the latest `event_time` of the
    values `topic` holds, if later."""
    latest = -1

    def keep(key: bytes | None, value: bytes) -> None:
        nonlocal latest
        latest = max(latest, event_time(value))

    await scan(bootstrap, [TopicPartition(topic, p) for p in range(partitions)], None, keep)
    return max(a_day_ago(), (latest + margin_ms) // MINUTE_MS * MINUTE_MS + MINUTE_MS)


def reaches_past_the_clock(last_ms: int) -> bool:
    return last_ms > time.time_ns() // 1_000_000


def start_over(app_yaml: Path, bootstrap: str, topic: str, partitions: int) -> None:
    """The input's events deleted, the app's offsets moved to its inputs' ends and its stores deleted:
    its stream time starts again."""
    print("  the earlier runs' events reach the present: the app starts over (python -m runtime reset)")
    asyncio.run(empty(bootstrap, topic, partitions))
    command = [sys.executable, "-m", "runtime", "reset", str(app_yaml), "--to", "latest", "--delete-state",
               "--delete-changelogs"]  # fmt: skip
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"error: resetting the app failed:\n{done.stdout}{done.stderr}")


async def empty(bootstrap: str, topic: str, partitions: int) -> None:
    ends = await end_offsets(bootstrap, {topic: partitions})
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_records({tp: RecordsToDelete(end) for tp, end in ends.items()})
    finally:
        await admin.close()
