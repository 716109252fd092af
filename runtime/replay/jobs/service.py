"""Replay jobs as a service: every worker takes requests, and runs jobs up to its limit.

Each worker runs three things under one task group. The board follows the jobs topic. The intake turns
the requests it is given (the workers share the requests topic as a consumer group) into OPEN jobs.
The scheduler looks at the board every tick and claims jobs, while it runs fewer than `max_jobs`:
OPEN ones, and STARTED or ONGOING ones whose heartbeat is older than `takeover_after_ms` (their worker
is gone). Each worker waits a random part of a heartbeat before claiming an OPEN job, so that two free
workers seldom go for the same one; when they do, the second claim fences the first (runner.py), which
stops at its next write and leaves the job alone until it is abandoned again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
from collections.abc import Awaitable, Callable

from runtime.config import AppConfig
from runtime.counters import Counters
from runtime.kafka.connection import Clients, start_with_retries
from runtime.kafka.outages import report_outages
from runtime.kafka.topics import InternalTopic, ensure_internal_topics
from runtime.replay.jobs.board import Board
from runtime.replay.jobs.intake import Intake
from runtime.replay.jobs.runner import JobRunner, Workplace, now_ms
from runtime.replay.jobs.state import JobState, Status

log = logging.getLogger(__name__)

TICK_S = 0.2
RESTART_S = 1.0
RELEASE_S = 10.0  # how long a stopping worker waits for its jobs to be released


class ReplayService:
    def __init__(self, config: AppConfig, bootstrap_servers: str, worker: str | None = None):
        self.config = config
        self.worker = worker or f"{socket.gethostname()}-{os.getpid()}"
        self._clients = Clients(config, bootstrap_servers)
        self.board = Board(self._clients, config.replay_jobs_topic(), self.worker)
        self._running: dict[str, asyncio.Task[bool]] = {}
        self._open_since: dict[str, int] = {}  # when this worker may claim an OPEN job
        self._lost: dict[str, int] = {}  # when another worker took a job from this one
        self._place = Workplace(
            config, self._clients, Counters(), self.worker, config.replay_jobs.heartbeat_ms, asyncio.Event()
        )

    def stop(self) -> None:
        """Claim no more jobs, release those running at their next write (OPEN again, with the offset
        reached, for another worker to go on with at once), then return from `run`."""
        self._place.stopping.set()

    @property
    def stopping(self) -> bool:
        return self._place.stopping.is_set()

    async def run(self) -> None:
        """Until `stop` has released this worker's jobs, or until cancelled."""
        try:
            await create_job_topics(self._clients, self.config)
            await self.board.start()
            await self._serve()
        finally:
            await self.board.stop()

    async def _serve(self) -> None:
        intake = Intake(
            self._clients,
            self.config.replay_requests_topic(),
            self.config.replay_jobs_topic(),
            f"{self.config.app_id}-replay-intake",
            self.board,
            self.worker,
        )
        log.info(
            "replay jobs: worker %s takes requests from %s, at most %d jobs at once",
            self.worker,
            self.config.replay_requests_topic(),
            self.config.replay_jobs.max_jobs,
        )
        async with asyncio.TaskGroup() as group:
            following = group.create_task(self.board.follow())
            taking = group.create_task(_restarted("the replay intake", intake.run))
            outages = group.create_task(report_outages(self._place.counters))
            await self._schedule()
            following.cancel()
            taking.cancel()
            outages.cancel()

    async def _schedule(self) -> None:
        try:
            while not self._place.stopping.is_set():
                self._forget_ended()
                now = now_ms()
                candidates = [state for state in self.board.jobs.values() if self._may_claim(state, now)]
                random.shuffle(candidates)
                for state in candidates[: self.config.replay_jobs.max_jobs - len(self._running)]:
                    if state.status is not Status.OPEN:
                        log.info(
                            "replay job %s: its worker %s said nothing for %d ms; taking it over",
                            state.id,
                            state.owner,
                            now - state.heartbeat_ms,
                        )
                    runner = JobRunner(state, self._place)
                    self._running[state.id] = asyncio.create_task(runner.run(), name=f"replay job {state.id}")
                await asyncio.sleep(TICK_S)
            if self._running:
                await asyncio.wait(self._running.values(), timeout=RELEASE_S)
        finally:
            for task in self._running.values():
                task.cancel()
            await asyncio.gather(*self._running.values(), return_exceptions=True)

    def _may_claim(self, state: JobState, now: int) -> bool:
        """Claimable, not run here already, and not lost to another worker lately; an OPEN job only after a
        pause of its own on each worker, so that the first to claim it is mostly the only one."""
        settings = self.config.replay_jobs
        if state.id in self._running or not state.claimable(now, settings.takeover_after_ms):
            return False
        if now - self._lost.get(state.id, -settings.takeover_after_ms) < settings.takeover_after_ms:
            return False
        if state.status is Status.OPEN:
            ready = self._open_since.setdefault(state.id, now + random.randrange(settings.heartbeat_ms))
            return now >= ready
        return True

    def _forget_ended(self) -> None:
        for job_id in [job_id for job_id, task in self._running.items() if task.done()]:
            ended = self._running.pop(job_id)
            self._open_since.pop(job_id, None)
            if ended.cancelled():
                continue
            if ended.exception() is not None:
                log.error("replay job %s stopped: %r", job_id, ended.exception())
            elif not ended.result():
                self._lost[job_id] = now_ms()


async def create_job_topics(clients: Clients, config: AppConfig) -> None:
    """The requests topic and the jobs topic, unless they exist."""
    admin = clients.admin()
    await start_with_retries("admin client", clients.bootstrap_servers, admin.start)
    try:
        await ensure_internal_topics(
            admin,
            config.internal_topics,
            [InternalTopic(config.replay_jobs_topic(), compacted=True), InternalTopic(config.replay_requests_topic())],
        )
    finally:
        await admin.close()


async def _restarted(what: str, run: Callable[[], Awaitable[None]]) -> None:
    """`run` again after a pause whenever it fails (the broker went away, ...)."""
    while True:
        try:
            await run()
        except Exception as error:
            log.warning("%s failed (%r); starting it again", what, error)
            await asyncio.sleep(RESTART_S)
