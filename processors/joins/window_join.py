"""The stream-stream join: records of two co-partitioned inputs with the same key and timestamps at most
`time_difference_ms` apart are joined, as Kafka Streams' KStream-KStream join with
`JoinWindows.ofTimeDifferenceAndGrace`.

With D the difference and G the grace, and stream time the largest timestamp taken so far: a record of
time t joins the other side's records of times t - D to t + D. It is late, counted (`late_records`) and
dropped, when t + D + G is before stream time: its window closed. Each side's records wait in a window
store of their own, under (key, timestamp), for the other side's records of their window; an on-time
record of the other side is at least stream time - D - G, so one that can meet a record of time t comes
as long as stream time is at most t + 2D + G, and the stores keep each record that long (their retention,
2D + G + 1, is the same for every kind of join). A left (or outer) join sends a left (or either) record
that met none of the other side, with null for the other side, only once stream time passed t + 2D + G,
so no record is sent with null and then joined after all, and no record that met one is sent with null.
The task takes both inputs in timestamp order, so the results do not depend on which input Kafka got
first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

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
    time_difference_ms: int = Field(ge=0)
    grace_ms: int = Field(default=0, ge=0)
    join: Literal["inner", "left", "outer"] = "inner"
    keyless: Keyless = "alone"
    output: str

    _sides_are_inputs = field_validator("left", "right")(
        classmethod(lambda cls, topic, info: among_inputs(topic, info))
    )
    _among_outputs = field_validator("output")(classmethod(lambda cls, topic, info: among_outputs(topic, info)))

    @model_validator(mode="after")
    def _two_sides(self) -> WindowJoinParams:
        if self.left == self.right:
            raise ValueError("left and right are two topics")
        return self

    @property
    def closes_after_ms(self) -> int:
        """How long after its timestamp, in stream time, a record's window closes: later, it is late."""
        return self.time_difference_ms + self.grace_ms

    @property
    def unmatchable_after_ms(self) -> int:
        """How long after its timestamp, in stream time, an on-time record of the other side may still meet
        a record: the latest (timestamp + difference) comes on time until its own window closes."""
        return 2 * self.time_difference_ms + self.grace_ms


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
        self.difference, self.closes_after = params.time_difference_ms, params.closes_after_ms
        self.unmatchable_after = params.unmatchable_after_ms
        self.left = ctx.window_store(f"{ctx.processor_name}-left")
        self.right = ctx.window_store(f"{ctx.processor_name}-right")
        self.sent_alone = {"inner": (), "left": (self.left,), "outer": (self.left, self.right)}[params.join]

    def process(self, record: Record, ctx: Context) -> None:
        own, other = (self.left, self.right) if record.topic == self.left_topic else (self.right, self.left)
        if record.key is None and self.keyless_alone:
            self._keyless(record, own, ctx)
            return
        timestamp, stream_time = record.timestamp, own.stream_time
        if timestamp + self.closes_after < stream_time:
            ctx.count(LATE)
            return
        if timestamp > stream_time:  # first, while the stores still hold what becomes unmatchable now
            self._send_unmatchable_alone(ctx, stream_time, timestamp)
        own.advance(timestamp)
        other.advance(timestamp)
        met = False
        for other_time, waiting in other.fetch(record.key, timestamp - self.difference, timestamp + self.difference):
            for entry in waiting:
                self._send(ctx, record.key, record.value, entry[0], own is self.left, max(timestamp, other_time))
                entry[1] = True
            other.put(record.key, other_time, waiting)
            met = True
        own.put(record.key, timestamp, [*own.get(record.key, timestamp, []), [record.value, met]])

    def _send_unmatchable_alone(self, ctx: Context, before: int, stream_time: int) -> None:
        """The records no on-time record can meet once stream time moves from `before` to `stream_time`
        and that met none of the other side: sent alone (left and outer joins). All of them are taken from
        the store, met or not: nothing can join them any more. (None of them could meet the record that
        moves stream time: that one is more than twice the difference plus the grace younger.)"""
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
