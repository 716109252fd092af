"""The worker's transactional id under exactly-once with one transaction per worker.

It stays the same when the worker restarts, so that the restarted worker's producer, as it starts, aborts the
transaction its crashed predecessor left open: otherwise that transaction holds back every read_committed
reader of the worker's outputs and changelogs, and its tasks' next owners, until it times out. A static member
has its group instance id. Any other worker takes the first of its state directory's numbered slots no live
worker on this host holds (a lock each, which the kernel releases when its holder dies): workers sharing a state
directory hold one slot each, and a worker restarted with it takes the slot its predecessor held.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
from typing import IO

from runtime.config import AppConfig

SLOTS = 1024


class TransactionalId:
    """Held for the worker's life: `close` frees its slot."""

    def __init__(self, config: AppConfig):
        self._lock: IO[bytes] | None = None
        instance = config.kafka.group_instance_id
        self.value = f"{config.app_id}-{instance}" if instance is not None else self._slot(config)

    def _slot(self, config: AppConfig) -> str:
        folder = config.state_dir.resolve()
        folder.mkdir(parents=True, exist_ok=True)
        place = hashlib.sha256(f"{socket.gethostname()}:{folder}".encode()).hexdigest()[:8]
        for slot in range(SLOTS):
            lock = (folder / f".{config.app_id}-transactional-id-{slot}.lock").open("ab")
            try:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.close()
                continue
            os.set_inheritable(lock.fileno(), False)
            self._lock = lock
            return f"{config.app_id}-{place}-{slot}"
        raise RuntimeError(f"{SLOTS} workers of app {config.app_id} hold every transactional id of {folder}")

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None
