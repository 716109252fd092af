"""The per-record loop: one input partition's records, in order, through the task's processor.

Each record is decoded (with its event time, where its topic says where to find it), advances the
task's stream time, and is processed; a record that cannot be decoded, or whose processing raises,
goes to the error policy, and nothing it sent escapes. The loop checks `interrupted` before each
record: the task sets it to end the batch there (it stops, a commit waits for its turn, records came
for an input it had none of), and the loop sets it after a record that brings a stream-time
punctuation due. The offset and the counters are brought up to date once per batch, by the task's
`on_batch_done`: no commit can run inside a batch, as the batch holds the task's turn.

There are two loops: the plain one, and one with a span around each sampled record and its
processing time measured. They share every path but the call itself, and tests run both. A merge
processor's records come one at a time instead, each decoded while it waits at the head of its queue
(`decode`) and processed once chosen (`process_chosen`), through the same policies and spans. A processor
with concurrency has its records decoded here, in order, and handed over to be processed several at a
time (`runtime/task/in_flight.py`), each with a context of its own (`_process_in_flight`).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiokafka import TopicPartition

from processors.processor import Processor
from processors.record import Record
from runtime.config.processors import ConcurrencyConfig, ConcurrencyOrder
from runtime.kafka.outputs import Outputs
from runtime.task.context import TaskContext
from runtime.task.event_time import RecordBuilder, stamping
from runtime.task.failures import Stage
from runtime.task.in_flight import InFlight
from runtime.telemetry.span_scopes import ProcessScope
from runtime.telemetry.trace_headers import CARRIED_CLASSES, UNTRACED, TraceDecision

if TYPE_CHECKING:
    from runtime.task.task import TaskServices

BatchDone = Callable[[TopicPartition, "int | None", int], None]
"""Called once per batch, also when it raises: its partition, the offset after the last record
handled (None if none was), and how many records were processed."""


async def settle(result: Awaitable[None] | None) -> None:
    """Await what a processor method returned, if it was an `async def`."""
    if inspect.isawaitable(result):
        await result


class RecordLoop:
    """Processes a task's batches; one per task."""

    def __init__(
        self,
        name: str,
        inputs: list[TopicPartition],
        processor: Processor,
        context: TaskContext,
        services: TaskServices,
        outputs: Outputs,
        on_batch_done: BatchDone,
        concurrency: ConcurrencyConfig | None = None,
        on_finish: Callable[[], None] = lambda: None,
        on_failure: Callable[[], None] = lambda: None,
    ):
        self.interrupted = False
        self.builders: dict[str, RecordBuilder] = {}
        for tp in inputs:
            timestamp_of = services.timestamps.get(tp.topic)
            self.builders[tp.topic] = Record if timestamp_of is None else stamping(timestamp_of)
        self._name = name
        self._processor = processor
        self._context = context
        self._services = services
        self._outputs = outputs
        self.on_batch_done = on_batch_done
        self._is_async = inspect.iscoroutinefunction(processor.process)
        self.in_flight: InFlight | None = None
        if concurrency is not None and concurrency.concurrent:
            metrics = services.telemetry.metrics
            on_wait = (lambda ms: metrics.record_key_wait(ms, name)) if metrics.enabled else None
            self.in_flight = InFlight(concurrency.max_in_flight, concurrency.order is ConcurrencyOrder.KEY,
                                      self._process_in_flight, on_finish, on_failure, on_wait)  # fmt: skip

    async def process(self, tp: TopicPartition, records: list[Any]) -> list[Any]:
        """Process `records` of `tp` in order; returns those left for later when interrupted."""
        if self.in_flight is not None:
            return await self._hand_over(tp, records, self.in_flight)
        telemetry = self._services.telemetry
        if telemetry.tracer.enabled or telemetry.metrics.enabled:
            return await self._process_observed(tp, records)
        key_serde, value_serde = self._services.serdes[tp.topic]
        decode_key, decode_value = key_serde.deserialize, value_serde.deserialize
        build = self.builders[tp.topic]
        process, context, is_async = self._processor.process, self._context, self._is_async
        pending = context.pending
        stream_time, punctuation_due = context.latest_timestamp, context.next_stream_time_due()
        processed = 0
        done: int | None = None  # the offset after the last record handled
        try:
            for raw in records:
                if self.interrupted:
                    return records[records.index(raw) :]
                try:
                    record = build(
                        raw.topic,
                        raw.partition,
                        raw.offset,
                        raw.timestamp,
                        None if raw.key is None else decode_key(raw.key),
                        None if raw.value is None else decode_value(raw.value),
                        raw.headers,
                    )
                except Exception as error:  # any decoding error, or event time not found, goes to the policy
                    self._undecodable(raw, error)
                    done = raw.offset + 1
                    continue
                timestamp = record.timestamp
                if timestamp > stream_time:
                    stream_time = context.latest_timestamp = timestamp
                    if timestamp >= punctuation_due:
                        self.interrupted = True  # after this record
                released = len(pending)
                context.source, context.output_time = raw, timestamp
                try:
                    if is_async:
                        await process(record, context)  # type: ignore[misc]
                    else:
                        process(record, context)
                except Exception as error:  # any processor error goes to the policy
                    self._failed(raw, error, released)
                else:
                    processed += 1
                done = raw.offset + 1
        finally:
            context.source = context.output_time = None  # punctuations' outputs belong to no record
            self.on_batch_done(tp, done, processed)
        return []

    async def _process_observed(self, tp: TopicPartition, records: list[Any]) -> list[Any]:
        """`process`'s loop with a span around each record and its processing time measured;
        the two loops share every path but the call itself (tests run both)."""
        key_serde, value_serde = self._services.serdes[tp.topic]
        decode_key, decode_value = key_serde.deserialize, value_serde.deserialize
        build = self.builders[tp.topic]
        process, context, is_async = self._processor.process, self._context, self._is_async
        tracer, metrics = self._services.telemetry.tracer, self._services.telemetry.metrics
        start_span, timed, name = tracer.start_process_span, metrics.enabled, self._name
        carried_classes = CARRIED_CLASSES
        pending = context.pending
        stream_time, punctuation_due = context.latest_timestamp, context.next_stream_time_due()
        processed = 0
        done: int | None = None  # the offset after the last record handled
        try:
            with tracer.batch_context():
                for raw, decision in zip(records, tracer.decide(records), strict=True):
                    if self.interrupted:
                        return records[records.index(raw) :]
                    try:
                        record = build(
                            raw.topic,
                            raw.partition,
                            raw.offset,
                            raw.timestamp,
                            None if raw.key is None else decode_key(raw.key),
                            None if raw.value is None else decode_value(raw.value),
                            raw.headers,
                        )
                    except Exception as error:  # any decoding error, or event time not found, goes to the policy
                        self._undecodable(raw, error)
                        done = raw.offset + 1
                        continue
                    timestamp = record.timestamp
                    if timestamp > stream_time:
                        stream_time = context.latest_timestamp = timestamp
                        if timestamp >= punctuation_due:
                            self.interrupted = True  # after this record
                    released = len(pending)
                    context.source, context.output_time = raw, timestamp
                    started = time.perf_counter() if timed else 0.0
                    try:
                        if decision.__class__ in carried_classes:  # no span: the decision is what outputs carry
                            context.trace_fields = decision  # type: ignore[assignment]
                            result = process(record, context)
                            if is_async:
                                await result  # type: ignore[misc]
                        else:
                            scope = start_span(raw.topic, raw.partition, raw.offset, raw.key, raw.headers, None,
                                               decision)  # fmt: skip
                            await self._process_in_span(scope, record)
                    except Exception as error:  # any processor error goes to the policy
                        self._failed(raw, error, released)
                    else:
                        processed += 1
                    if timed:
                        metrics.record_processing((time.perf_counter() - started) * 1000, name)
                    done = raw.offset + 1
        finally:
            context.trace_fields, context.source, context.output_time = UNTRACED, None, None  # nor to a record
            self.on_batch_done(tp, done, processed)
        return []

    async def _hand_over(self, tp: TopicPartition, records: list[Any], in_flight: InFlight) -> list[Any]:
        """`process` for a processor with concurrency: each record decoded and its stream time taken in
        offset order, as the loops above do, then handed over to be processed among others in flight;
        they count as processed, and their outputs are released, as each finishes."""
        tracer = self._services.telemetry.tracer
        decisions = tracer.decide(records) if tracer.enabled else [UNTRACED] * len(records)
        done: int | None = None  # the offset after the last record handed over
        try:
            with tracer.batch_context():  # the chains started here carry it
                for index, raw in enumerate(records):
                    if self.interrupted:
                        return records[index:]
                    record = self.decode(tp, raw)
                    if record is not None:
                        self._advance_stream_time(record.timestamp)
                        await in_flight.submit(raw, record, decisions[index], self._context.latest_timestamp)
                    done = raw.offset + 1
        finally:
            self.on_batch_done(tp, done, 0)
        return []

    async def _process_in_flight(self, raw: Any, record: Record, decision: TraceDecision, stream_time: int) -> None:
        """One record among several in flight, with a context of its own (its stream time is as of the record,
        however many records were handed over since): its outputs are released when it succeeds, and dropped
        when it fails (the policy decides; under `fail` this raises)."""
        context = self._context.for_record(raw, record.timestamp, stream_time)
        tracer, metrics = self._services.telemetry.tracer, self._services.telemetry.metrics
        started = time.perf_counter() if metrics.enabled else 0.0
        try:
            if decision.__class__ in CARRIED_CLASSES:  # no span: the decision is what outputs carry
                context.trace_fields = decision  # type: ignore[assignment]
                await settle(self._processor.process(record, context))
            else:
                scope = tracer.start_process_span(raw.topic, raw.partition, raw.offset, raw.key, raw.headers, None,
                                                  decision)  # fmt: skip
                await self._process_in_span(scope, record, context)
        except Exception as error:  # any processor error goes to the policy
            self._services.failures.handle(Stage.PROCESSING, self._name, raw, error, self._outputs)
        else:
            self._outputs.append_all(context.pending)
            self._services.counters.processed += 1
        if metrics.enabled:
            metrics.record_processing((time.perf_counter() - started) * 1000, self._name)

    def decode(self, tp: TopicPartition, raw: Any) -> Record | None:
        """One record decoded on its own: the head of a queue a merge processor sees, or a record handed over
        to be processed in flight. One that cannot be decoded goes to the deserialization policy, and None is
        returned (the caller counts its offset as done)."""
        key_serde, value_serde = self._services.serdes[tp.topic]
        try:
            return self.builders[tp.topic](
                raw.topic,
                raw.partition,
                raw.offset,
                raw.timestamp,
                None if raw.key is None else key_serde.deserialize(raw.key),
                None if raw.value is None else value_serde.deserialize(raw.value),
                raw.headers,
            )
        except Exception as error:  # any decoding error, or event time not found, goes to the policy
            self._undecodable(raw, error)
            return None

    async def process_chosen(self, raw: Any, record: Record) -> int:
        """One record a merge processor chose, as the loops process each of theirs: 1 when it was
        processed, 0 when it failed and the policy went on; the caller brings the offsets up to date."""
        context = self._context
        timestamp = record.timestamp
        self._advance_stream_time(timestamp)
        telemetry = self._services.telemetry
        tracer, metrics = telemetry.tracer, telemetry.metrics
        released = len(context.pending)
        context.source, context.output_time = raw, timestamp
        started = time.perf_counter() if metrics.enabled else 0.0
        try:
            if tracer.enabled:
                (decision,) = tracer.decide([raw])
                if decision.__class__ in CARRIED_CLASSES:
                    context.trace_fields = decision  # type: ignore[assignment]
                    with tracer.batch_context():
                        await settle(self._processor.process(record, context))
                else:
                    scope = tracer.start_process_span(raw.topic, raw.partition, raw.offset, raw.key, raw.headers,
                                                      None, decision)  # fmt: skip
                    await self._process_in_span(scope, record)
            elif self._is_async:
                await self._processor.process(record, context)  # type: ignore[misc]
            else:
                self._processor.process(record, context)
        except Exception as error:  # any processor error goes to the policy
            self._failed(raw, error, released)
            return 0
        finally:
            context.trace_fields, context.source, context.output_time = UNTRACED, None, None
            if metrics.enabled:
                metrics.record_processing((time.perf_counter() - started) * 1000, self._name)
        return 1

    def _advance_stream_time(self, timestamp: int) -> None:
        """As the loops do inline: a record's time moves stream time on; one that brings a stream-time
        punctuation due ends the batch after it."""
        context = self._context
        if timestamp > context.latest_timestamp:
            context.latest_timestamp = timestamp
            if timestamp >= context.next_stream_time_due():
                self.interrupted = True  # after this record

    async def _process_in_span(self, scope: ProcessScope, record: Record, context: TaskContext | None = None) -> None:
        """A sampled record (about one in a hundred at a 1% ratio), out of the loop's fast path; `context` is
        a record's own when it is processed in flight, else the task's."""
        context = self._context if context is None else context
        with scope:
            context.trace_fields = scope.fields
            await settle(self._processor.process(record, context))

    def _undecodable(self, raw: Any, error: Exception) -> None:
        self._services.failures.handle(Stage.DESERIALIZATION, self._name, raw, error, self._outputs)

    def _failed(self, raw: Any, error: Exception, released: int) -> None:
        del self._context.pending[released:]  # nothing of a failed record escapes
        self._services.failures.handle(Stage.PROCESSING, self._name, raw, error, self._outputs)
