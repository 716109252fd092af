"""Stand-ins for the Kafka clients and the output path, so the engine's core runs without a broker.

Each fake records what the engine asked of it and can be told to fail; none imitates Kafka beyond
that. Tasks themselves are real (`make_task`): real context, failure policies, counters and serdes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, cast

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from processors.processor import Processor
from runtime.config import ErrorPolicy
from runtime.config.processors import ConcurrencyConfig
from runtime.config.telemetry import TelemetryConfig
from runtime.counters import Counters
from runtime.kafka.outputs import Headers, Output, Outputs
from runtime.kafka.record_limits import Limits
from runtime.state.task_state import TaskState
from runtime.task.assembly import build_task
from runtime.task.commits import CommitBeforeProcessing
from runtime.task.event_time import TimestampOf
from runtime.task.failures import FailureHandler, Stage
from runtime.task.task import Task, TaskId, TaskServices
from runtime.telemetry import Telemetry
from stores.serdes import resolve_serde

IN, OUT, DEAD = "in", "out", "dead-letters"
SERDES = {
    IN: (resolve_serde("str"), resolve_serde("json")),
    "other": (resolve_serde("str"), resolve_serde("json")),
    "third": (resolve_serde("str"), resolve_serde("json")),
    OUT: (resolve_serde("str"), resolve_serde("json")),
}

Log = list[str]
"""One list several fakes write to, so a test can check the order of steps across them."""


def raw(offset: int, value: bytes | None, topic: str = IN, timestamp: int | None = None) -> Any:
    """A record of partition 0 as the consumer hands it over; its timestamp is 1000 + offset unless given."""
    timestamp = 1_000 + offset if timestamp is None else timestamp
    return ConsumerRecord(topic, 0, offset, timestamp, 0, None, value, None, 0, 0, [])


def telemetry_variant(name: str) -> Telemetry:
    """`off`; `traced`: every record in a span of its own; `dropped`: every record's span dropped (its
    outputs carry an unsampled context); `metrics`: processing times measured, no tracing."""
    if name == "off":
        return Telemetry(TelemetryConfig(), "app")
    if name == "metrics":
        return Telemetry(TelemetryConfig(), "app", metric_reader=InMemoryMetricReader())
    ratio = {"traced": 1.0, "dropped": 0.0}[name]
    config = TelemetryConfig.model_validate({"sampling_ratio": ratio})
    return Telemetry(config, "app", span_exporter=InMemorySpanExporter())


def value(n: int, **extra: Any) -> bytes:
    """A JSON value as the input topic holds it."""
    return json.dumps({"n": n, **extra}).encode()


def records(*offsets: int) -> list[Any]:
    """Records of `in` at these offsets, each with its offset as its value."""
    return [raw(offset, value(offset)) for offset in offsets]


def sent(outputs: FakeOutputs, topic: str = OUT) -> list[Any]:
    """What reached the output path for `topic`, decoded (dead letters keep their original bytes)."""
    return [v if topic == DEAD else json.loads(v) for t, _, v in outputs.appended if t == topic]


@contextlib.asynccontextmanager
async def running(task: Task) -> AsyncIterator[None]:
    """The task's actor in the background; stopped (and its failure raised) on leaving."""
    actor = asyncio.create_task(task.run())
    try:
        yield
    finally:
        task.request_stop()
        await actor


class FakeProducer:
    """A transactional producer: records each call; `failures[name]` is raised by the next such call."""

    def __init__(self, log: Log | None = None):
        self.calls: list[tuple[str, Any]] = []
        self.failures: dict[str, BaseException] = {}
        self._log = log

    def _call(self, name: str, argument: Any = None) -> None:
        self.calls.append((name, argument))
        if self._log is not None:
            self._log.append(name)
        failure = self.failures.pop(name, None)
        if failure is not None:
            raise failure

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    async def start(self) -> None:
        self._call("start")

    async def stop(self) -> None:
        self._call("stop")

    async def begin_transaction(self) -> None:
        self._call("begin_transaction")

    async def send_offsets_to_transaction(self, offsets: dict[TopicPartition, int], group_id: str) -> None:
        self._call("send_offsets_to_transaction", (dict(offsets), group_id))

    async def commit_transaction(self) -> None:
        self._call("commit_transaction")

    async def abort_transaction(self) -> None:
        self._call("abort_transaction")


class FakeOutputs:
    """The output path: appended records are pending until `flush` hands them on (to `sent`)."""

    def __init__(self, log: Log | None = None):
        self.producer = FakeProducer(log)
        self.pending_records: list[tuple[str, Any, Any]] = []
        self.sent_records: list[tuple[str, Any, Any]] = []
        self.ack_failure: BaseException | None = None
        self.discarded = 0
        self.limits: Limits = {}
        self._log = log

    @property
    def sent(self) -> int:
        return len(self.sent_records)

    @property
    def pending(self) -> int:
        return len(self.pending_records)

    @property
    def appended(self) -> list[tuple[str, Any, Any]]:
        """Everything released to the output path, sent or not."""
        return self.sent_records + self.pending_records

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
        self.pending_records.append((topic, key, value))

    def append_encoded(self, topic: str, key: bytes | None, value: bytes | None, *_: Any) -> None:
        """A dead letter, kept as `append` keeps a record: without its headers, timestamp and processor."""
        self.append(topic, key, value)

    def append_all(self, records: list[Output]) -> None:
        for record in records:
            self.append(record.topic, record.key, record.value)

    async def flush(self, keep_filling: bool = False) -> None:
        self.sent_records += self.pending_records
        self.pending_records = []

    def discard(self) -> None:
        self.discarded += len(self.pending_records)
        self.pending_records = []

    async def wait_acked(self) -> None:
        if self._log is not None:
            self._log.append("wait_acked")
        await self.flush()
        if self.ack_failure is not None:
            raise self.ack_failure

    def as_outputs(self) -> Outputs:
        return cast(Outputs, self)


class FakeConsumer:
    """Records commits, seeks, pauses and resumes; `committed_offsets` is the group's state."""

    def __init__(self, log: Log | None = None):
        self.commits: list[dict[TopicPartition, int]] = []
        self.commit_failure: BaseException | None = None
        self.committed_offsets: dict[TopicPartition, int] = {}
        self.beginnings: dict[TopicPartition, int] = {}
        self.ends: dict[TopicPartition, int] = {}
        self.seeks: list[tuple[TopicPartition, int]] = []
        self.paused: list[TopicPartition] = []
        self.resumed: list[TopicPartition] = []
        self._log = log

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        if self._log is not None:
            self._log.append("consumer commit")
        failure, self.commit_failure = self.commit_failure, None
        if failure is not None:
            raise failure
        self.commits.append(dict(offsets))

    async def committed(self, tp: TopicPartition) -> int | None:
        return self.committed_offsets.get(tp)

    async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.beginnings[tp] for tp in tps}

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.ends[tp] for tp in tps}

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks.append((tp, offset))

    def pause(self, tp: TopicPartition) -> None:
        self.paused.append(tp)

    def resume(self, tp: TopicPartition) -> None:
        self.resumed.append(tp)


class FakeState:
    """A task's stores, as the commit protocol sees them."""

    def __init__(self, name: str, log: Log):
        self.has_unflushed_writes = False
        self.closes = 0
        self.discarded = False
        self._name = name
        self._log = log

    def note_buffered(self) -> None:
        return None

    def log_changes(self) -> None:
        self._log.append(f"{self._name} log changes")

    def flush(self, committed: Mapping[TopicPartition, int] | None = None) -> None:
        self._log.append(f"{self._name} flush stores")

    def table_inputs(self) -> dict[TopicPartition, str]:
        return {}

    def discard(self) -> None:
        self.discarded = True

    def close(self) -> None:
        self.closes += 1

    def as_state(self) -> TaskState:
        return cast(TaskState, self)


class Dequeues:
    """The tasks' `on_dequeue`: lets a test wait until a task processed everything queued."""

    def __init__(self) -> None:
        self._changed = asyncio.Event()

    def __call__(self, task: Task) -> None:
        self._changed.set()

    async def until_idle(self, task: Task) -> None:
        """Bounded, so that a task whose count of queued records went wrong fails the test, not hangs it."""
        async with asyncio.timeout(5):
            while not task.idle:
                self._changed.clear()
                await self._changed.wait()


def make_services(
    telemetry: Telemetry | None = None,
    policy: ErrorPolicy = ErrorPolicy.SKIP,
    commit_before_processing: CommitBeforeProcessing | None = None,
    timestamps: Mapping[str, TimestampOf] | None = None,
    max_task_idle_s: float = 0.0,
    unfetched: Callable[[TopicPartition], bool] | None = None,
) -> TaskServices:
    """`unfetched` says of which input partitions Kafka holds records not handed over yet (none by default)."""
    counters = Counters()
    policies = {stage: policy for stage in Stage}
    return TaskServices(
        failures=FailureHandler("app", policies, DEAD, counters),
        counters=counters,
        serdes=SERDES,
        global_stores={},
        telemetry=telemetry if telemetry is not None else Telemetry(TelemetryConfig(), "app"),
        on_dequeue=Dequeues(),
        commit_before_processing=commit_before_processing,
        timestamps=timestamps or {},
        max_task_idle_s=max_task_idle_s,
        unfetched=unfetched or (lambda tp: False),
    )


def make_task(
    processor: Processor,
    services: TaskServices | None = None,
    outputs: FakeOutputs | None = None,
    state: FakeState | None = None,
    inputs: list[TopicPartition] | None = None,
    end_offsets: Mapping[TopicPartition, int] | None = None,
    name: str = "p",
    concurrency: ConcurrencyConfig | None = None,
) -> Task:
    """A real task of processor `name` on partition 0, reading `in` (by default) and writing `out`."""
    return build_task(
        TaskId(name, 0),
        processor,
        "app",
        {},
        frozenset({OUT}),
        inputs if inputs is not None else [TopicPartition(IN, 0)],
        (outputs if outputs is not None else FakeOutputs()).as_outputs(),
        services if services is not None else make_services(),
        end_offsets,
        state.as_state() if state is not None else None,
        concurrency=concurrency,
    )


async def until_idle(task: Task) -> None:
    """Until the task processed everything queued (its services must come from `make_services`)."""
    await cast(Dequeues, task._services.on_dequeue).until_idle(task)


def fake_outputs(task: Task) -> FakeOutputs:
    return cast(FakeOutputs, task.outputs)
