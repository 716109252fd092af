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
