"""Requests into jobs: each request on the requests topic becomes an OPEN job on the jobs topic, once.

The workers share the requests topic as a consumer group. A request is turned into a job only when the
board, caught up, does not know its id yet: a request read again after a crash (its job written, its
offset not yet committed), or sent twice by its client, is a repeat and is dropped, whatever state its
job reached since. A request that cannot be read becomes a FAILED job saying why, under its key, or
under `<topic>-<partition>-<offset>` when it has none.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from pydantic import ValidationError

from runtime.kafka.connection import Clients, start_with_retries
from runtime.replay.jobs.board import Board
from runtime.replay.jobs.state import JobState, ReplayRequest, Status

log = logging.getLogger(__name__)


class Intake:
    def __init__(self, clients: Clients, requests_topic: str, jobs_topic: str, group: str, board: Board, worker: str):
        self._clients, self._board, self._jobs_topic = clients, board, jobs_topic
        self._consumer = clients.consumer(group_id=group, client_id=f"{worker}-replay-intake")
        self._consumer.subscribe([requests_topic])
        self._producer = clients.producer(client_id=f"{worker}-replay-intake")

    async def run(self) -> None:
        servers = self._clients.bootstrap_servers
        await start_with_retries("the replay requests' consumer", servers, self._consumer.start)
        try:
            await start_with_retries("the replay requests' producer", servers, self._producer.start)
            while True:
                batches = await self._consumer.getmany(timeout_ms=500)
                if not batches:
                    continue
                await self._board.caught_up()
                written = [await self._open(record) for records in batches.values() for record in records]
                await asyncio.gather(*(sent for sent in written if sent is not None))  # raises if one failed
                await self._consumer.commit()
        finally:
            await self._producer.stop()
            await self._consumer.stop()

    async def _open(self, record: Any) -> asyncio.Future[Any] | None:
        """The job's state sent (its acknowledgement to wait for), or None for a repeat."""
        state = job_of(record)
        if state.id in self._board.jobs:
            log.info(
                "replay request %s is a repeat (its job is %s): dropped", state.id, self._board.jobs[state.id].status
            )
            return None
        sent: asyncio.Future[Any] = await self._producer.send(self._jobs_topic, state.encode(), key=state.id.encode())
        self._board.note(state)
        if state.status is Status.FAILED:
            log.warning("replay request %s refused: %s", state.id, state.reason)
        return sent


def job_of(record: Any) -> JobState:
    """The job a request record asks for: OPEN, or FAILED with the reason it cannot be read."""
    fallback = (
        record.key.decode(errors="replace") if record.key else f"{record.topic}-{record.partition}-{record.offset}"
    )
    fields: Any = None
    try:
        fields = json.loads(record.value) if record.value is not None else None
        if not isinstance(fields, dict):
            raise ValueError("a request is a JSON object")
        fields.setdefault("id", fallback)
        request = ReplayRequest.model_validate(fields)
    except (ValueError, ValidationError) as error:
        reason = _reason(error)
        named = fields.get("id") if isinstance(fields, dict) else None
        return JobState(
            id=named if isinstance(named, str) and named else fallback,
            status=Status.FAILED,
            reason=f"the request cannot be read: {reason}",
        )
    return JobState(id=request.id, status=Status.OPEN, request=request)


def _reason(error: Exception) -> str:
    if isinstance(error, ValidationError):
        return "; ".join(
            f"{'.'.join(map(str, problem['loc'])) or 'request'}: {problem['msg']}" for problem in error.errors()
        )
    return str(error)
