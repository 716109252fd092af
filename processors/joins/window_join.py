"""The stream-stream join: records of two co-partitioned inputs with the same key and timestamps close enough
are joined, as Kafka Streams' KStream-KStream join with `JoinWindows.ofTimeDifferenceAndGrace(...)` and,
for a window that reaches further one way, its `before(...)` and `after(...)`.

With B the `before_ms`, A the `after_ms` (both `time_difference_ms` unless given) and G the grace, and
stream time the largest timestamp taken so far: a left record of time t joins the right records of times
t - B to t + A, and a right record of time t the left records of times t - A to t + B. A record is late,
counted (`late_records`) and dropped, when the end of its window (t + A for a left record, t + B for a
right one) plus G is before stream time: its window closed. Each side's records wait in a window store of
their own, under (key, timestamp), for the other side's records of their window; the latest record of the
other side that can meet a record of time t (t + A, or t + B) comes on time as long as stream time is at
most t + A + B + G, whichever side it is on, and the stores keep each record that long (their retention,
A + B + G + 1, is the same for every kind of join). A left (or outer) join sends a left (or either) record
that met none of the other side, with null for the other side, only once stream time passed t + A + B + G,
so no record is sent with null and then joined after all, and no record that met one is sent with null.
The task takes both inputs in timestamp order, so the results do not depend on which input Kafka got
first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from processors.context import Context
from processors.keyless import KEYLESS, Keyless
from processors.params import among_inputs, among_outputs
from processors.processor import Processor
from processors.record import Record
from processors.stores import WindowStore

LATE = "late_records"  # ctx.count name: a record whose window had closed


class WindowJoinParams(BaseModel):
    """`params` of `processors.joins:WindowJoin` (docs/joins.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    left: str  # an input topic
    right: str  # the other input topic
    time_difference_ms: int | None = Field(default=None, ge=0)  # before_ms and after_ms, unless given
    before_ms: int | None = Field(default=None, ge=0, validate_default=True)
    after_ms: int | None = Field(default=None, ge=0, validate_default=True)
    grace_ms: int = Field(default=0, ge=0)
    join: Literal["inner", "left", "outer"] = "inner"
    keyless: Keyless = "alone"
    output: str

    _sides_are_inputs = field_validator("left", "right")(
        classmethod(lambda cls, topic, info: among_inputs(topic, info))
    )
    _among_outputs = field_validator("output")(classmethod(lambda cls, topic, info: among_outputs(topic, info)))

    @field_validator("before_ms", "after_ms")
    @classmethod
    def _given_or_the_difference(cls, reach: int | None, info: ValidationInfo) -> int | None:
        if reach is None and "time_difference_ms" in info.data and info.data["time_difference_ms"] is None:
            raise ValueError(f"{info.field_name} is needed, or time_difference_ms, which sets before_ms and after_ms")
        return reach

    @model_validator(mode="after")
    def _two_sides(self) -> WindowJoinParams:
        if self.left == self.right:
            raise ValueError("left and right are two topics")
        return self

    @property
    def before(self) -> int:
        """How much older than a left record a right record it joins may be (and how much younger than a
        right record a left one)."""
        return cast(int, self.time_difference_ms if self.before_ms is None else self.before_ms)

    @property
    def after(self) -> int:
        """How much younger than a left record a right record it joins may be (and how much older than a
        right record a left one)."""
        return cast(int, self.time_difference_ms if self.after_ms is None else self.after_ms)

    @property
    def unmatchable_after_ms(self) -> int:
        """How long after its timestamp, in stream time, an on-time record of the other side may still meet
        a record: the latest of them (a left record's timestamp + after, a right record's + before) comes on
        time until its own window closes, before (after) + grace later."""
        return self.before + self.after + self.grace_ms


class WindowJoin(Processor):
    """Sends each pair joined to `params.output`: the key, the value `{"left": ..., "right": ...}` (null for
    a side a left or outer join sends alone), the later of the two timestamps.

    A record without a key meets nothing, as in Kafka Streams: a left (or outer) join sends a left (or
    either) one alone at once, with its own timestamp, and the others are dropped and counted
    (`keyless_records`). With `params.keyless` `one_key`, keyless records join each other as records of
    one key."""

    Params: ClassVar[type[WindowJoinParams]] = WindowJoinParams

    @classmethod
    def stores_for(cls, params: Any, name: str) -> Mapping[str, Mapping[str, Any]]:
        """A window store per side, keeping a record as long as an on-time record may still join it."""
        retention = params.unmatchable_after_ms + 1
        return {f"{name}-{side}": {"kind": "window", "retention_ms": retention} for side in ("left", "right")}

    def init(self, ctx: Context) -> None:
        params = self.Params.model_validate(ctx.params)
        self.keyless_alone = params.keyless == "alone"
        self.left_topic, self.output = params.left, params.output
        self.before, self.after, self.grace = params.before, params.after, params.grace_ms
        self.unmatchable_after = params.unmatchable_after_ms
        self.left = ctx.window_store(f"{ctx.processor_name}-left")
        self.right = ctx.window_store(f"{ctx.processor_name}-right")
        self.sent_alone = {"inner": (), "left": (self.left,), "outer": (self.left, self.right)}[params.join]
        self.ctx = ctx
        ctx.schedule(1, self._close_passed, "stream_time")  # a record's window closes at any millisecond

    def process(self, record: Record, ctx: Context) -> None:
        if record.topic == self.left_topic:  # how far back and ahead of it a record's partners may be
            own, other, back, ahead = self.left, self.right, self.before, self.after
        else:
            own, other, back, ahead = self.right, self.left, self.after, self.before
        if record.key is None and self.keyless_alone:
            self._keyless(record, own, ctx)
            return
        timestamp, stream_time = record.timestamp, own.stream_time
        if timestamp + ahead + self.grace < stream_time:  # its window closed
            ctx.count(LATE)
            return
        if timestamp > stream_time:  # first, while the stores still hold what becomes unmatchable now
            self._send_unmatchable_alone(ctx, stream_time, timestamp)
        own.advance(timestamp)
        other.advance(timestamp)
        met = False
        for other_time, waiting in other.fetch(record.key, timestamp - back, timestamp + ahead):
            for entry in waiting:
                self._send(ctx, record.key, record.value, entry[0], own is self.left, max(timestamp, other_time))
                entry[1] = True
            other.put(record.key, other_time, waiting)
            met = True
        own.put(record.key, timestamp, [*own.get(record.key, timestamp, []), [record.value, met]])

    def _close_passed(self) -> None:
        """A stream-time punctuation: what the task's stream time passed with no record here (the test kit's
        `advance_stream_time`, a record that failed) becomes unmatchable as a record's time would make it."""
        before, stream_time = self.left.stream_time, self.ctx.stream_time
        if stream_time > before:
            self._send_unmatchable_alone(self.ctx, before, stream_time)
            self.left.advance(stream_time)
            self.right.advance(stream_time)

    def _send_unmatchable_alone(self, ctx: Context, before: int, stream_time: int) -> None:
        """The records no on-time record can meet once stream time moves from `before` to `stream_time`
        and that met none of the other side: sent alone (left and outer joins). All of them are taken from
        the store, met or not: nothing can join them any more. (None of them could meet the record that
        moves stream time: that one is more than before + after + grace younger.)"""
        unmatchable_from, unmatchable_to = before - self.unmatchable_after, stream_time - self.unmatchable_after - 1
        for store in self.sent_alone:
            for key, timestamp, waiting in store.take_all(unmatchable_from, unmatchable_to):
                for value, met in waiting:
                    if not met:
                        self._send(ctx, key, value, None, store is self.left, timestamp)

    def _send(self, ctx: Context, key: Any, value: Any, other: Any, value_is_left: bool, timestamp: int) -> None:
        joined = {"left": value, "right": other} if value_is_left else {"left": other, "right": value}
        ctx.send(self.output, joined, key=key, timestamp=timestamp)

    def _keyless(self, record: Record, own: WindowStore, ctx: Context) -> None:
        if own in self.sent_alone:
            self._send(ctx, None, record.value, None, own is self.left, record.timestamp)
        else:
            ctx.count(KEYLESS)
