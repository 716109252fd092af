"""Kills and rebalances under load: two workers of an app share its partitions; one of them, at random, is
killed (-9) at a random moment after the group committed something more, and a new one joins in its place,
so each kill and each join moves partitions (and their state) between workers."""

from __future__ import annotations

import asyncio
import random
import signal
import time
from pathlib import Path

from aiokafka.errors import GroupCoordinatorNotAvailableError

from tests.support.kafka_helpers import committed_offsets
from tests.support.running import spawn_worker

# kafka.consumer options for apps whose workers are killed: a killed worker's partitions move on once its
# session runs out, after 3 s rather than aiokafka's 10 s. The test broker accepts sessions from 1 s
# (runtime/devkafka/broker.py); a heartbeat every 0.5 s keeps a live worker's session through a pause of
# its event loop of up to 2.5 s on a busy machine.
FAST_FAILOVER = {"session_timeout_ms": 3000, "heartbeat_interval_ms": 500}


async def committed_total(bootstrap: str, group: str) -> int:
    """How many input records the group has committed; 0 while the broker has no coordinator for it yet."""
    try:
        return sum((await committed_offsets(bootstrap, group)).values())
    except GroupCoordinatorNotAvailableError:
        return 0


async def kill_and_replace(app: Path, bootstrap: str, group: str, logs: Path, seed: int, kills: int = 5) -> int:
    """`kills` rounds of one of two workers killed and replaced, then both killed; the records the group had
    committed by then. Each worker logs to `logs/worker<n>.log`."""
    rng = random.Random(seed)
    numbered = iter(logs / f"worker{number}.log" for number in range(100))
    workers = [spawn_worker(app, log=next(numbered)) for _ in range(2)]
    committed = 0
    for _ in range(kills):
        deadline = time.monotonic() + 90
        while await committed_total(bootstrap, group) <= committed:
            assert all(worker.poll() is None for worker in workers), "a worker exited by itself"
            assert time.monotonic() < deadline, "the group committed nothing more within 90 s"
            await asyncio.sleep(0.1)
        await asyncio.sleep(rng.uniform(0.0, 0.5))
        killed = workers.pop(rng.randrange(len(workers)))
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        committed = await committed_total(bootstrap, group)
        workers.append(spawn_worker(app, log=next(numbered)))
    for worker in workers:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    return await committed_total(bootstrap, group)
