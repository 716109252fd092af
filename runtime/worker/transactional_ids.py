"""The worker's transactional id under exactly-once with one transaction per worker.

It stays the same when the worker restarts, so that the restarted worker's producer, as it starts, aborts the
transaction its crashed predecessor left open: otherwise that transaction holds back every read_committed
reader of the worker's outputs and changelogs, and its tasks' next owners, until it times out. A static member
has its group instance id. Any other worker takes the first of its state directory's numbered slots no live
worker on this host holds (a lock each, which the kernel releases when its holder dies): workers sharing a state
directory hold one slot each, and a worker restarted with it takes the slot its predecessor held. The slots
free besides its own may hold the open transactions of workers that died and were not restarted: the worker
ends them as it starts (`abandoned`), holding each slot meanwhile.
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
        self._locks: dict[str, IO[bytes]] = {}
        self._abandoned: list[str] = []
        instance = config.kafka.group_instance_id
        self.value = f"{config.app_id}-{instance}" if instance is not None else self._slots(config)

    @property
    def abandoned(self) -> list[str]:
        """The ids of the free slots used before, held until `ended`: a dead worker's transaction may be open."""
        return list(self._abandoned)

    def ended(self, transactional_id: str) -> None:
        """The abandoned id's transaction was ended (a producer with the id started): its slot is free again."""
        self._abandoned.remove(transactional_id)
        self._locks.pop(transactional_id).close()

    def _slots(self, config: AppConfig) -> str:
        folder = config.state_dir.resolve()
        folder.mkdir(parents=True, exist_ok=True)
        place = hashlib.sha256(f"{socket.gethostname()}:{folder}".encode()).hexdigest()[:8]
        own: str | None = None
        for slot in range(SLOTS):
            path = folder / f".{config.app_id}-transactional-id-{slot}.lock"
            used = path.exists()
            if own is not None and not used:
                break
            lock = path.open("ab")
            try:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.close()
                continue
            os.set_inheritable(lock.fileno(), False)
            transactional_id = f"{config.app_id}-{place}-{slot}"
            self._locks[transactional_id] = lock
            if own is None:
                own = transactional_id
            else:
                self._abandoned.append(transactional_id)
        if own is None:
            raise RuntimeError(f"{SLOTS} workers of app {config.app_id} hold every transactional id of {folder}")
        return own

    def close(self) -> None:
        for lock in self._locks.values():
            lock.close()
        self._locks, self._abandoned = {}, []
