"""The output path: records are appended to one Kafka record batch per target partition and sent whole.

Per-record `send()` costs ~15x more than `create_batch()` + `send_batch()` in aiokafka, so every
record the runtime writes (outputs, dead letters, changelogs) goes through here. Records go straight
to the compiled builder inside aiokafka's batch, at their offset in it: its Python `append` adds two
frames per record, as much again as the compiled append itself (see `_OpenBatch`).

Past `UNACKED_BYTES` held for records sent and not acknowledged, `flush` waits for acknowledgements: a
broker slower than the tasks slows them (and, through their bounded queues, the consumer), outputs do
not pile up.

A batch's records are kept until the broker acknowledged it. When the broker refuses a record
(too large, a bad timestamp, corrupt: see `REFUSALS`), its whole batch fails, and so does every later
batch of that partition (aiokafka leaves the idempotent producer's sequence numbers behind the refused
batch). With an error policy to call (`on_refused`), `wait_acked` then starts a new producer and
sends those records again, a refused batch one record at a time, so that only the refused records go
to the policy, and no other is lost or written twice. A transactional producer cannot send again
inside its transaction: `wait_acked` raises `OutputsRefused`, the transaction is aborted, and `probe`
finds which records the broker refuses.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgspec
from aiokafka import AIOKafkaProducer
from aiokafka.errors import IllegalOperation, OutOfOrderSequenceNumber
from aiokafka.producer.message_accumulator import BatchBuilder

from runtime.counters import Counters
from runtime.errors import StopWithoutCommit
from runtime.kafka.aiokafka_internals import batch_append, batch_settings, set_record_count, transaction_error
from runtime.kafka.authorization import AUTHORIZATION_ERRORS
from runtime.kafka.encoded_batch import EncodedBatch, EncodedHeaders
from runtime.kafka.record_limits import REFUSALS, HeaderList, Headers, Limits, as_header_list, record_size
from runtime.telemetry.trace_headers import TRACEPARENT, TRACEPARENT_CLASS
from stores.partitioner import KAFKA_SEED, POSITIVE, murmurhash2, partition_for

__all__ = ["HeaderList", "Headers", "Output", "Outputs", "OutputsRefused", "Refusal", "UnknownTopicError"]

log = logging.getLogger(__name__)


class Output(msgspec.Struct, gc=False):
    """A record on its way to Kafka, encoded, kept until the broker acknowledged it.

    One is built for every record sent, so it is a compiled struct, built positionally: built and appended
    to a list, it takes 1,240 instructions, a plain tuple 860, a NamedTuple 2,250 (through `tuple.__new__`)
    and a class with `__slots__` 2,850; its fields read as fast as a slots class's, a NamedTuple's take 1.7x
    as long as a tuple's items. Nothing it refers to (bytes, str, int, headers, the input record) can refer
    back to it, so the garbage collector need not track it (`gc=False`).
    """

    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp_ms: int | None  # None: the producer's clock gives it
    source: Any
    """The input record it came from (None for changelog records and the outputs of punctuations and
    flushes), so that a record the broker refuses goes to the error policy as that input's failure."""
    processor: str
    """The processor that sent it ("" for changelog records), which the error policy names."""


class Refusal(NamedTuple):
    """A record the broker refused when sent alone, and why."""

    output: Output
    error: Exception


OnRefused = Callable[[Output, Exception, "Outputs"], None]
Append = Callable[[int, "int | None", "bytes | None", "bytes | None", Any], Any]


@dataclass(slots=True)
class _OpenBatch:
    """A batch being filled, whose fields are read for every record appended: a slots class's read as fast as a
    tuple's items."""

    builder: BatchBuilder | EncodedBatch
    """aiokafka's batch, or one the runtime encodes (for dead letters); its own count is brought up to date when it
    is sent (`_flush`)."""
    records: list[Output]
    """The records it holds, kept until the broker acknowledged them."""
    append: Append
    """The compiled `append` of the builder inside `builder`: it takes each record's offset in the batch (the
    number of records before it), and returns None when the batch is full."""


UNACKED_BYTES = 64 * 1024 * 1024
"""What the records sent and not yet acknowledged may hold: twice the Java producer's `buffer.memory` default,
which counts its batches' bytes only, where here each record is also kept to be sent again (`_held_bytes`).
At 32 MB, counted so, a 10M-key stateful app took more RSS, not less (218-222 MB against 199-205)."""
HELD_RECORD_BYTES = 512
"""What a record kept until its batch is acknowledged holds besides its bytes: its `Output`, its key's and value's
objects, and the input record it came from (measured: 536 bytes for a 36-byte output of a 100-byte input, when
the `Output` was a tuple, 40 bytes larger).
Counting batch bytes alone, a stateful app's small outputs at 24 partitions took about 120 MB more RSS under
at-least-once than under exactly-once, whose commits wait for the acknowledgements every 100 ms."""
HELD_CHANGE_BYTES = 192
"""The same for a record that came from no input, such as a changelog record (measured: 185 bytes for a
13-byte one)."""
# A batch this large goes to the producer even while its task has more records to process. aiokafka sends
# one batch of a partition at a time, so many small batches (a task's batch spread over many partitions)
# hold the output back: 1 KB records to 24 partitions went at 0.46x of a bare loop (0.69x with this).
RIPE_BYTES = 128 * 1024

_NO_HEADERS: list[tuple[str, bytes]] = []  # shared: the batch builder only reads it
_BATCH_HEADER = 61  # bytes of a v2 record batch's header, counted in every record_size()
# A batch the broker took no record of, whose records can be sent again as they are.
_NOT_WRITTEN = (OutOfOrderSequenceNumber,)


class UnknownTopicError(LookupError):
    pass


class OutputsRefused(StopWithoutCommit):
    """The broker refused records, and these outputs cannot send the rest again by themselves (a
    transactional producer, whose transaction must be aborted): `records` are those of the refused
    batches (not those that failed only because they came after one)."""

    def __init__(self, message: str, records: list[Output]):
        super().__init__(message)
        self.records = records


def _held_bytes(size: int, records: list[Output]) -> int:
    """What a batch of `size` bytes holds until it is acknowledged: its bytes twice (in the batch, and in its
    records kept to be sent again) and each record's own objects, as its first record's (a batch of a
    changelog partition holds changelog records only)."""
    return 2 * size + len(records) * (HELD_RECORD_BYTES if records[0].source is not None else HELD_CHANGE_BYTES)


class _Sent(NamedTuple):
    future: asyncio.Future[Any]
    topic: str
    partition: int
    records: list[Output]


class Outputs:
    """Batches per (topic, partition); `flush` hands them to the producer, `wait_acked` awaits the acks.

    `renew` builds a producer like the first one, to replace it after a refusal; `on_refused` is the
    error policy for a refused record (it may append a dead letter, or raise).
    """

    def __init__(
        self,
        producer: AIOKafkaProducer,
        partition_counts: dict[str, int],
        counters: Counters,
        limits: Limits | None = None,
        renew: Callable[[], AIOKafkaProducer] | None = None,
        on_refused: OnRefused | None = None,
    ):
        self.producer = producer
        self._encoding = batch_settings(producer)  # None: encoded headers are decoded for the producer's batches
        self.sent = 0
        self.limits: Limits = limits or {}
        self._partition_counts = partition_counts
        self._counters = counters
        self._renew = renew
        self._on_refused = on_refused
        # Per target: the batch being filled, and the records it holds (kept until they are acknowledged).
        self._open: dict[tuple[str, int], _OpenBatch] = {}
        self._full: deque[tuple[str, int, _OpenBatch]] = deque()
        self._inflight: list[_Sent] = []
        self._unacked_bytes = 0  # of the batches handed to the producer whose send is not done
        self._renewing = asyncio.Lock()  # tasks flush while the commit cycle sends refused batches again
        self._round_robin = itertools.count()
        self._traceparent: list[tuple[str, bytes]] = [(TRACEPARENT, b"")]
        self.acked_ends: dict[tuple[str, int], int] = {}

    def partitions(self, topic: str) -> int:
        try:
            return self._partition_counts[topic]
        except KeyError:
            raise UnknownTopicError(f"topic '{topic}' is not an output of this app") from None

    def append(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers = (),
        partition: int | None = None,
        timestamp_ms: int | None = None,
        source: Any = None,
        processor: str = "",
    ) -> None:
        if partition is None:
            count = self._partition_counts.get(topic) or self.partitions(topic)  # raises for an unknown topic
            # partition_for, without its frame (dead letters come through here at the rate of the records)
            partition = (
                (murmurhash2(key, KAFKA_SEED) & POSITIVE) % count
                if key is not None
                else next(self._round_robin) % count
            )
        self._add((topic, partition), Output(topic, key, value, headers, timestamp_ms, source, processor))

    def append_encoded(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: EncodedHeaders,
        timestamp_ms: int | None,
        processor: str,
    ) -> None:
        """`append` for a record whose headers come encoded (a dead letter), to its key's partition: into a batch
        encoded by the runtime, which takes the partition's other records too (an open batch of aiokafka's there
        is closed first). A producer that is not aiokafka's is given the headers decoded."""
        count = self._partition_counts.get(topic) or self.partitions(topic)
        partition = (
            (murmurhash2(key, KAFKA_SEED) & POSITIVE) % count if key is not None else next(self._round_robin) % count
        )
        target, record = (topic, partition), Output(topic, key, value, headers, timestamp_ms, None, processor)
        if self._encoding is None:
            self._add(target, record)
            return
        open_batch = self._open.get(target)
        if open_batch is not None:
            if open_batch.builder.__class__ is EncodedBatch:
                held = open_batch.records
                if open_batch.append(len(held), timestamp_ms, key, value, headers) is not None:
                    held.append(record)
                    return
            self._full.append((*target, open_batch))
        builder = EncodedBatch(self._encoding)
        self._open[target] = _OpenBatch(builder, [record], builder.append)
        builder.append(0, timestamp_ms, key, value, headers)

    def append_all(self, records: Iterable[Output]) -> None:
        """Append output records, each to its partition by Kafka's partitioner. The common case, a record
        without headers whose batch has room, is done here, without a call per record."""
        add, counts, round_robin, murmur, seed, opened = (
            self._add,
            self._partition_counts,
            self._round_robin,
            murmurhash2,
            KAFKA_SEED,
            self._open,
        )
        for record in records:
            topic, key = record.topic, record.key
            if key is None:
                target = (topic, next(round_robin) % self.partitions(topic))
            else:
                target = (topic, (murmur(key, seed) & POSITIVE) % counts[topic])  # partition_for, without its frame
            if not record.headers:
                open_batch = opened.get(target)
                if open_batch is not None:
                    held = open_batch.records
                    if open_batch.append(len(held), record.timestamp_ms, key, record.value, _NO_HEADERS) is not None:
                        held.append(record)
                        continue
            add(target, record)

    def append_changes(self, topic: str, partition: int, changes: Iterable[tuple[bytes, bytes | None]]) -> None:
        """A store's changelog records, all to one partition, without headers: the open batch is looked up
        once, not per record (a store of many keys logs about as many records as it takes in)."""
        target, add = (topic, partition), self._add
        open_batch = self._open.get(target)
        for key, value in changes:
            record = Output(topic, key, value, (), None, None, "")
            if open_batch is not None:
                held = open_batch.records
                if open_batch.append(len(held), None, key, value, _NO_HEADERS) is not None:
                    held.append(record)
                    continue
            add(target, record)
            open_batch = self._open[target]

    def _add(self, target: tuple[str, int], record: Output) -> None:
        key, value, headers, timestamp_ms = record.key, record.value, record.headers, record.timestamp_ms
        # aiokafka's batch builder takes lists only, and only reads them (it encodes them right away),
        # so a traceparent goes in a list kept for it.
        kind = headers.__class__
        header_list: Any
        if kind is EncodedHeaders:  # not through `append_encoded`: sent again, say
            header_list = headers.decoded()  # type: ignore[union-attr]
        elif kind is TRACEPARENT_CLASS:
            header_list = self._traceparent
            header_list[0] = (TRACEPARENT, headers)
        else:
            header_list = _NO_HEADERS if not headers else headers if kind is list else list(headers)  # type: ignore[arg-type]
        open_batch = self._open.get(target)
        if open_batch is not None:
            held = open_batch.records
            if open_batch.append(len(held), timestamp_ms, key, value, header_list) is not None:
                held.append(record)  # the common case: the open batch has room
                return
            self._full.append((*target, open_batch))  # full: it goes out with the next flush
        open_batch = self._open[target] = self._new_batch()
        open_batch.append(0, timestamp_ms, key, value, header_list)
        open_batch.records.append(record)

    def _new_batch(self) -> _OpenBatch:
        builder = self.producer.create_batch()
        return _OpenBatch(builder, [], batch_append(builder))

    @property
    def pending(self) -> int:
        """Records appended but not yet handed to the producer."""
        open_records = sum(len(batch.records) for batch in self._open.values())
        return open_records + sum(len(batch.records) for *_, batch in self._full)

    async def flush(self, keep_filling: bool = False) -> None:
        """Hand the batches to the producer (returns once they are queued, not acknowledged); with
        `keep_filling` (a task with more records queued), those below `RIPE_BYTES` stay open to fill."""
        async with self._renewing:
            await self._flush(keep_filling)

    async def _flush(self, keep_filling: bool = False) -> None:
        # A batch leaves `_full` only once the producer has it: a commit cancelled meanwhile loses none.
        full = self._full
        if keep_filling:
            ripe = [target for target, open_batch in self._open.items() if open_batch.builder.size() >= RIPE_BYTES]
            full.extend((*target, self._open.pop(target)) for target in ripe)
        else:
            full.extend((*target, open_batch) for target, open_batch in self._open.items())
            self._open = {}
        while full:
            topic, partition, open_batch = full[0]
            builder, records = open_batch.builder, open_batch.records
            size = builder.size()
            limits = self.limits.get(topic)
            if limits is not None and len(records) > 1 and size > limits.max_bytes:
                full.popleft()  # the producer's batches outgrow the topic: smaller ones, in order
                parts = [
                    (topic, partition, batch)
                    for part in self._split(records, limits.max_bytes)
                    for batch in self._batches_of(part)
                ]
                full.extendleft(reversed(parts))
                continue
            held = _held_bytes(size, records)
            if self._unacked_bytes and self._unacked_bytes + held > UNACKED_BYTES:
                await self._room_for(held)
            set_record_count(builder, len(records))
            # Closed, it goes out at once: aiokafka holds an open batch for linger_ms, and the next batch of
            # its partition waits until it has left (a task idled about 5 ms every 30 ms for it).
            builder.close()
            try:
                future = await self.producer.send_batch(builder, topic, partition=partition)
            except IllegalOperation as error:  # the transaction broke; a refused permission is what to tell
                broke = transaction_error(self.producer)
                if not isinstance(broke, AUTHORIZATION_ERRORS):
                    raise
                raise broke from error
            full.popleft()
            self._unacked_bytes += held
            future.add_done_callback(functools.partial(self._acked, topic, partition, len(records), held))
            self._inflight.append(_Sent(future, topic, partition, records))
            self._counters.produced += len(records)
            self.sent += len(records)
        self._inflight = [sent for sent in self._inflight if not sent.future.done() or self._failed(sent)]

    def discard(self) -> None:
        """Drop batches not yet handed to the producer, and forget those sent (their transaction aborted),
        failures included."""
        for sent in self._inflight:
            if sent.future.done() and not sent.future.cancelled():
                sent.future.exception()
        self._full, self._open, self._inflight = deque(), {}, []

    async def _room_for(self, held: int) -> None:
        """Wait for sends, oldest first, until `held` more bytes fit (a failed send frees its room too:
        `wait_acked` reports it), or none is left to wait for."""
        for sent in self._inflight:
            if self._unacked_bytes + held <= UNACKED_BYTES:
                return
            await asyncio.wait((sent.future,))

    def _acked(self, topic: str, partition: int, count: int, held: int, future: asyncio.Future[Any]) -> None:
        self._unacked_bytes -= held
        if future.cancelled() or future.exception() is not None:
            return
        end = future.result().offset + count
        target = (topic, partition)
        if end > self.acked_ends.get(target, 0):
            self.acked_ends[target] = end

    async def wait_acked(self) -> None:
        """Flush, then wait until the broker acknowledged everything sent so far; raise if any failed.

        Records the broker refused go to `on_refused`, and the records sent with them are sent again.
        Batches stay in `_inflight` until they are acknowledged or sent again, so a commit cancelled
        half-way leaves them to the next one.
        """
        await self.flush()
        waiting = list(self._inflight)
        while waiting:
            await asyncio.wait([sent.future for sent in waiting])
            if not any([self._failed(sent) for sent in waiting]):
                break
            if self._on_refused is None:
                raise self._refusal()
            waiting = await self._send_again()
        self._inflight = [sent for sent in self._inflight if not sent.future.done() or self._failed(sent)]

    async def _send_again(self) -> list[_Sent]:
        """A new producer sends what was not written, a refused batch one record at a time, and a record
        refused alone goes to the error policy; returns the batches sent."""
        async with self._renewing:
            # Batches the tasks sent meanwhile, through the same producer, come after the refused ones.
            if self._inflight:
                await asyncio.wait([sent.future for sent in self._inflight])
            failed = [sent for sent in self._inflight if self._failed(sent)]
            if not failed:  # sent again by a commit before this one
                return list(self._inflight)
            assert self._renew is not None and self._on_refused is not None
            log.warning(
                "the broker refused records in %d batches (%s); sending them again with a new producer",
                len(failed),
                ", ".join(sorted({f"{sent.topic}[{sent.partition}]" for sent in failed})),
            )
            await asyncio.shield(self._renew_producer(self._renew))
            self._inflight = []
            self._send_each_again(failed, self._on_refused)
            await self._flush()
            return list(self._inflight)

    async def renew_producer(self) -> None:
        """A new producer like the first: a transactional one fenced when its transaction outlived its timeout
        is replaced by one with the same id, whose start fences the old one for good."""
        assert self._renew is not None, "renewing needs a way to build the producer"
        await self._renew_producer(self._renew)

    async def _renew_producer(self, renew: Callable[[], AIOKafkaProducer]) -> None:
        """The old producer's sequence numbers are behind the broker's: it cannot write to those partitions."""
        old, self.producer = self.producer, renew()
        self._encoding = batch_settings(self.producer)
        await old.stop()
        await self.producer.start()

    def _failed(self, sent: _Sent) -> bool:
        """A done send: False when acknowledged, True when the broker refused records (kept for
        `wait_acked`); any other failure is raised."""
        error = sent.future.exception()
        if error is None:
            return False
        if not isinstance(error, REFUSALS + _NOT_WRITTEN):
            raise error
        return True

    def _refusal(self) -> OutputsRefused:
        refused = [sent for sent in self._inflight if isinstance(sent.future.exception(), REFUSALS)]
        first = refused[0] if refused else self._inflight[0]
        error = first.future.exception()
        failure = OutputsRefused(
            f"the broker refused a batch of {len(first.records)} records for {first.topic}[{first.partition}]: "
            f"{type(error).__name__}: {error}",
            [record for sent in refused for record in sent.records],
        )
        failure.__cause__ = error
        return failure

    async def probe(self, records: list[Output]) -> list[Refusal]:
        """Which of `records` the broker refuses: each is sent alone in a transaction that is then
        aborted, by a new producer after each refusal (the old one cannot write to that partition)."""
        assert self._renew is not None, "probing needs a way to renew the producer"
        refused: list[Refusal] = []
        while records:
            await self._renew_producer(self._renew)
            await self.producer.begin_transaction()
            self._full.extend(self._alone(records))
            await self._flush()
            sent, self._inflight = self._inflight, []
            await asyncio.wait([attempt.future for attempt in sent])
            await self.producer.abort_transaction()
            self._counters.produced -= len(sent)
            self.sent -= len(sent)
            found = len(refused)
            records = []
            for attempt in sent:
                error = attempt.future.exception()
                if isinstance(error, REFUSALS):
                    refused.append(Refusal(attempt.records[0], error))
                elif isinstance(error, _NOT_WRITTEN):  # after a refused one: tried again
                    records.append(attempt.records[0])
                elif error is not None:
                    raise error
            if records and len(refused) == found:
                raise OutputsRefused("the broker refused records but none of them alone", records)
        await self._renew_producer(self._renew)
        return refused

    def _alone(self, records: list[Output]) -> list[tuple[str, int, _OpenBatch]]:
        """Each record in a batch of its own, to its key's partition (a key-less one to partition 0: the
        topic's limits are the same for every partition)."""
        alone = []
        for record in records:
            topic, key = record.topic, record.key
            partition = partition_for(key, self._partition_counts[topic]) if key is not None else 0
            alone.append((topic, partition, self._batches_of([record])[0]))
        return alone

    def _send_each_again(self, failed: list[_Sent], on_refused: OnRefused) -> None:
        # Ahead of every batch appended since, which hold later records; a refused batch one record each.
        again: list[tuple[str, int, _OpenBatch]] = []
        for sent in failed:
            error = sent.future.exception()
            assert isinstance(error, Exception)
            self._counters.produced -= len(sent.records)
            self.sent -= len(sent.records)
            if len(sent.records) == 1 and not isinstance(error, _NOT_WRITTEN):
                on_refused(sent.records[0], error, self)
                continue
            parts = [sent.records] if isinstance(error, _NOT_WRITTEN) else [[record] for record in sent.records]
            again.extend((sent.topic, sent.partition, batch) for part in parts for batch in self._batches_of(part))
        self._full.extendleft(reversed(again))

    def _batches_of(self, records: list[Output]) -> list[_OpenBatch]:
        """New batches holding `records`, in order."""
        batches: list[_OpenBatch] = []
        for record in records:
            key, value, headers, timestamp_ms = record.key, record.value, record.headers, record.timestamp_ms
            header_list = as_header_list(headers)
            last = batches[-1] if batches else None
            if last is None or last.append(len(last.records), timestamp_ms, key, value, header_list) is None:
                last = self._new_batch()
                batches.append(last)
                last.append(0, timestamp_ms, key, value, header_list)
            last.records.append(record)
        return batches

    @staticmethod
    def _split(records: list[Output], max_bytes: int) -> list[list[Output]]:
        """Records in runs whose batch stays within `max_bytes` (each record fits alone: `send` checked)."""
        parts: list[list[Output]] = [[]]
        size = _BATCH_HEADER
        for record in records:
            grows = record_size(record.key, record.value, record.headers) - _BATCH_HEADER
            if parts[-1] and size + grows > max_bytes:
                parts.append([])
                size = _BATCH_HEADER
            parts[-1].append(record)
            size += grows
        return parts
