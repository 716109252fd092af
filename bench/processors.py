"""Processors the benchmark apps run."""

from __future__ import annotations

import asyncio
import time

from processors import Context, Processor, Record

# A list, as the producer's batch builder takes headers: it goes to every output as it is.
_UNSAMPLED_TRACEPARENT = [("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")]


class Transform(Processor):
    """Stateless: adds a field to each value and sends it on under the same key.

    params: `output`, the topic to send to.
    """

    def init(self, ctx: Context) -> None:
        self._output = str(ctx.params["output"])

    def process(self, record: Record, ctx: Context) -> None:
        ctx.send(self._output, {**record.value, "seen": True}, key=record.key)


class Lookup(Processor):
    """`Transform` after awaiting a lookup of `params.wait_ms` (an `asyncio.sleep`, as a database or HTTP
    call of that latency would take); with `wait_ms: 0`, an `async def process` that does not await.

    params: `output`, `wait_ms`.
    """

    def init(self, ctx: Context) -> None:
        self._output = str(ctx.params["output"])
        self._wait_s = float(ctx.params["wait_ms"]) / 1000

    async def process(self, record: Record, ctx: Context) -> None:
        if self._wait_s:
            await asyncio.sleep(self._wait_s)
        ctx.send(self._output, {**record.value, "seen": True}, key=record.key)


class TransformCarryingTraceparent(Transform):
    """`Transform` whose outputs all carry one fixed, unsampled W3C `traceparent` header, as a traced
    app's outputs do: with telemetry off, what that header costs on its own on the way out."""

    def process(self, record: Record, ctx: Context) -> None:
        ctx.send(self._output, {**record.value, "seen": True}, key=record.key, headers=_UNSAMPLED_TRACEPARENT)


class CountPerKey(Processor):
    """Stateful: a running count per key in the `counts` store; sends every update under the same key.

    With the store's default serdes, its changelog records are the msgpack-encoded key -> the
    msgpack-encoded count. params: `output`.
    """

    def init(self, ctx: Context) -> None:
        self._output = str(ctx.params["output"])
        self._counts = ctx.store("counts")

    def process(self, record: Record, ctx: Context) -> None:
        count = (self._counts.get(record.key) or 0) + 1
        self._counts.put(record.key, count)
        ctx.send(self._output, {"key": record.key, "count": count}, key=record.key)


class PacedTransform(Processor):
    """Like `Transform`, but at most `records_per_second` per task: it sleeps between records.

    The sleeps are paced against a clock rather than being a fixed delay per record, so the rate
    holds although the event loop's timers are coarser than the gap between two records.
    params: `output`, `records_per_second`.
    """

    def init(self, ctx: Context) -> None:
        self._output = str(ctx.params["output"])
        self._interval = 1.0 / float(ctx.params["records_per_second"])
        self._next = time.monotonic()

    async def process(self, record: Record, ctx: Context) -> None:
        now = time.monotonic()
        due = max(self._next, now)
        if due > now:
            await asyncio.sleep(due - now)
        self._next = due + self._interval
        ctx.send(self._output, {**record.value, "seen": True}, key=record.key)


class Rejecting(Transform):
    """`Transform`, then raises: every record fails after sending its output, which the error policy drops."""

    def process(self, record: Record, ctx: Context) -> None:
        super().process(record, ctx)
        raise ValueError(f"rejected record {record.key}")


class StampedCount(CountPerKey):
    """`CountPerKey`, each output also naming the worker that processed it and when (time.time()).

    params: `output`, `worker`.
    """

    def init(self, ctx: Context) -> None:
        super().init(ctx)
        self._worker = str(ctx.params["worker"])

    def process(self, record: Record, ctx: Context) -> None:
        count = (self._counts.get(record.key) or 0) + 1
        self._counts.put(record.key, count)
        value = {"key": record.key, "count": count, "worker": self._worker, "at": time.time()}
        ctx.send(self._output, value, key=record.key)
