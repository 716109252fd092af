"""The `Context` a task hands its processor."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from processors.context import Context, Punctuation, PunctuationTime
from processors.serdes import Serde
from runtime.counters import Counters
from runtime.errors import StopAfterCommit
from runtime.kafka.outputs import Headers, Output, Outputs
from runtime.kafka.record_limits import DEFAULT_MAX_REQUEST_SIZE, Limits, RecordRefused, TopicLimits, check_record
from runtime.state.task_state import TaskState, TaskStore
from runtime.task.clock import SYSTEM_CLOCK, Clock
from runtime.telemetry.trace_headers import TRACEPARENT_CLASS, UNTRACED_CLASS, OutputContext, fields_of
from runtime.telemetry.tracing import with_fields
from stores import BufferedKeyValueStore, ReadOnlyView, SessionView, TableView, TtlView, VersionedTableView, WindowView

if TYPE_CHECKING:
    from runtime.task.upstream_progress import UpstreamProgress

NEVER = 1 << 63  # a stream time no record reaches: when the next stream-time punctuation is due if none is
TopicSerdes = Mapping[str, tuple[Serde, Serde]]
Encode = Callable[[Any], bytes]


@dataclass
class Punctuator:
    every_s: float
    callback: Punctuation
    due: float  # of the task's clock's monotonic()


@dataclass(eq=False)
class StreamTimePunctuator:
    every_ms: int
    callback: Punctuation
    due: int  # a stream time: a multiple of every_ms

    def schedule_after(self, stream_time: int) -> None:
        """Due next at the first multiple of `every_ms` above `stream_time`."""
        self.due = (stream_time // self.every_ms + 1) * self.every_ms


@dataclass(frozen=True)
class StreamTimeMark:
    stream_time: int
    observed_time: int
    watermark: int
    upstream: Mapping[int, Any] | None
    dues: Mapping[StreamTimePunctuator, int]


_READ_WITH = {
    "key_value": "store",
    "window": "window_store",
    "window_by_time": "window_store",
    "session": "session_store",
}
_UNKNOWN_LIMITS = TopicLimits(DEFAULT_MAX_REQUEST_SIZE)  # a topic not described: the producer's default


class UndeclaredOutput(StopAfterCommit):
    """A processor sent to a topic that is not among its outputs: a mistake in its code or in the app's YAML,
    not in the record, so it stops the worker whatever the error policies say."""


@dataclass
class TaskContext(Context):
    """Collects a record's outputs; the task releases them only if `process` succeeded."""

    _app_id: str
    _processor_name: str
    _partition: int
    _params: Mapping[str, Any]
    _outputs_allowed: frozenset[str]
    _serdes: TopicSerdes
    _global_stores: Mapping[str, ReadOnlyView]
    _state: TaskState | None = None
    _limits: Limits = field(default_factory=dict)
    _counters: Counters = field(default_factory=Counters)  # the worker's, which `count` adds to
    _clock: Clock = SYSTEM_CLOCK
    pending: list[Output] = field(default_factory=list)
    # The input record being processed, which its outputs name (for the error policy, should the
    # broker refuse one); None in punctuations.
    source: Any = None
    # The trace context of the record being processed, which `send` gives its outputs (when traced).
    trace_fields: OutputContext | tuple[()] = ()
    punctuators: list[Punctuator] = field(default_factory=list)
    stream_time_punctuators: list[StreamTimePunctuator] = field(default_factory=list)
    # `stream_time`, as a plain attribute: the greatest timestamp of the records processed
    # (`observed_time`), held at `watermark` for a task reading a repartition topic
    # (runtime/task/upstream_progress.py).
    latest_timestamp: int = -1
    observed_time: int = -1
    watermark: int = NEVER
    upstream: UpstreamProgress | None = None  # what holds it, for a task reading a repartition topic
    # The timestamp of outputs sent without one: the event time of the record being processed, the
    # time a punctuation fired for; None elsewhere (`init`, `flush`), where the producer's clock gives it.
    output_time: int | None = None
    # One lookup per `send` finds both encoders and the topic's limits, and an output not declared is
    # simply missing. A record whose key and value bytes stay within `plain_bytes` (at most a traceparent
    # besides) fits; a key-less one counts `keyless` (past `plain_bytes` when the topic needs a key).
    _encoders: dict[str, tuple[Encode, Encode, int, int, TopicLimits]] = field(init=False)
    # Input records (topic, partition, offset) whose outputs the broker refused in a transaction that
    # was aborted, with why: processed again, they fail when they send (every send takes the slow path).
    _refused: dict[tuple[str, int, int], str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._encoders = {}
        for topic in self._outputs_allowed:
            limits = self._limits.get(topic, _UNKNOWN_LIMITS)
            keyless = limits.plain_bytes + 1 if limits.needs_key else 0
            plain_bytes = -1 if self._refused else limits.plain_bytes
            serdes = self._serdes[topic]
            self._encoders[topic] = (serdes[0].serialize, serdes[1].serialize, plain_bytes, keyless, limits)

    def release_to(self, outputs: Outputs) -> None:
        """What was sent since the last release goes to the output path: a record's once it was processed,
        a punctuation's once it ran, a flush's at the commit."""
        outputs.append_all(self.pending)
        self.pending.clear()

    def refuse(self, refusals: Mapping[tuple[str, int, int], str]) -> None:
        """The outputs of these input records were refused: when processed again, they fail in `send`."""
        self._refused.update(refusals)
        self.__post_init__()

    def forget_refusals(self, committed: Mapping[tuple[str, int], int]) -> None:
        """Refusals of input records below the committed offsets are done with."""
        kept = {where: why for where, why in self._refused.items() if where[2] >= committed.get(where[:2], 0)}
        if len(kept) < len(self._refused):
            self._refused = kept
            self.__post_init__()

    def for_record(self, source: Any, output_time: int, stream_time: int) -> TaskContext:
        """The context of one record among several in flight (runtime/task/in_flight.py): the task's, with
        the record's own outputs, source, time and stream time, so that records in flight together do not
        mix them."""
        context = object.__new__(TaskContext)
        context.__dict__.update(self.__dict__)
        context.pending, context.source, context.output_time = [], source, output_time
        context.latest_timestamp = stream_time
        return context

    @property
    def app_id(self) -> str:
        return self._app_id

    @property
    def processor_name(self) -> str:
        return self._processor_name

    @property
    def partition(self) -> int:
        return self._partition

    @property
    def params(self) -> Mapping[str, Any]:
        return self._params

    @property
    def stream_time(self) -> int:
        return self.latest_timestamp

    def advance_to(self, timestamp: int) -> None:
        """Stream time, as a record of `timestamp` moves it."""
        if timestamp > self.observed_time:
            self.observed_time = timestamp
            held = timestamp if timestamp < self.watermark else self.watermark
            self.latest_timestamp = max(self.latest_timestamp, held)

    def hold_at(self, watermark: int) -> None:
        """The upstream tasks' progress changed: stream time moves on as far as it lets it, and never back
        (a watermark below it, when an upstream task that was caught up gets records again, holds it there)."""
        self.watermark = max(watermark, self.latest_timestamp)
        held = min(self.observed_time, self.watermark)
        self.latest_timestamp = max(self.latest_timestamp, held)

    def next_stream_time_due(self) -> int:
        """The stream time at which the next stream-time punctuation is due (NEVER when there is none)."""
        return min((p.due for p in self.stream_time_punctuators), default=NEVER)

    def punctuation_due(self, now: float) -> bool:
        """Whether a punctuation is due: stream time reached one's due time, or `now` (the clock's
        monotonic time) a wall-clock one's."""
        return self.next_stream_time_due() <= self.latest_timestamp or any(
            punctuator.due <= now for punctuator in self.punctuators
        )

    def stream_time_now(self) -> StreamTimeMark:
        return StreamTimeMark(
            self.latest_timestamp,
            self.observed_time,
            self.watermark,
            None if self.upstream is None else self.upstream.mark(),
            {p: p.due for p in self.stream_time_punctuators},
        )

    def go_back_to(self, mark: StreamTimeMark) -> None:
        """The task goes back to committed offsets: their records are processed again with the stream
        time, and the stream-time punctuations, they met the first time."""
        self.latest_timestamp, self.observed_time, self.watermark = mark.stream_time, mark.observed_time, mark.watermark
        if self.upstream is not None and mark.upstream is not None:
            self.upstream.go_back_to(mark.upstream)
        for punctuator in self.stream_time_punctuators:
            punctuator.due = mark.dues.get(punctuator, punctuator.due)

    def send(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        headers: Sequence[tuple[str, bytes]] | None = None,
        timestamp: int | None = None,
    ) -> None:
        if timestamp is None:
            timestamp = self.output_time
        elif timestamp.__class__ is not int or timestamp < 0:
            raise ValueError(f"timestamp must be epoch milliseconds, an int of at least 0, not {timestamp!r}")
        try:
            encode_key, encode_value, plain_bytes, keyless, limits = self._encoders[topic]
        except KeyError:
            raise UndeclaredOutput(
                f"processor '{self._processor_name}' sent to '{topic}', which is not among its outputs "
                f"{sorted(self._outputs_allowed)}"
            ) from None
        carried: Headers
        trace_fields = self.trace_fields
        if not headers:
            carried = trace_fields
        elif not isinstance(trace_fields, UNTRACED_CLASS):  # traced, even with no context to pass on
            carried = with_fields(headers, fields_of(trace_fields))
        else:
            carried = headers
        key_bytes = None if key is None else encode_key(key)
        value_bytes = None if value is None else encode_value(value)
        # Cheap bounds first: most records are far below the limit and carry no headers of their own.
        if (keyless if key_bytes is None else len(key_bytes)) + (0 if value_bytes is None else len(value_bytes)) > (
            plain_bytes
        ) or (carried and carried.__class__ is not TRACEPARENT_CLASS):
            source = self.source
            if source is not None and self._refused:
                refusal = self._refused.get((source.topic, source.partition, source.offset))
                if refusal is not None:
                    raise RecordRefused(refusal)
            check_record(topic, key_bytes, value_bytes, carried, limits)
        self.pending.append(
            Output(topic, key_bytes, value_bytes, carried, timestamp, self.source, self._processor_name)
        )

    def store(self, name: str) -> BufferedKeyValueStore | TtlView:
        entry = self._declared(name)
        if entry.view is None:
            return entry.store
        if isinstance(entry.view, TtlView):
            return entry.view
        raise self._other_kind(entry, "store")

    def window_store(self, name: str) -> WindowView:
        entry = self._declared(name)
        if not isinstance(entry.view, WindowView):
            raise self._other_kind(entry, "window_store")
        return entry.view

    def session_store(self, name: str) -> SessionView:
        entry = self._declared(name)
        if not isinstance(entry.view, SessionView):
            raise self._other_kind(entry, "session_store")
        return entry.view

    def _declared(self, name: str) -> TaskStore:
        entry = self._state.stores.get(name) if self._state is not None else None
        if entry is None:
            declared = sorted(self._state.stores) if self._state is not None else []
            raise KeyError(f"processor '{self._processor_name}' declares no store '{name}' (it has {declared})")
        return entry

    def _other_kind(self, entry: TaskStore, called: str) -> TypeError:
        kind = entry.spec.kind
        return TypeError(
            f"ctx.{called}('{entry.name}'): processor '{self._processor_name}' declares '{entry.name}' as a {kind} "
            f"store, which ctx.{_READ_WITH[kind]}('{entry.name}') hands out"
        )

    def table(self, name: str) -> TableView | VersionedTableView:
        entry = self._state.stores.get(name) if self._state is not None else None
        if entry is None or not entry.mirrors_input:
            tables = sorted(n for n, e in self._state.stores.items() if e.mirrors_input) if self._state else []
            raise KeyError(f"processor '{self._processor_name}' has no table '{name}' (it has {tables})")
        return TableView(entry.store) if entry.versions is None else VersionedTableView(entry.versions)

    def global_store(self, name: str) -> ReadOnlyView:
        store = self._global_stores.get(name)
        if store is None:
            raise KeyError(f"there is no global store '{name}' (the app has {sorted(self._global_stores)})")
        return store

    def count(self, name: str, amount: int = 1) -> None:
        self._counters.count(self._processor_name, name, amount)

    def schedule(self, every_ms: int, callback: Punctuation, time: PunctuationTime = "wall_clock") -> None:
        if every_ms <= 0:
            raise ValueError("every_ms must be positive")
        if time == "wall_clock":
            every_s = every_ms / 1000
            self.punctuators.append(Punctuator(every_s, callback, self._clock.monotonic() + every_s))
        elif time == "stream_time":
            punctuator = StreamTimePunctuator(every_ms, callback, 0)
            punctuator.schedule_after(self.latest_timestamp)
            self.stream_time_punctuators.append(punctuator)
        else:
            raise ValueError(f"time must be 'wall_clock' or 'stream_time', not {time!r}")
