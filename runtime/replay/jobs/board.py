"""Every replay job's latest state, as the jobs topic holds it: read whole at start, then followed.

The topic is read committed, so a state written in a job's transaction is seen only with the records
that transaction replayed. `caught_up` waits until everything committed before the call has been read:
what a worker does before deciding from the board (turning a request into a job, claiming one).
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import TopicPartition
from pydantic import ValidationError

from runtime.kafka.committed_end import HeldBack, high_watermark
from runtime.kafka.connection import Clients, start_with_retries
from runtime.replay.jobs.state import JobState

log = logging.getLogger(__name__)

FETCH_MS = 200


class Board:
    def __init__(self, clients: Clients, topic: str, worker: str):
        self.jobs: dict[str, JobState] = {}
        self._clients = clients
        self._worker = worker
        self._tp = TopicPartition(topic, 0)
        self._consumer = clients.consumer(group_id=None, client_id=f"{worker}-replay-board")
        self._read = asyncio.Event()

    async def start(self) -> None:
        await start_with_retries("the replay jobs' board", self._clients.bootstrap_servers, self._consumer.start)
        self._consumer.assign([self._tp])
        await self._consumer.seek_to_beginning(self._tp)

    async def stop(self) -> None:
        await self._consumer.stop()

    async def follow(self) -> None:
        """Read the states as they come, until cancelled."""
        while True:
            for record in (await self._consumer.getmany(self._tp, timeout_ms=FETCH_MS)).get(self._tp, []):
                self._take(record.key, record.value)
            self._read.set()

    async def caught_up(self) -> None:
        """Return once every state committed before the call has been read (`follow` running): up to the
        high watermark, as a transaction left open holds the consumer's own end back before later commits."""
        end = await high_watermark(self._clients, self._tp, f"{self._worker}-replay-board-end")
        held_back = HeldBack(self._tp, "the replay jobs' board")
        while (position := await self._consumer.position(self._tp)) < end:
            held_back.still_waiting(position, end)
            self._read.clear()
            await self._read.wait()

    def note(self, state: JobState) -> None:
        """A state this worker wrote, known before it is read back."""
        self.jobs[state.id] = state

    def _take(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        if value is None:
            self.jobs.pop(key.decode(), None)
            return
        try:
            state = JobState.decode(value)
        except ValidationError as error:
            log.warning("%s: the state of job %r cannot be read, left out: %s", self._tp.topic, key, error)
            return
        self.jobs[state.id] = state
