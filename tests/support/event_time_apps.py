"""Processors and a timestamp extractor for tests/integration/test_event_time.py (importable by path)."""

from __future__ import annotations

from processors import Context, Processor, Record


def event_time(record: Record) -> int:
    """A timestamp extractor: the value's `at`."""
    return int(record.value["at"])


class Stamp(Processor):
    """Sends, in the order it processes them, each record's topic, timestamp, stream time and place
    (`src`: [partition, offset]) to `params.output`, keyed by the input partition."""

    def init(self, ctx: Context) -> None:
        self.output = str(ctx.params["output"])

    def process(self, record: Record, ctx: Context) -> None:
        stamp = {"topic": record.topic, "t": record.timestamp, "stream_time": ctx.stream_time,
                 "src": [record.partition, record.offset]}  # fmt: skip
        ctx.send(self.output, stamp, key=f"p{record.partition}")


class Ticks(Stamp):
    """A `Stamp` whose stream-time punctuation, every `params.every_ms`, sends `{"tick": stream time,
    "seen": records processed so far}`."""

    def init(self, ctx: Context) -> None:
        super().init(ctx)
        self.ctx = ctx
        self.seen = 0
        ctx.schedule(int(ctx.params["every_ms"]), self.tick, time="stream_time")

    def process(self, record: Record, ctx: Context) -> None:
        self.seen += 1
        super().process(record, ctx)

    def tick(self) -> None:
        self.ctx.send(self.output, {"tick": self.ctx.stream_time, "seen": self.seen}, key="ticks")


class Stamped(Processor):
    """For each record, one output with no timestamp of its own and one with `params.shift_ms` added to
    the record's (a record whose value has `shift_ms` gives that instead, wrong as it may be); a
    stream-time punctuation every `params.every_ms` and a wall-clock one every 50 ms each send the
    stream time they saw. Outputs go to `params.output`, keyed by what made them."""

    def init(self, ctx: Context) -> None:
        self.ctx, self.output, self.shift = ctx, str(ctx.params["output"]), int(ctx.params["shift_ms"])
        self.ticked = False
        ctx.schedule(int(ctx.params["every_ms"]), self.stream_tick, time="stream_time")
        ctx.schedule(50, self.wall_tick)

    def process(self, record: Record, ctx: Context) -> None:
        ctx.send(self.output, {"at": record.timestamp}, key="record")
        shift = record.value.get("shift_ms", self.shift)
        ctx.send(self.output, {"at": record.timestamp}, key="shifted", timestamp=record.timestamp + shift)

    def stream_tick(self) -> None:
        self.ctx.send(self.output, {"stream_time": self.ctx.stream_time}, key="stream_tick")

    def wall_tick(self) -> None:
        if not self.ticked:  # once is enough
            self.ticked = True
            self.ctx.send(self.output, {"stream_time": self.ctx.stream_time}, key="wall_tick")
