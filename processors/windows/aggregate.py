"""The built-in windowed aggregation: `class: processors.windows:Aggregate` in the app YAML, its `params`
described in docs/windows.md and checked when the app is loaded (`AggregateParams`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from processors.context import Context
from processors.keyless import KEYLESS
from processors.processor import Processor
from processors.record import Record
from processors.stores import SessionStore, WindowStore
from processors.windows.counted import COUNTED_STORE, Counted, CountWindows
from processors.windows.definitions import Session, Sliding, Window
from processors.windows.early import EveryRecords
from processors.windows.fixed import FixedWindows
from processors.windows.late import late_headers
from processors.windows.params import AggregateParams, AggregationParams
from processors.windows.sessions import SessionWindows
from processors.windows.sliding import SlidingWindows
from processors.windows.windowing import Windowing, WindowResult


class Aggregate(Processor):
    """Aggregates the records of each group key and window, and sends each window's result to
    `params.output`: the key is the group key (so the output is partitioned by it), the value
    `{"start": ms, "end": ms, "value": result}`, its timestamp the last millisecond of the window. A record
    whose group key is null is dropped and counted (`keyless_records`), as in Kafka Streams, unless
    `params.keyless` is `one_key`.

    The stream time is the store's (`advance`d by each record's timestamp, or by the task's stream time where
    a repartition's upstream progress holds that back), so it is committed, logged and restored with the
    windows it closed. A stream-time punctuation closes the windows the task's
    stream time passed without a record of this processor (the test kit's `advance_stream_time`, a record
    that failed); when records flow, each one already closed them, and it finds nothing. A late record is
    counted (`late_records`) and dropped, or sent to `params.late_topic` as it came, with headers saying
    where from and why.
    """

    Params = AggregateParams

    @classmethod
    def stores_for(cls, params: Any, name: str) -> dict[str, dict[str, Any]]:
        """The window (or session) store, kept as long as the window definition needs its entries. Tumbling
        and hopping windows read no key's windows over a range, only the windows that close, across keys:
        their store is laid out by time."""
        definition = params.window.definition()
        if isinstance(definition, Counted):
            return {params.store_name(name): dict(COUNTED_STORE)}
        kinds = {Session: "session", Sliding: "window"}
        kind = kinds.get(type(definition), "window_by_time")
        return {params.store_name(name): {"kind": kind, "retention_ms": definition.retention_ms}}

    def init(self, ctx: Context) -> None:
        params = AggregateParams.model_validate(ctx.params)
        self.output, self.late_topic, self.group_by = params.output, params.late_topic, params.group_by
        self.keyless_alone = params.keyless == "alone"
        # What each record gives its windows; None, when a count reads nothing of it (nothing is kept)
        self.read: Callable[[Record], Any] | None
        if params.aggregation is not None:
            self.read = _reader(params.aggregation)
        else:
            self.read = _each_reader([_reader(spec) for spec in (params.aggregations or {}).values()])
        aggregation = params.built_aggregation()
        early = params.early
        every_records = (
            None if early is None or early.every_records is None else EveryRecords(aggregation, early.every_records)
        )
        every_ms = None if early is None else early.every_ms
        self.aggregation = every_records or aggregation  # what makes a stored aggregate a result
        definition = params.window.definition()
        name, final = params.store_name(ctx.processor_name), params.emit == "final"
        self.final, self.sends_due = final, every_records is not None
        changes = every_ms is not None
        self.windowing: Windowing
        self.store: WindowStore | SessionStore
        # A result's timestamp is the last millisecond its window covers (as Flink's `maxTimestamp`), so a
        # downstream app windowing the results by event time puts each in the window it summarises.
        self.end_excluded = int(not isinstance(definition, Session | Sliding | Counted))
        self.ctx = ctx
        self.counted: CountWindows | None = None
        if isinstance(definition, Counted):  # full windows close as their records come: no stream time
            self.counted = CountWindows(definition, aggregation, ctx.store(name), final)
            return
        self.definition = definition
        if isinstance(definition, Session):
            self.store = sessions = ctx.session_store(name)
            self.windowing = SessionWindows(
                definition, aggregation, sessions, final, changes=changes, every_records=every_records
            )
        elif isinstance(definition, Sliding):
            self.store = windows = ctx.window_store(name)
            self.windowing = SlidingWindows(definition, aggregation, windows, final, changes=changes)
        else:
            self.store = windows = ctx.window_store(name)
            self.windowing = FixedWindows(
                definition, aggregation, windows, final, changes=changes, every_records=every_records
            )
        ctx.schedule(self.windowing.closes_every_ms, self._close_passed, "stream_time")
        if every_ms is not None:
            self.early_ticked = False
            ctx.schedule(every_ms, self._send_changed_early, "stream_time")

    def process(self, record: Record, ctx: Context) -> None:
        timestamp = record.timestamp
        if timestamp < 0:
            raise ValueError(f"the record has no timestamp ({timestamp}), and windows go by it")
        key = record.key if self.group_by is None else self._group_key(record, self.group_by)
        if key is None and self.keyless_alone:
            ctx.count(KEYLESS)
            return
        value = None if self.read is None else self.read(record)
        if self.counted is not None:
            for result in self.counted.add(key, value, timestamp):
                self._send(result, ctx)
            return
        store = self.store
        previous = store.stream_time
        # The task's stream time is at least the record's, unless the progress of a repartition's upstream
        # tasks holds it back: then windows close, and records are late, by that.
        held = ctx.stream_time
        moved_to = timestamp if timestamp <= held else held
        stream_time = moved_to if moved_to > previous else previous
        late = self.windowing.add(key, value, timestamp, stream_time)
        if self.sends_due:
            for result in self.windowing.take_due():
                self._send(result, ctx, early=True)
        if late is not None:
            ctx.count("late_records")
            if self.late_topic is not None:
                ctx.send(self.late_topic, record.value, key=record.key, headers=late_headers(record, late, stream_time))
        if stream_time > previous:  # as `_close_passed` does, inline: this runs for nearly every record
            for result in self.windowing.close(previous, stream_time):
                self._send(result, ctx)
            store.advance(stream_time)

    def _close_passed(self) -> None:
        """The windows that closed as the task's stream time moved past the store's, with no record here: sent,
        and expired by the store, which keeps the stream time."""
        store, ctx = self.store, self.ctx
        previous, stream_time = store.stream_time, ctx.stream_time
        if stream_time > previous:
            for result in self.windowing.close(previous, stream_time):
                self._send(result, ctx)
            store.advance(stream_time)

    def _send_changed_early(self) -> None:
        """Stream time crossed a multiple of `early.every_ms`: each window changed since the last time, if
        still open, sent early. What stream time closed is sent first, as final results, and not early.
        The task's first record brings the first call, though stream time came from nowhere and crossed
        nothing: the windows it changed wait for the next multiple."""
        self._close_passed()
        if not self.early_ticked:
            self.early_ticked = True
            return
        stream_time, definition = self.store.stream_time, self.definition
        for result in self.windowing.take_updates():
            if result.removed or stream_time < definition.close_time(Window(result.start, result.end)):
                self._send(result, self.ctx, early=True)

    def flush(self, ctx: Context) -> None:
        """Emitting updates: each window changed since the last commit, once, with its latest result."""
        if self.final:
            return
        for result in self.windowing.take_updates() if self.counted is None else self.counted.take_updates():
            self._send(result, ctx)

    def _group_key(self, record: Record, group_by: str | list[str]) -> Any:
        """The key a record is grouped by when `group_by` names fields of its value."""
        if isinstance(group_by, str):
            return _field(record, group_by)
        return [_field(record, name) for name in group_by]

    def _send(self, result: WindowResult, ctx: Context, early: bool = False) -> None:
        value: dict[str, Any]
        if result.removed:
            value = {"start": result.start, "end": result.end, "value": None, "removed": True}
        else:
            value = {"start": result.start, "end": result.end, "value": self.aggregation.result(result.aggregate)}
        if early:
            value["early"] = True
        ctx.send(self.output, value, key=result.key, timestamp=result.end - self.end_excluded)


def _reader(aggregation: AggregationParams) -> Callable[[Record], Any] | None:
    """What an aggregation reads of a record: its field, or its whole value; a count reads nothing."""
    if aggregation.type == "count":
        return None
    field = aggregation.field
    if field is None:
        return _whole_value
    return lambda record: _field(record, field)


def _each_reader(readers: list[Callable[[Record], Any] | None]) -> Callable[[Record], list[Any]]:
    """Several aggregations read a record into a list, one item for each, in their order."""
    return lambda record: [None if read is None else read(record) for read in readers]


def _whole_value(record: Record) -> Any:
    return record.value


def _field(record: Record, name: str) -> Any:
    try:
        return record.value[name]
    except (KeyError, IndexError, TypeError):
        raise ValueError(
            f"the value of record {record.topic}[{record.partition}]@{record.offset} has no field '{name}'"
        ) from None
