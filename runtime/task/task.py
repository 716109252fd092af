"""The actor: one asyncio task per (processor, partition) that processes its records in order.

A task takes its turn (`Task.turn`) for each batch and each punctuation, and the commit protocol
(runtime/guarantees/commit.py) takes the same turn to prepare a commit: so a commit never sees
half a record, and a processor's `flush` never runs while it processes. A commit that waits for the
turn ends the batch in flight after its current record; the rest of the batch stays first in line.

A task with one input partition processes each list the poll loop hands over as a batch. One with
several (a processor with several co-partitioned inputs, or broadcast ones) processes their records in
timestamp order (`runtime/task/timestamp_order.py`), in runs of one partition's records, each through
the same record loop (`runtime/task/record_loop.py`). A merge processor's task lets the processor
choose instead (`runtime/task/choice_order.py`), one record at a time. The loop keeps the task's stream
time, and a stream-time punctuation that falls due runs right after the record that brought it, in the
loop (the paths of merge processors and of processors with concurrency end their batch after that
record instead, and the task runs it in its next step).

Broadcast inputs (`runtime/task/broadcast.py`) come from the task's own reader rather than the poll
loop; their positions are committed in the task's state, never in the consumer group.

A processor with concurrency has its records processed several at a time, outside the turn
(`runtime/task/in_flight.py`): a commit, and a punctuation, first wait until none is in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import operator
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from aiokafka import TopicPartition

from processors.errors import StopWorker
from processors.merge import MergeProcessor
from processors.processor import Processor
from runtime.config import AppConfig
from runtime.config.processors import ConcurrencyConfig
from runtime.counters import Counters
from runtime.errors import StopAfterCommit
from runtime.kafka.outputs import Outputs
from runtime.state.store_buffers import StoreBuffers
from runtime.state.task_state import TaskState
from runtime.task.broadcast import BroadcastReader, BroadcastSource
from runtime.task.choice_order import ChoiceOrder
from runtime.task.clock import SYSTEM_CLOCK, Clock
from runtime.task.commits import CommitBeforeProcessing, TaskCommit
from runtime.task.context import TaskContext, TopicSerdes
from runtime.task.event_time import TimestampOf, raw_event_time, timestamp_readers
from runtime.task.event_time_bounds import StreamTimeJumps
from runtime.task.failures import FailureHandler, Stage
from runtime.task.intake import Admission, BatchIntake, ChoiceIntake, ChooseFailed, Intake, TimestampIntake
from runtime.task.punctuations import PunctuationFailed, Punctuations
from runtime.task.record_loop import RecordLoop, settle
from runtime.task.timestamp_order import EventTimeOf, InputQueue, TimestampOrder
from runtime.task.upstream_progress import ProgressStamps
from runtime.telemetry import Telemetry
from stores import ReadOnlyView

log = logging.getLogger(__name__)


@dataclass(frozen=True, order=True)
class TaskId:
    processor: str
    partition: int

    def __str__(self) -> str:
        return f"{self.processor}[{self.partition}]"


class TaskPhase(StrEnum):
    CREATED = "created"  # built on assignment; its inputs are held until it runs
    RESTORING = "restoring"  # claimed from its previous owner, restoring its stores, then initialising
    RUNNING = "running"  # processing; takes part in commits
    CLOSED = "closed"  # its processor and stores are closed


class ProcessorStep(StrEnum):
    """The processor's step a task is in, for the line that names what a stop abandoned."""

    INIT = "init()"
    PUNCTUATION = "a punctuation"
    PROCESS = "process()"
    FLUSH = "flush()"
    CLOSE = "close()"


@dataclass
class TaskServices:
    """What every task of a worker shares."""

    failures: FailureHandler
    counters: Counters
    serdes: TopicSerdes
    global_stores: Mapping[str, ReadOnlyView]
    telemetry: Telemetry
    on_dequeue: Callable[[Task], None]
    commit_before_processing: CommitBeforeProcessing | None  # at-most-once only
    timestamps: Mapping[str, TimestampOf] = field(default_factory=dict)  # topics whose event time is not Kafka's
    # How far ahead of the wall clock each input topic's event times may be (None: no bound); a topic
    # not named has the YAML's default.
    max_ahead_ms: Mapping[str, int | None] = field(default_factory=dict)
    jumps: StreamTimeJumps = field(default_factory=StreamTimeJumps)  # the worker's log of stream-time jumps
    # A task with several inputs waits up to this long for one with nothing queued that Kafka still
    # has records of (`unfetched`), before it goes on without it.
    max_task_idle_s: float = 0.0
    unfetched: Callable[[TopicPartition], bool] = lambda tp: False
    broadcast: BroadcastSource | None = None  # for processors with broadcast inputs
    clock: Clock = SYSTEM_CLOCK  # the wall clock of punctuations
    # How long a leaving task waits for its records in flight before it abandons them, uncommitted.
    shutdown_timeout_s: float = 30.0
    store_buffers: StoreBuffers | None = None  # the bound on what stores hold until their commit

    @classmethod
    def of_app(
        cls,
        config: AppConfig,
        failures: FailureHandler,
        counters: Counters,
        serdes: TopicSerdes,
        global_stores: Mapping[str, ReadOnlyView],
        telemetry: Telemetry,
        on_dequeue: Callable[[Task], None],
        commit_before_processing: CommitBeforeProcessing | None,
    ) -> TaskServices:
        """With what the app's YAML sets for every task (event time and its bounds, `max_task_idle_ms`,
        `shutdown_timeout_s`): a worker and the test kit start from the same."""
        return cls(
            failures,
            counters,
            serdes,
            global_stores,
            telemetry,
            on_dequeue,
            commit_before_processing,
            timestamp_readers(config),
            {name: topic.max_ahead for name, topic in config.topics.items()},
            max_task_idle_s=config.max_task_idle_ms / 1000,
            shutdown_timeout_s=config.shutdown_timeout_s,
        )


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
        broadcast: BroadcastReader | None = None,
        concurrency: ConcurrencyConfig | None = None,
    ):
        self.id = task_id
        self.state = state
        self.outputs = outputs
        self.inputs = inputs  # the partitions the consumer group gave it
        self.broadcast = broadcast
        self.phase = TaskPhase.CREATED
        self.turn = asyncio.Lock()
        self.next_offsets: dict[TopicPartition, int] = {}
        self._processor = processor
        self._context = context
        self._services = services
        self._wakeup = asyncio.Event()
        self.lost = False
        self._left_commits = False
        self.in_step: ProcessorStep | None = None  # set around each call into the processor, once per batch
        self.ended = False  # its actor returned or raised: it processes nothing more
        self._stopping = False
        self._commit_waits = False
        self._flushes = type(processor).flush is not Processor.flush
        self.group_inputs = frozenset(inputs)
        every_input = [*inputs, *(broadcast.partitions if broadcast is not None else ())]
        self._punctuations = Punctuations(task_id, context, services, outputs)
        self._loop = RecordLoop(
            task_id.processor,
            every_input,
            processor,
            context,
            services,
            outputs,
            self._batch_done,
            self._punctuations,
            concurrency,
            self._after_take,
            self._wakeup.set,
        )
        self.in_flight = self._loop.in_flight
        admission = Admission(self.group_inputs, end_offsets, services.commit_before_processing)
        self.stamps: ProgressStamps | None = None  # for a task writing to a repartition topic
        self.intake: Intake  # what is queued here, and the order it is taken in
        if isinstance(processor, MergeProcessor):
            choices = ChoiceOrder(every_input, self._loop.decode, processor.choose)
            self.intake = ChoiceIntake(self._loop, admission, outputs, choices)
        elif len(every_input) > 1:
            self.intake = TimestampIntake(self._loop, admission, outputs, self._timestamp_order(every_input), state)
        else:
            self.intake = BatchIntake(self._loop, admission, outputs)
        self._stream_time_mark = self._committed_stream_time = context.stream_time_now()

    @property
    def context(self) -> TaskContext:
        return self._context

    @property
    def running(self) -> bool:
        return self.phase is TaskPhase.RUNNING and not self.lost and not self._left_commits

    @property
    def queued(self) -> int:
        """Records queued, and in flight: a slow key holds its fetching back as a slow processor does."""
        if self.in_flight is None:
            return self.intake.queued
        return self.intake.queued + self.in_flight.count

    @property
    def idle(self) -> bool:
        """Nothing of its group inputs queued or in flight (broadcast records may wait for a match)."""
        if self.intake.busy or (self.in_flight is not None and self.in_flight.count):
            return False
        if self.broadcast is None:
            return self.intake.queued == 0
        return all(self.intake.queued_of(tp) == 0 for tp in self.inputs)

    @property
    def merges_inputs(self) -> bool:
        return self.intake.merges_inputs

    @property
    def bounds_each_input(self) -> bool:
        """A merge processor's task, or one with broadcast inputs: each input's queue is bounded alone."""
        return self.intake.bounds_each_input or self.broadcast is not None

    def queued_of(self, tp: TopicPartition) -> int:
        return self.intake.queued_of(tp)

    def _caught_up(self) -> bool:
        """Nothing queued or in flight, and Kafka holds no record of its inputs it was not handed."""
        return self.idle and not any(self._services.unfetched(tp) for tp in self.inputs)

    def queued_inputs(self) -> list[TopicPartition]:
        return self.intake.queued_inputs(self.inputs)

    def enqueue(self, tp: TopicPartition, records: list[Any]) -> None:
        self.intake.add(tp, records)
        self._wakeup.set()

    def request_stop(self) -> None:
        """Stop after the record in flight; queued records are dropped (they were not committed)."""
        self._stopping = self.intake.stopping = self._loop.interrupted = True
        self._wakeup.set()

    async def leave_commits(self) -> None:
        """After its final commit: no later commit takes the task, and one under way that holds it ends first,
        its flush of the stores with it, before the guarantee releases the task and the stores close (the
        commits of the tasks a cooperative rebalance keeps go on beside a revoke)."""
        async with self.turn:
            self._left_commits = True

    @contextlib.asynccontextmanager
    async def commit_turn(self) -> AsyncIterator[None]:
        """The task's turn, for a commit: the batch in flight ends after its current record (the rest
        stays queued), so a slow processor's commit waits for one record rather than a whole fetch."""
        self._loop.interrupted = self._commit_waits = True
        async with self.turn:
            self._commit_waits = False
            self._loop.interrupted = self._stopping
            yield

    def lose(self) -> None:
        """Another worker took the task over: stop after the batch in flight; nothing more is committed."""
        self.lost = True
        self.request_stop()

    def rewind(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Forget queued records and go back to `offsets` (the consumer was sought there), which the
        last commit covered, and to the stream time of that commit; the broadcast reader goes back to
        the positions that commit wrote."""
        self.intake.clear()
        if self.in_flight is not None:
            self.in_flight.abandon()
        self.next_offsets = dict(offsets)
        if self.broadcast is not None:
            self.broadcast.rewind()
        self._context.pending.clear()
        self._context.go_back_to(self._committed_stream_time)
        self._after_take()

    def refuse(self, refusals: Mapping[tuple[str, int, int], str]) -> None:
        """The broker refused outputs of these input records (topic, partition, offset) in a transaction
        that was aborted: when they are processed again, the processing policy gets them instead."""
        self._context.refuse(refusals)

    def committed(self, offsets: Mapping[TopicPartition, int]) -> None:
        """The last prepared commit is durable: refusals of records below `offsets` are done with, and its
        stream time is where going back to its offsets goes back to."""
        self._context.forget_refusals({(tp.topic, tp.partition): offset for tp, offset in offsets.items()})
        self._committed_stream_time = self._stream_time_mark

    def mark_caught_up(self, tp: TopicPartition, end: int) -> None:
        """Every record below `end` was processed (gaps are compaction or transaction markers). Not so
        once the actor ended: the records it had queued, or failed on, were dropped unprocessed, and a
        commit after a failure must cover only the records before it."""
        if not self.ended:
            self.next_offsets[tp] = max(self.next_offsets.get(tp, 0), end)

    async def run(self) -> None:
        """Initialise the processor, then process batches and punctuations until asked to stop."""
        await self.initialise()
        try:
            if self.broadcast is None:
                await self._process_until_stopped()
            else:
                await self._process_following(self.broadcast)
        finally:
            self.ended = True
            self.intake.clear()

    async def _process_following(self, broadcast: BroadcastReader) -> None:
        """Process while the reader fetches the broadcast inputs; a failure of either ends both, and is
        raised as it was (not in an exception group), for the worker to report."""
        try:
            async with asyncio.TaskGroup() as group:
                reader = group.create_task(broadcast.follow(self), name=f"broadcast reader of {self.id}")
                try:
                    await self._process_until_stopped()
                finally:
                    reader.cancel()
        except ExceptionGroup as failed:
            raise failed.exceptions[0] from None

    async def initialise(self) -> None:
        """The processor's `init`. The task runs, and so takes part in commits, only once it returned: a
        flush never precedes it."""
        self.in_step = ProcessorStep.INIT
        try:
            await settle(self._processor.init(self._context))
        except Exception as error:
            raise self._lifecycle_failed("init()", error) from error
        finally:
            self.in_step = None
        self.phase = TaskPhase.RUNNING  # from here on, it takes part in commits and is closed

    @property
    def has_work(self) -> bool:
        """Whether a step now would do something: records to take, a punctuation due, or a failure of a
        record in flight to raise."""
        return (
            self.intake.has_work()
            or (self.in_flight is not None and self.in_flight.failure is not None)
            or self._context.punctuation_due(self._services.clock.monotonic())
        )

    async def step(self) -> None:
        """One turn: the punctuations due, then what is queued (as much as its order lets through)."""
        async with self.turn:
            if self.in_flight is not None:
                self.in_flight.raise_failure()
            self._loop.interrupted = self._stopping or self._commit_waits  # a batch ended for a punctuation runs it now
            try:
                self.in_step = ProcessorStep.PUNCTUATION
                try:
                    await self._punctuations.run_due(self.in_flight)
                except PunctuationFailed as failed:
                    raise self._lifecycle_failed("a punctuation", failed.error) from failed.error
                self.in_step = ProcessorStep.PROCESS
                try:
                    await self.intake.take()  # the stream-time punctuations its records bring due run between them
                except ChooseFailed as failed:
                    raise self._lifecycle_failed("choose()", failed.error) from failed.error
                except PunctuationFailed as failed:
                    raise self._lifecycle_failed("a punctuation", failed.error) from failed.error
                finally:
                    self._after_take()
            finally:
                self.in_step = None

    def advance_stream_time(self, timestamp: int) -> None:
        """Stream time moves to `timestamp` as a record of that time would move it, without a record; the
        stream-time punctuations it brings due run at the next step."""
        self._context.advance_to(timestamp)

    async def _process_until_stopped(self) -> None:
        while not self._stopping:
            await self._wait_for_work()
            if self._stopping:
                break
            await self.step()

    def _after_take(self) -> None:
        """Fetching resumes where a queue went down to its resume mark."""
        self._services.on_dequeue(self)
        if self.broadcast is not None:
            for tp in self.broadcast.partitions:
                self.broadcast.after_dequeue(tp, self.intake.queued_of(tp))

    def _timestamp_order(self, inputs: list[TopicPartition]) -> TimestampOrder:
        queues = [InputQueue(tp, rank, self._event_time_of(tp.topic)) for rank, tp in enumerate(inputs)]
        return TimestampOrder(queues, self._services.max_task_idle_s, self._services.unfetched)

    def _event_time_of(self, topic: str) -> EventTimeOf:
        if topic not in self._services.timestamps:
            return operator.attrgetter("timestamp")
        key_serde, value_serde = self._services.serdes[topic]
        return raw_event_time(self._loop.builders[topic], key_serde.deserialize, value_serde.deserialize)

    async def prepare_commit(self) -> TaskCommit | None:
        """Steps 1.1 to 1.4 of the commit protocol, in the task's turn; None when there is nothing to
        commit: the task is not running, or its processor's `flush` failed."""
        if not self.running:
            return None
        in_flight, timeout = self.in_flight, self._services.shutdown_timeout_s if self._stopping else None
        if in_flight is not None and not await in_flight.drain_for_commit(timeout, str(self.id)):  # 1.0
            return None
        if self._flushes:  # 1.1
            released = len(self._context.pending)
            self.in_step = ProcessorStep.FLUSH
            try:
                await settle(self._processor.flush(self._context))
            except Exception as error:
                del self._context.pending[released:]
                self._flush_failed(error)
                return None
            finally:
                self.in_step = None
        self._release_outputs()  # 1.2
        if self.stamps is not None:  # after the outputs (runtime/task/upstream_progress.py, step 1)
            self.stamps.stamp(self.outputs, self._context.latest_timestamp, self._caught_up())
        if self.broadcast is not None:
            self.broadcast.write_positions(self.next_offsets)  # 1.3, the broadcast positions as store changes
        if self.state is not None:
            self.state.log_changes()  # 1.3
        self._stream_time_mark = self._context.stream_time_now()
        # 1.4, of the group's inputs: the broadcast ones are in the state
        return TaskCommit(self, {tp: o for tp, o in self.next_offsets.items() if tp in self.group_inputs})

    async def close(self) -> None:
        """Close the processor (after its last flush, if it ran), then the stores, so that another
        worker on this machine can open them."""
        if self.phase is TaskPhase.CLOSED:
            return
        ran, self.phase = self.phase is TaskPhase.RUNNING and not self.lost, TaskPhase.CLOSED
        if self.in_flight is not None:
            self.in_flight.abandon()  # what its final commit did not wait for stays uncommitted
        self.in_step = ProcessorStep.CLOSE if ran else None
        try:
            if ran:
                await settle(self._processor.close())
        except Exception as error:
            raise self._lifecycle_failed("close()", error) from error
        finally:
            self.in_step = None
            if self.state is not None:
                self.state.close()

    def describe(self) -> str:
        """What the task is doing, in words: the processor's step (with the record's offset, in `process`),
        else its phase. Read from the stop's watchdog thread too, so it only reads."""
        step = self.in_step
        if step is None:
            return f"task {self.id} ({self.phase.value})"
        source = self._context.source if step is ProcessorStep.PROCESS else None
        at = "" if source is None else f" at offset {source.offset} of {source.topic}[{source.partition}]"
        return f"task {self.id} in {step.value}{at}"

    def _lifecycle_failed(self, step: str, error: Exception) -> StopAfterCommit:
        if isinstance(error, StopWorker):  # its message says it all: no trace, no exception's name
            return StopAfterCommit(f"processor '{self.id.processor}' stopped in {step} of task {self.id}: {error}")
        log.error("processor '%s' failed in %s of task %s", self.id.processor, step, self.id, exc_info=error)
        return StopAfterCommit(
            f"processor '{self.id.processor}' failed in {step} of task {self.id}: {type(error).__name__}: {error}"
        )

    def _flush_failed(self, error: Exception) -> None:
        """Step 1.1 failed: no offset of this task is committed now; the policy decides what follows."""
        self._services.counters.failed_flushes += 1
        if self._services.failures.stops_on(Stage.PROCESSING, error):
            raise self._lifecycle_failed("flush()", error) from error
        log.warning(
            "processor '%s' failed to flush task %s (%r): its offsets stay uncommitted until a flush succeeds",
            self.id.processor,
            self.id,
            error,
        )

    async def _wait_for_work(self) -> None:
        if self.has_work:
            return  # a stream-time punctuation the last record brought runs now, not when the next record comes
        self._wakeup.clear()
        dues = [p.due for p in self._context.punctuators]
        wait_ends = self.intake.wait_ends()
        if wait_ends is not None:
            dues.append(wait_ends)  # then it goes on without the input it waits for
        timeout = max(0.0, min(dues) - self._services.clock.monotonic()) if dues else None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wakeup.wait(), timeout)

    def _batch_done(self, tp: TopicPartition, done: int | None, processed: int) -> None:
        """The offset and the counter are brought up to date once per batch: no commit can run inside
        one, as the batch holds the task's turn."""
        if done is not None:
            self.next_offsets[tp] = done
        self._services.counters.processed += processed
        self._release_outputs()
        if self.state is not None:
            self.state.note_buffered()

    def _release_outputs(self) -> None:
        self._context.release_to(self.outputs)
