"""Processors that never return from one step, for tests/integration/test_stop_deadline.py: the worker
must still stop on SIGTERM within its shutdown timeout. Each touches `params.started` once stuck."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from processors import Context, Processor, Record

FOREVER_S = 10**6


class _Stuck(Processor):
    def init(self, ctx: Context) -> None:
        self.started = Path(str(ctx.params["started"]))

    def stuck(self) -> None:
        self.started.touch()


class StuckInProcess(_Stuck):
    """Blocks the event loop: a synchronous call that never returns."""

    def process(self, record: Record, ctx: Context) -> None:
        self.stuck()
        while True:
            time.sleep(FOREVER_S)


class StuckInAsyncProcess(_Stuck):
    async def process(self, record: Record, ctx: Context) -> None:
        self.stuck()
        await asyncio.sleep(FOREVER_S)


class StuckInFlush(_Stuck):
    def process(self, record: Record, ctx: Context) -> None:
        self.seen = True

    async def flush(self, ctx: Context) -> None:
        if getattr(self, "seen", False):
            self.stuck()
            await asyncio.sleep(FOREVER_S)


class StuckInClose(_Stuck):
    def process(self, record: Record, ctx: Context) -> None:
        self.stuck()

    def close(self) -> None:
        while True:
            time.sleep(FOREVER_S)


class SlowEcho(_Stuck):
    """Sends each value on to `params.output`, 20 ms a record; slow enough that records are still
    processed, and their outputs unacknowledged, when the broker goes away."""

    async def process(self, record: Record, ctx: Context) -> None:
        self.stuck()
        await asyncio.sleep(0.02)
        ctx.send(str(ctx.params["output"]), record.value, key=record.key)
