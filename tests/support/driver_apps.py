"""Processors for the test kit's own tests (importable by path from an app config)."""

from __future__ import annotations

from processors import Context, Processor, Record


class Ticker(Processor):
    """Sends `{"tick": n}` every `params.every_ms` of wall clock, and `{"stream_time": t}` each time stream
    time passes a multiple of `params.stream_every_ms`; each record goes on as it came."""

    def init(self, ctx: Context) -> None:
        self.output = str(ctx.params["output"])
        self.ticks = 0
        self.ctx = ctx
        ctx.schedule(int(ctx.params["every_ms"]), self.tick)
        ctx.schedule(int(ctx.params["stream_every_ms"]), self.stream_tick, time="stream_time")

    def tick(self) -> None:
        self.ticks += 1
        self.ctx.send(self.output, {"tick": self.ticks})

    def stream_tick(self) -> None:
        self.ctx.send(self.output, {"stream_time": self.ctx.stream_time})

    def process(self, record: Record, ctx: Context) -> None:
        ctx.send(self.output, record.value, key=record.key)


class Remember(Processor):
    """Keeps each record's value under its key in the `seen` store, and sends the value it replaced."""

    def init(self, ctx: Context) -> None:
        self.output = str(ctx.params["output"])
        self.seen = ctx.store("seen")

    def process(self, record: Record, ctx: Context) -> None:
        ctx.send(self.output, {"before": self.seen.get(record.key), "now": record.value}, key=record.key)
        self.seen.put(record.key, record.value)


class SendsASet(Processor):
    """Sends a value its JSON output topic cannot encode: a serde mistake."""

    def process(self, record: Record, ctx: Context) -> None:
        ctx.send(str(ctx.params["output"]), {"tags": {"a", "b"}}, key=record.key)


class FailsToStart(Processor):
    def init(self, ctx: Context) -> None:
        raise RuntimeError("no connection to the fraud service")


class FlushesElsewhere(Processor):
    """Sends what it was given to `params.output` in its flush."""

    def init(self, ctx: Context) -> None:
        self.output = str(ctx.params["output"])
        self.held: list[Record] = []

    def process(self, record: Record, ctx: Context) -> None:
        self.held.append(record)

    def flush(self, ctx: Context) -> None:
        for record in self.held:
            ctx.send(self.output, record.value, key=record.key)
        self.held.clear()
