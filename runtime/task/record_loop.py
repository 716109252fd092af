"""The per-record loop: one input partition's records, in order, through the task's processor.

Each record is decoded (with its event time, where its topic says where to find it), advances the
task's stream time, and is processed; a record that cannot be decoded, or whose processing raises,
goes to the error policy, and nothing it sent escapes. A record that would move stream time further
ahead of the wall clock than its topic allows goes to the deserialization policy instead
(`runtime/task/event_time_bounds.py`): the comparison is made only when stream time would move.
The loop checks `interrupted` before each record: the task sets it to end the batch there (it stops,
a commit waits for its turn, records came for an input it had none of). A stream-time punctuation that
a record brings due runs right after it, in the loop, before the next record, a table's run or the end
of the batch (and so before a commit or a stop can interrupt the batch): ending the batch for it
cost more than a record of a window processor whose punctuation falls due every millisecond (the other
paths still end their batch after such a record, and the task runs it in its next step). The offset
and the counters are brought up to date once per batch, by the task's `on_batch_done`: no commit can
run inside a batch, as the batch holds the task's turn. The loop lets the event loop run every half
second of processing (`runtime/task/pace.py`), for the consumer's heartbeat and the poll loop: a
synchronous `process` never yields by itself.

The loop (`process`, for a processor without concurrency, telemetry on or off) does everything inline:
it is the fast path. Only a record the tracer sampled leaves it, for a span of its own. The other paths
take a record through the same steps, `decode`, `_advance_stream_time` and `_process_one` (a span
around a sampled record, its processing time measured): a merge processor's records, one at a time,
each decoded while it waits at the head of its queue and processed once chosen (`process_chosen`); and
a processor with concurrency, whose records are decoded here, in order, and handed over to be processed
several at a time (`runtime/task/in_flight.py`), each with a context of its own. Telemetry on, unsampled
records stay in the loop because the step's two calls a record cost 1,700 instructions of about 49,000
(3.4%, measured on the stateless app at a sampling ratio of 0); with telemetry off the loop's checks of
it cost a few. Tests run the loop with telemetry off and on both.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from aiokafka import TopicPartition

from processors.processor import Processor
from processors.record import Record
from runtime.config.processors import ConcurrencyConfig, ConcurrencyOrder
from runtime.config.topics import DEFAULT_MAX_AHEAD_MS
from runtime.kafka.outputs import Outputs
from runtime.task.context import TaskContext
from runtime.task.event_time import RecordBuilder, stamping
from runtime.task.event_time_bounds import AheadGuard, EventTimeAhead
from runtime.task.failures import Stage
from runtime.task.in_flight import InFlight
from runtime.task.pace import Pace
from runtime.task.upstream_progress import Stamp, UpstreamProgress, is_stamp
from runtime.telemetry.trace_headers import CARRIED_CLASSES, UNTRACED, TraceDecision

if TYPE_CHECKING:
    from runtime.task.punctuations import Punctuations
    from runtime.task.task import TaskServices

Outcome = int | Coroutine[Any, Any, int]
"""1 when a record was processed, 0 when it failed; a coroutine that gives it where something is awaited."""

BatchDone = Callable[[TopicPartition, "int | None", int], None]
"""Called once per batch, also when it raises: its partition, the offset after the last record
handled (None if none was), and how many records were processed."""


async def settle(result: Awaitable[None] | None) -> None:
    """Await what a processor method returned, if it was an `async def` (None, the common case, skips the
    check for an awaitable, which costs an abstract class's `isinstance`)."""
    if result is not None and inspect.isawaitable(result):
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
        punctuations: Punctuations,
        concurrency: ConcurrencyConfig | None = None,
        on_finish: Callable[[], None] = lambda: None,
        on_failure: Callable[[], None] = lambda: None,
    ):
        self.interrupted = False
        self._punctuations = punctuations
        self._pace = Pace()
        self.builders: dict[str, RecordBuilder] = {}
        for tp in inputs:
            timestamp_of = services.timestamps.get(tp.topic)
            self.builders[tp.topic] = Record if timestamp_of is None else stamping(timestamp_of)
        self._decoders = {topic: self._decoder(topic, services) for topic in self.builders}
        ahead = services.max_ahead_ms
        self._guards = {
            topic: AheadGuard(name, ahead.get(topic, DEFAULT_MAX_AHEAD_MS), services.clock, services.jumps)
            for topic in self.builders
        }
        self._name = name
        self._undecodable_route = services.failures.route(Stage.DESERIALIZATION, name)
        self._failed_route = services.failures.route(Stage.PROCESSING, name)
        self._processor = processor
        self._context = context
        self._services = services
        self._outputs = outputs
        self.on_batch_done = on_batch_done
        self._is_async = inspect.iscoroutinefunction(processor.process)
        self._process = processor.process
        self._tracer, self._metrics = services.telemetry.tracer, services.telemetry.metrics
        self._timed = self._metrics.enabled
        self.in_flight: InFlight | None = None
        if concurrency is not None and concurrency.concurrent:
            metrics = services.telemetry.metrics
            on_wait = (lambda ms: metrics.record_key_wait(ms, name)) if metrics.enabled else None
            self.in_flight = InFlight(
                concurrency.max_in_flight,
                concurrency.order is ConcurrencyOrder.KEY,
                self._process_in_flight,
                on_finish,
                on_failure,
                on_wait,
            )

    async def process(self, tp: TopicPartition, records: list[Any]) -> list[Any]:
        """Process `records` of `tp` in order; returns those left for later when interrupted."""
        progress = self._context.upstream
        if progress is not None and tp.topic == progress.topic:
            return await self._process_stamped(tp, records, progress)
        return await self._process_records(tp, records)

    async def _process_stamped(self, tp: TopicPartition, records: list[Any], progress: UpstreamProgress) -> list[Any]:
        """Records of a repartition topic: the stamps among them taken in their place, after the records
        before them, each holding stream time at the upstream tasks' progress (upstream_progress.py, step 2)."""
        context, start = self._context, 0
        for index, raw in enumerate(records):
            if not is_stamp(raw):
                continue
            if index > start:
                rest = await self._process_records(tp, records[start:index])
                if rest:
                    return rest + records[index:]
            start = index + 1
            try:
                progress.take(Stamp.decode(raw.value))
            except ValueError as error:  # msgspec's DecodeError among them
                self._undecodable(raw, error)
            context.hold_at(progress.watermark)
            if context.latest_timestamp >= context.next_stream_time_due():
                context.trace_fields, context.source = UNTRACED, None
                await self._punctuations.run_stream_time_due()
            self.on_batch_done(tp, raw.offset + 1, 0)
            if self.interrupted:
                return records[start:]
        return await self._process_records(tp, records[start:]) if start < len(records) else []

    async def _process_records(self, tp: TopicPartition, records: list[Any]) -> list[Any]:  # noqa: PLR0915 (one frame a record)
        if self.in_flight is not None:
            return await self._hand_over(tp, records, self.in_flight)
        key_serde, value_serde = self._services.serdes[tp.topic]
        decode_key, decode_value = key_serde.deserialize, value_serde.deserialize
        build = self.builders[tp.topic]
        process, context, is_async = self._processor.process, self._context, self._is_async
        tracer, timed, clock = self._tracer, self._timed, time.perf_counter
        traced, carried_classes = tracer.enabled, CARRIED_CLASSES
        decisions = tracer.decide(records) if traced else ()
        pending = context.pending
        stream_time, punctuation_due = context.latest_timestamp, context.next_stream_time_due()
        observed, watermark = context.observed_time, context.watermark  # stream time is `observed` held there
        guard = self._guards[tp.topic]
        alarm = guard.start(observed)
        processed = 0
        done: int | None = None  # the offset after the last record handled
        pace = self._pace
        countdown = pace.countdown
        punctuations = self._punctuations
        failed, outputs = self._failed_route, self._outputs
        try:
            with tracer.batch_context():
                for index, raw in enumerate(records):
                    countdown -= 1
                    if not countdown:
                        if pace.due():
                            await asyncio.sleep(0)  # the heartbeat and the poll loop run
                        countdown = pace.stride
                    if stream_time >= punctuation_due:  # brought due by the record before
                        context.trace_fields, context.source = UNTRACED, None  # its outputs are not a record's
                        await punctuations.run_stream_time_due()
                        punctuation_due = context.next_stream_time_due()
                    if self.interrupted:
                        return records[index:]
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
                    if timestamp > observed:
                        if timestamp > alarm:
                            try:
                                alarm = guard.judge(raw, timestamp, observed)
                            except EventTimeAhead as error:  # never moves stream time: to the policy
                                self._undecodable(raw, error)
                                done = raw.offset + 1
                                continue
                        observed = timestamp
                        stream_time = context.latest_timestamp = timestamp if timestamp < watermark else watermark
                    if traced:
                        decision = decisions[index]
                        if decision.__class__ not in carried_classes:  # sampled: in a span of its own
                            processed += await self._process_in_span(raw, record, decision, context)
                            done = raw.offset + 1
                            continue
                        context.trace_fields = decision  # type: ignore[assignment]
                    released = len(pending)
                    context.source, context.output_time = raw, timestamp
                    started = clock() if timed else 0.0
                    try:
                        if is_async:
                            await process(record, context)  # type: ignore[misc]
                        else:
                            process(record, context)
                    except Exception as error:  # any processor error goes to the policy
                        del pending[released:]  # nothing of a failed record escapes (as in `_failed`)
                        failed.handle(raw, error, outputs)
                    else:
                        processed += 1
                    if timed:
                        self._metrics.record_processing((clock() - started) * 1000, self._name)
                    done = raw.offset + 1
                if stream_time >= punctuation_due:  # brought due by the last record: before what comes next
                    context.trace_fields, context.source = UNTRACED, None
                    await punctuations.run_stream_time_due()
        finally:
            pace.countdown = countdown
            context.observed_time = observed
            context.trace_fields, context.source, context.output_time = UNTRACED, None, None  # nor to a record
            self.on_batch_done(tp, done, processed)
        return []

    async def _hand_over(self, tp: TopicPartition, records: list[Any], in_flight: InFlight) -> list[Any]:
        """`process` for a processor with concurrency: each record decoded and its stream time taken in
        offset order, as the loops do, then handed over to be processed among others in flight; they
        count as processed, and their outputs are released, as each finishes."""
        tracer = self._services.telemetry.tracer
        decisions = tracer.decide(records) if tracer.enabled else [UNTRACED] * len(records)
        done: int | None = None  # the offset after the last record handed over
        self._guards[tp.topic].start(self._context.latest_timestamp)
        try:
            with tracer.batch_context():  # the chains started here carry it
                for index, raw in enumerate(records):
                    if self.interrupted:
                        return records[index:]
                    record = self.decode(tp, raw)
                    if record is not None and self._advance_stream_time(raw, record.timestamp):
                        await in_flight.submit(raw, record, decisions[index], self._context.latest_timestamp)
                    done = raw.offset + 1
        finally:
            self.on_batch_done(tp, done, 0)
        return []

    async def _process_in_flight(self, raw: Any, record: Record, decision: TraceDecision, stream_time: int) -> None:
        """One record among several in flight, with a context of its own (its stream time is as of the record,
        however many records were handed over since): its outputs are released when it succeeds."""
        context = self._context.for_record(raw, record.timestamp, stream_time)
        outcome = self._process_one(raw, record, decision, context)
        if outcome if isinstance(outcome, int) else await outcome:
            self._outputs.append_all(context.pending)
            self._services.counters.processed += 1

    def decode(self, tp: TopicPartition, raw: Any) -> Record | None:
        """One record decoded, for every path but the loop, which does it inline: one that cannot be
        decoded goes to the deserialization policy, and None is returned (the caller counts its offset as
        done)."""
        return self._decoders[tp.topic](raw)

    def _decoder(self, topic: str, services: TaskServices) -> Callable[[Any], Record | None]:
        """`decode` for one topic, with its serdes and record builder bound once."""
        key_serde, value_serde = services.serdes[topic]
        build, decode_key, decode_value = self.builders[topic], key_serde.deserialize, value_serde.deserialize

        def decode(raw: Any) -> Record | None:
            try:
                return build(
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
                return None

        return decode

    async def process_chosen(self, raw: Any, record: Record) -> int:
        """One record a merge processor chose: 1 when it was processed, 0 when it failed and the policy
        went on; the caller brings the offsets up to date. Its event time is judged against the wall clock
        as of its choice."""
        self._guards[raw.topic].start(self._context.latest_timestamp)
        if not self._advance_stream_time(raw, record.timestamp):
            return 0
        tracer, context = self._services.telemetry.tracer, self._context
        decision = tracer.decide([raw])[0] if tracer.enabled else UNTRACED
        try:
            with tracer.batch_context():
                outcome = self._process_one(raw, record, decision, context)
                return outcome if isinstance(outcome, int) else await outcome
        finally:
            context.trace_fields, context.source, context.output_time = UNTRACED, None, None

    def _advance_stream_time(self, raw: Any, timestamp: int) -> bool:
        """As the loop does inline: a record's time moves stream time on, unless it is too far ahead
        (then the record goes to the deserialization policy, and False is returned); one that brings a
        stream-time punctuation due ends the batch after it."""
        context = self._context
        if timestamp > context.observed_time:
            guard = self._guards[raw.topic]
            if timestamp > guard.alarm:
                try:
                    guard.judge(raw, timestamp, context.observed_time)
                except EventTimeAhead as error:
                    self._undecodable(raw, error)
                    return False
            context.advance_to(timestamp)
            if context.latest_timestamp >= context.next_stream_time_due():
                self.interrupted = True  # after this record
        return True

    def _process_one(self, raw: Any, record: Record, decision: TraceDecision, context: TaskContext) -> Outcome:
        """The step every path but the loop takes for a decoded record: processed in a span when the
        tracer sampled it (about one in a hundred at a 1% ratio), else with the trace context its outputs
        carry, its processing time measured when metrics are on. 1 when it was processed; 0 when it raised,
        its outputs dropped and the processing policy applied (under `fail`, that raises).

        A coroutine gives that number where something must be awaited (a span, an `async def` processor):
        a plain processor's record, the common case, costs no coroutine (measured: 520 instructions a
        record of the 850 the step cost over the loop it replaced)."""
        if decision.__class__ not in CARRIED_CLASSES:
            return self._process_in_span(raw, record, decision, context)
        released = len(context.pending)
        context.source, context.output_time = raw, record.timestamp
        context.trace_fields = decision  # type: ignore[assignment]
        started = time.perf_counter() if self._timed else 0.0
        try:
            result = self._process(record, context)
        except Exception as error:  # any processor error goes to the policy
            return self._processed(raw, error, released, context, started)
        if result is not None and (self._is_async or inspect.isawaitable(result)):
            return self._awaited(result, raw, released, context, started)
        if self._timed:
            self._metrics.record_processing((time.perf_counter() - started) * 1000, self._name)
        return 1

    async def _awaited(
        self, result: Awaitable[None], raw: Any, released: int, context: TaskContext, started: float
    ) -> int:
        try:
            await result
        except Exception as error:  # any processor error goes to the policy
            return self._processed(raw, error, released, context, started)
        return self._processed(raw, None, released, context, started)

    async def _process_in_span(self, raw: Any, record: Record, decision: TraceDecision, context: TaskContext) -> int:
        released = len(context.pending)
        context.source, context.output_time = raw, record.timestamp
        started = time.perf_counter() if self._timed else 0.0
        scope = self._tracer.start_process_span(
            raw.topic, raw.partition, raw.offset, raw.key, raw.headers, None, decision
        )
        try:
            with scope:
                context.trace_fields = scope.fields
                await settle(self._process(record, context))
        except Exception as error:  # any processor error goes to the policy
            return self._processed(raw, error, released, context, started)
        return self._processed(raw, None, released, context, started)

    def _processed(self, raw: Any, error: Exception | None, released: int, context: TaskContext, started: float) -> int:
        """How `_process_one` ends: the processing time measured; a failure's outputs dropped, and the
        record to the policy."""
        if self._timed:
            self._metrics.record_processing((time.perf_counter() - started) * 1000, self._name)
        if error is None:
            return 1
        self._failed(raw, error, released, context)
        return 0

    def _undecodable(self, raw: Any, error: Exception) -> None:
        self._undecodable_route.handle(raw, error, self._outputs)

    def _failed(self, raw: Any, error: Exception, released: int, context: TaskContext) -> None:
        del context.pending[released:]  # nothing of a failed record escapes
        self._failed_route.handle(raw, error, self._outputs)
