"""One replay job, run by one worker from its claim to its end.

A job has a transactional id of its own, `<app_id>-replay-<job id>`. Claiming the job starts a producer
with that id, which fences whichever worker ran it before (a transaction it left open is aborted), and
only then reads the job's latest state: so the state read is the last one committed, and nobody can
commit behind it. From there every write is one transaction holding the records replayed since the last
one and the state after them (the offset reached, the counts, a heartbeat): the target topic holds each
matching record once, read committed, however often the job changes hands. A state is written whenever
records matched, and at least once a heartbeat otherwise.

The first claim fixes the span the job reads (its partition, its first offset and the end offset then),
so that a worker taking the job over reads up to the same end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from aiokafka.errors import KafkaError, ProducerFenced

from runtime.commands.topic_serdes import topic_serdes
from runtime.config import AppConfig
from runtime.counters import Counters
from runtime.kafka.connection import Clients, start_with_retries
from runtime.kafka.outputs import OutputsRefused
from runtime.kafka.topics import describe_limits, describe_partitions
from runtime.replay.jobs.state import JobState, ReplayRequest, Status
from runtime.replay.scan import RangeGone, Replay, Span, locate, scan
from runtime.sources.shipper import Shipped, Shipper, ShippingSetup
from stores.text_keys import KeyNotEncodable, encoded_key

log = logging.getLogger(__name__)

RETRY_S = 1.0


class JobFailed(Exception):
    """The job cannot be done (the reason is its message): it ends FAILED."""


class Interrupted(Exception):
    """Kafka refused a transaction (it was aborted): the job is claimed again and goes on."""


@dataclass(frozen=True)
class Workplace:
    """What every job of a worker uses."""

    config: AppConfig
    clients: Clients
    counters: Counters
    worker: str
    heartbeat_ms: int
    stopping: asyncio.Event  # set: release the jobs at their next write, for another worker to go on with


def now_ms() -> int:
    return int(time.time() * 1000)


class JobRunner:
    def __init__(self, job: JobState, place: Workplace):
        assert job.request is not None, "only a readable request is run"
        self.id = job.id
        self._request: ReplayRequest = job.request
        self._place = place

    async def run(self) -> bool:
        """Until the job ends (True) or another worker takes it (False)."""
        while True:
            try:
                await self._run_once()
                return True
            except ProducerFenced:
                log.info("replay job %s: taken over by another worker", self.id)
                return False
            except (Interrupted, KafkaError) as error:
                log.warning("replay job %s: interrupted (%r); claiming it again", self.id, error)
                await asyncio.sleep(RETRY_S)
            except JobFailed as error:
                await self._fail(str(error))
                return True
            except Exception as error:
                log.exception("replay job %s: unexpected failure", self.id)
                await self._fail(f"unexpected failure: {error!r}")
                return True

    async def _run_once(self) -> None:
        request, place = self._request, self._place
        what, partitions, shipper = await self._prepare()
        consumer = None
        try:
            await shipper.start()  # fences the job's previous owner, then reads its state
            state = self._latest(shipper)
            if state is None or state.status.ended:
                return
            consumer = place.clients.consumer(group_id=None, client_id=f"{place.worker}-replay-{self.id}")
            await start_with_retries(f"replay job {self.id}'s reader", place.clients.bootstrap_servers, consumer.start)
            span = await self._span(consumer, what, partitions, state)
            state = state.model_copy(
                update={
                    "status": Status.STARTED,
                    "owner": place.worker,
                    "heartbeat_ms": now_ms(),
                    "partition": span.partition,
                    "beginning": span.beginning,
                    "start_offset": span.start,
                    "end_offset": span.end,
                    "next_offset": state.next_offset if state.next_offset is not None else span.start,
                }
            )
            await _ship(shipper, [], state)
            log.info(
                "replay job %s: reading %s[%d] from offset %d to %d",
                self.id,
                request.topic,
                span.partition,
                state.next_offset,
                span.end,
            )
            replayed: list[Shipped] = []
            try:
                async for batch in scan(consumer, what, span, state.next_offset):
                    replayed += [
                        (request.target, record.key, record.value, list(record.headers), record.timestamp)
                        for record in batch.matched
                    ]
                    state = state.model_copy(
                        update={
                            "scanned": state.scanned + batch.scanned,
                            "matched": state.matched + len(batch.matched),
                            "next_offset": batch.next_offset,
                        }
                    )
                    heartbeat_due = now_ms() - state.heartbeat_ms >= place.heartbeat_ms
                    releasing = place.stopping.is_set() and not batch.done
                    if batch.done or replayed or heartbeat_due or releasing:
                        status = Status.COMPLETED if batch.done else Status.OPEN if releasing else Status.ONGOING
                        state = state.model_copy(update={"status": status, "heartbeat_ms": now_ms()})
                        await _ship(shipper, replayed, state)
                        replayed = []
                    if releasing:
                        log.info("replay job %s: released at offset %d, for another worker", self.id, state.next_offset)
                        return
            except RangeGone as error:
                raise JobFailed(str(error)) from None
            except OutputsRefused as error:
                raise JobFailed(f"{request.target} refused a replayed record: {error}") from None
            log.info("replay job %s: completed, %d of %d records read matched", self.id, state.matched, state.scanned)
        finally:
            if consumer is not None:
                await consumer.stop()
            await asyncio.shield(shipper.stop())

    async def _prepare(self) -> tuple[Replay, int, Shipper]:
        """What to read, the partition count of its topic, and a shipper to the target and the jobs topic."""
        request, place = self._request, self._place
        admin = place.clients.admin()
        await start_with_retries("admin client", place.clients.bootstrap_servers, admin.start)
        try:
            counts = await describe_partitions(admin, [request.topic, request.target])
            for topic in (request.topic, request.target):
                if topic not in counts:
                    raise JobFailed(f"topic '{topic}' does not exist")
            limits = await describe_limits(admin, place.config, [request.target])
        finally:
            await admin.close()
        key = None
        if request.key is not None:
            serdes = topic_serdes(place.config, request.topic, None, None)
            try:
                key = encoded_key(serdes.key, serdes.raw_key, request.key)
            except KeyNotEncodable as error:
                raise JobFailed(str(error)) from None
        what = Replay(request.topic, key, request.partition, request.start_ms, request.end_ms, request.partitioner)
        try:
            what.partition_of(counts[request.topic])
        except ValueError as error:  # no such partition, or a key its partitioner puts in any
            raise JobFailed(str(error)) from None
        return what, counts[request.topic], self._shipper({request.target: counts[request.target]}, limits)

    def _shipper(self, partition_counts: dict[str, int], limits: Any) -> Shipper:
        place = self._place
        config = place.config
        setup = ShippingSetup(config, place.clients, partition_counts, place.counters, limits)
        return Shipper(self.id, config.replay_jobs_topic(), f"{config.app_id}-replay-{self.id}", setup)

    def _latest(self, shipper: Shipper) -> JobState | None:
        return None if shipper.position is None else JobState.decode(shipper.position)

    async def _span(self, consumer: Any, what: Replay, partitions: int, state: JobState) -> Span:
        if state.partition is not None:
            assert None not in (state.beginning, state.start_offset, state.end_offset)
            return Span(state.partition, state.beginning or 0, state.start_offset or 0, state.end_offset or 0)
        return await locate(consumer, what, partitions)

    async def _fail(self, reason: str) -> None:
        """Claim the job once more (aborting whatever is open) to write that it failed, and why."""
        log.warning("replay job %s: failed: %s", self.id, reason)
        shipper = self._shipper({}, {})
        try:
            await shipper.start()
            state = self._latest(shipper)
            if state is None or state.status.ended:
                return
            failed = state.model_copy(
                update={
                    "status": Status.FAILED,
                    "reason": reason,
                    "owner": self._place.worker,
                    "heartbeat_ms": now_ms(),
                }
            )
            with contextlib.suppress(ProducerFenced):
                await _ship(shipper, [], failed)
        finally:
            await asyncio.shield(shipper.stop())


async def _ship(shipper: Shipper, records: list[Shipped], state: JobState) -> None:
    if not await shipper.ship(records, state.encode().decode()):
        raise Interrupted("the transaction was aborted")
