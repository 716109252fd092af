"""The actor: one asyncio task per (processor, partition) that processes its records in order."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka import TopicPartition

from processors.processor import Processor
from processors.record import Record
from runtime.counters import Counters
from runtime.kafka.outputs import Outputs
from runtime.state.task_state import TaskState
from runtime.task.context import TaskContext, TopicSerdes
from runtime.task.failures import FailureHandler, Stage
from runtime.telemetry import Telemetry
from runtime.telemetry.tracing import ProcessScope
from stores import ReadOnlyStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, order=True)
class TaskId:
    processor: str
    partition: int

    def __str__(self) -> str:
        return f"{self.processor}[{self.partition}]"


class GuaranteeHooks(Protocol):
    """The guarantee's part in a task's life (implemented in runtime/guarantees/commit.py)."""

    async def start(self, task: Task) -> None:
        """Before the task restores or processes anything."""

    async def ready(self, task: Task) -> None:
        """After its stores are restored, before its input partitions are resumed."""

    async def before_batch(self, task: Task, tp: TopicPartition, records: list[Any]) -> None: ...

    async def after_batch(self, task: Task) -> None:
        """After each batch, and when a wait for records times out at `commit_due_in`."""

    def commit_due_in(self, task: Task) -> float | None:
        """Seconds until the task itself must commit, or None when the worker commits for it."""


class TaskFenced(Exception):
    """Another worker took this task over (its producer was fenced): stop, commit nothing."""


@dataclass
class TaskServices:
    """What every task of a worker shares."""

    failures: FailureHandler
    counters: Counters
    serdes: TopicSerdes
    hooks: GuaranteeHooks
    on_dequeue: Callable[[Task], None]
    restore: Callable[[TaskState], Awaitable[None]]
    on_ready: Callable[[Task], Awaitable[None]]
    global_stores: Mapping[str, ReadOnlyStore]
    telemetry: Telemetry


class Task:
    """Owns one processor instance; records arrive as lists through a queue the poll loop fills."""

    def __init__(
        self,
        task_id: TaskId,
        processor: Processor,
        context: TaskContext,
        inputs: list[TopicPartition],
        outputs: Outputs,
        services: TaskServices,
        end_offsets: Mapping[TopicPartition, int] | None = None,
        state: TaskState | None = None,
    ):
        self.id = task_id
        self.state = state
        self.outputs = outputs
        self.starting = True  # until restored and positioned: holds no record in flight
        self.inputs = inputs
        self.next_offsets: dict[TopicPartition, int] = {}
        self.queued = 0
        self._processor = processor
        self._context = context
        self._services = services
        self._end_offsets = end_offsets
        self._queue: deque[tuple[TopicPartition, list[Any]]] = deque()
        self._wakeup = asyncio.Event()
        self._stopping = False
        self._busy = False
        self._is_async = inspect.iscoroutinefunction(processor.process)
        self._runner: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._runner = asyncio.create_task(self._run(), name=f"task {self.id}")

    @property
    def runner(self) -> asyncio.Task[None]:
        assert self._runner is not None, "task not started"
        return self._runner

    @property
    def idle(self) -> bool:
        return self.queued == 0 and not self._busy

    def enqueue(self, tp: TopicPartition, records: list[Any]) -> None:
        self._queue.append((tp, records))
        self.queued += len(records)
        self._wakeup.set()

    def request_stop(self) -> None:
        """Stop after the record in flight; queued records are dropped (they were not committed)."""
        self._stopping = True
        self._wakeup.set()

    async def stop(self, timeout: float) -> None:
        self.request_stop()
        if self.starting:
            self.runner.cancel()  # no record in flight; a store keeps what its restore applied
        try:
            await asyncio.wait_for(asyncio.shield(self.runner), timeout)
        except TimeoutError:
            log.error("task %s did not finish its record within %.0fs; cancelling it", self.id, timeout)
            self.runner.cancel()
        except asyncio.CancelledError:
            if not self.runner.cancelled():
                raise
        except Exception:  # a failure of the task itself: the worker reports it
            pass

    def rewind(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Forget queued records and go back to `offsets` (the consumer was sought there)."""
        self._queue.clear()
        self.queued = 0
        self.next_offsets = dict(offsets)
        self._context.pending.clear()
        self._services.on_dequeue(self)

    async def _run(self) -> None:
        hooks = self._services.hooks
        await hooks.start(self)
        if self.state is not None:
            await self._services.restore(self.state)
        await self._services.on_ready(self)
        self.starting = False
        self._processor.init(self._context)
        try:
            while not self._stopping:
                await self._wait_for_work()
                if self._stopping:
                    break
                await self._punctuate()
                if self._queue:
                    tp, records = self._queue.popleft()
                    self._busy = True
                    try:
                        await self._process_batch(tp, records)
                        await self.outputs.flush()
                    finally:
                        self._busy = False
                        self.queued -= len(records)
                        self._services.on_dequeue(self)
                await hooks.after_batch(self)
        finally:
            self._queue.clear()
            self.queued = 0
            self._processor.close()

    async def _wait_for_work(self) -> None:
        if self._queue:
            return
        self._wakeup.clear()
        punctuators = self._context.punctuators
        timeout = max(0.0, min(p.due for p in punctuators) - time.monotonic()) if punctuators else None
        commit_due = self._services.hooks.commit_due_in(self)
        if commit_due is not None:
            timeout = commit_due if timeout is None else min(timeout, commit_due)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wakeup.wait(), timeout)

    async def _punctuate(self) -> None:
        now = time.monotonic()
        for punctuator in self._context.punctuators:
            if punctuator.due <= now:
                punctuator.due = now + punctuator.every_s
                result = punctuator.callback()
                if inspect.isawaitable(result):
                    await result
                self._release_outputs()

    async def _process_batch(self, tp: TopicPartition, records: list[Any]) -> None:
        end = self._end_offsets.get(tp) if self._end_offsets is not None else None
        if end is not None and records[-1].offset >= end:
            records = [raw for raw in records if raw.offset < end]
            if not records:
                return
        await self._services.hooks.before_batch(self, tp, records)
        telemetry = self._services.telemetry
        if telemetry.tracer.enabled or telemetry.metrics.enabled:
            await self._process_batch_observed(tp, records)
            return
        key_serde, value_serde = self._services.serdes[tp.topic]
        decode_key, decode_value = key_serde.deserialize, value_serde.deserialize
        process, context, counters = self._processor.process, self._context, self._services.counters
        failures, name, is_async = self._services.failures, self.id.processor, self._is_async
        pending = context.pending
        processed = 0
        done: int | None = None  # the offset after the last record handled
        try:
            for raw in records:
                if self._stopping:
                    return
                offset = raw.offset
                try:
                    record = Record(
                        raw.topic,
                        raw.partition,
                        offset,
                        raw.timestamp,
                        None if raw.key is None else decode_key(raw.key),
                        None if raw.value is None else decode_value(raw.value),
                        raw.headers,
                    )
                except Exception as error:  # any decoding error goes to the policy
                    failures.handle(Stage.DESERIALIZATION, name, raw, error, self.outputs)
                    done = self.next_offsets[tp] = offset + 1
                    continue
                released = len(pending)
                try:
                    if is_async:
                        await process(record, context)  # type: ignore[misc]
                    else:
                        process(record, context)
                except Exception as error:  # any processor error goes to the policy
                    del pending[released:]  # nothing of a failed record escapes
                    failures.handle(Stage.PROCESSING, name, raw, error, self.outputs)
                else:
                    processed += 1
                done = offset + 1
                if is_async:
                    # A commit can run while this batch awaits: an offset may only advance together
                    # with the outputs of the records before it.
                    self._release_outputs()
                    self.next_offsets[tp] = done
        finally:
            # A plain `process` never yields to the commit cycle inside a batch: the offset and the
            # counter are brought up to date once, here.
            if done is not None:
                self.next_offsets[tp] = done
            counters.processed += processed
            self._release_outputs()

    async def _process_batch_observed(self, tp: TopicPartition, records: list[Any]) -> None:
        """`_process_batch`'s loop with a span around each record and its processing time measured."""
        key_serde, value_serde = self._services.serdes[tp.topic]
        decode_key, decode_value = key_serde.deserialize, value_serde.deserialize
        process, context, counters = self._processor.process, self._context, self._services.counters
        failures, name, is_async = self._services.failures, self.id.processor, self._is_async
        tracer, metrics = self._services.telemetry.tracer, self._services.telemetry.metrics
        start_span, timed = tracer.start_process_span, metrics.enabled
        pending = context.pending
        processed = 0
        done: int | None = None  # the offset after the last record handled
        try:
            with tracer.batch_context():
                for raw, decision in zip(records, tracer.decide(records), strict=True):
                    if self._stopping:
                        return
                    offset = raw.offset
                    try:
                        record = Record(
                            raw.topic,
                            raw.partition,
                            offset,
                            raw.timestamp,
                            None if raw.key is None else decode_key(raw.key),
                            None if raw.value is None else decode_value(raw.value),
                            raw.headers,
                        )
                    except Exception as error:  # any decoding error goes to the policy
                        failures.handle(Stage.DESERIALIZATION, name, raw, error, self.outputs)
                        done = self.next_offsets[tp] = offset + 1
                        continue
                    released = len(pending)
                    started = time.perf_counter() if timed else 0.0
                    try:
                        kind = decision.__class__
                        if kind is bytes or kind is list or kind is tuple:  # no span: the outputs' context
                            context.trace_fields = decision  # type: ignore[assignment]
                            result = process(record, context)
                            if is_async:
                                await result  # type: ignore[misc]
                        else:
                            await self._process_in_span(
                                start_span(raw.topic, raw.partition, offset, raw.key, raw.headers, None, decision),
                                record,
                            )
                    except Exception as error:  # any processor error goes to the policy
                        del pending[released:]  # nothing of a failed record escapes
                        failures.handle(Stage.PROCESSING, name, raw, error, self.outputs)
                    else:
                        processed += 1
                    if timed:
                        metrics.record_processing((time.perf_counter() - started) * 1000, name)
                    done = offset + 1
                    if is_async:
                        self._release_outputs()  # see _process_batch
                        self.next_offsets[tp] = done
        finally:
            if done is not None:
                self.next_offsets[tp] = done
            counters.processed += processed
            context.trace_fields = ()  # punctuations' outputs belong to no record
            self._release_outputs()

    async def _process_in_span(self, scope: ProcessScope, record: Record) -> None:
        """A sampled record (about one in a hundred at a 1% ratio), out of the loop's fast path."""
        with scope:
            self._context.trace_fields = scope.fields
            result = self._processor.process(record, self._context)
            if self._is_async:
                await result  # type: ignore[misc]

    def _release_outputs(self) -> None:
        self.outputs.append_all(self._context.pending)
        self._context.pending.clear()

    def close_state(self) -> None:
        """Close the stores (after the final commit), so another worker on this machine can open them."""
        if self.state is not None:
            self.state.close()

    def mark_caught_up(self, tp: TopicPartition, end: int) -> None:
        """Every record below `end` was processed (gaps are compaction or transaction markers)."""
        self.next_offsets[tp] = max(self.next_offsets.get(tp, 0), end)


def build_task(
    task_id: TaskId,
    processor_class: type[Processor],
    app_id: str,
    params: Mapping[str, Any],
    outputs_allowed: frozenset[str],
    inputs: list[TopicPartition],
    outputs: Outputs,
    services: TaskServices,
    end_offsets: Mapping[TopicPartition, int] | None,
    state: TaskState | None = None,
) -> Task:
    context = TaskContext(
        app_id, task_id.processor, task_id.partition, params, outputs_allowed, services.serdes, services.global_stores,
        state,
    )  # fmt: skip
    return Task(task_id, processor_class(), context, inputs, outputs, services, end_offsets, state)
