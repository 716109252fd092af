"""Processor classes used by the integration tests (importable by path from an app YAML)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from pathlib import Path
from typing import ClassVar

import asyncpg

from processors import Context, Processor, Record
from processors.dedup import Deduplicate
from processors.sinks import PostgresSink, PostgresSinkParams


class Echo(Processor):
    """Sends each value on to `params.output` (and to `params.copy_to`, when set), after an optional
    `sleep_ms` per record; with `keep_headers`, with the record's headers."""

    def init(self, ctx: Context) -> None:
        self.output = str(ctx.params["output"])
        self.copy_to = str(ctx.params["copy_to"]) if "copy_to" in ctx.params else None
        self.sleep_s = float(ctx.params.get("sleep_ms", 0)) / 1000
        self.keep_headers = bool(ctx.params.get("keep_headers", False))

    async def process(self, record: Record, ctx: Context) -> None:
        if self.sleep_s:
            await asyncio.sleep(self.sleep_s)
        value = {"src": [record.partition, record.offset], "value": record.value}
        headers = record.headers if self.keep_headers else None
        ctx.send(self.output, value, key=record.key, headers=headers)
        if self.copy_to is not None:
            ctx.send(self.copy_to, value, key=record.key, headers=headers)


class Picky(Processor):
    """Raises on values marked bad, after sending a partial output that must not escape."""

    def process(self, record: Record, ctx: Context) -> None:
        ctx.send(str(ctx.params["output"]), record.value, key=record.key)
        if record.value.get("bad"):
            raise ValueError(f"bad record {record.key}")


class KillOnce(Processor):
    """SIGKILLs its own process at record `n == crash_at`, once (a marker file remembers)."""

    def init(self, ctx: Context) -> None:
        self.output = str(ctx.params["output"])
        self.copy_to = str(ctx.params["copy_to"]) if "copy_to" in ctx.params else None
        self.crash_at = int(ctx.params["crash_at"])
        self.marker = Path(str(ctx.params["marker"]))

    def process(self, record: Record, ctx: Context) -> None:
        if record.value["n"] == self.crash_at and not self.marker.exists():
            self.marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        ctx.send(self.output, record.value, key=record.key)


class CountPerKey(Processor):
    """Running count per key in the `counts` store; emits every update to `params.output`."""

    def init(self, ctx: Context) -> None:
        self.output = str(ctx.params["output"])
        self.copy_to = str(ctx.params["copy_to"]) if "copy_to" in ctx.params else None
        self.counts = ctx.store("counts")

    def process(self, record: Record, ctx: Context) -> None:
        count = (self.counts.get(record.key) or 0) + 1
        self.counts.put(record.key, count)
        ctx.send(self.output, {"key": record.key, "count": count, "n": record.value["n"]}, key=record.key)


class DoubleCountPerKey(CountPerKey):
    """CountPerKey with a bug: keys ending in 7 are counted twice."""

    def process(self, record: Record, ctx: Context) -> None:
        super().process(record, ctx)
        if str(record.key).endswith("7"):
            super().process(record, ctx)


class SlowCountPerKey(CountPerKey):
    """CountPerKey at about 2,000 records/s per task, so a kill lands mid-stream."""

    async def process(self, record: Record, ctx: Context) -> None:  # type: ignore[override]
        if record.offset % 20 == 0:
            await asyncio.sleep(0.01)
        super().process(record, ctx)


class PacedCountPerKey(CountPerKey):
    """CountPerKey that sleeps `params.sleep_ms` before each record: a steady pace whatever the machine's
    speed, so that a backlog of known size keeps each task busy for a known time."""

    def init(self, ctx: Context) -> None:
        super().init(ctx)
        self.sleep_s = float(ctx.params["sleep_ms"]) / 1000

    async def process(self, record: Record, ctx: Context) -> None:  # type: ignore[override]
        await asyncio.sleep(self.sleep_s)
        super().process(record, ctx)


class AwaitingCountPerKey(CountPerKey):
    """CountPerKey that first awaits a lookup of a random 0 to `params.max_wait_ms` (default 4) ms, and
    raises on values marked bad: for processors with concurrency, whose records overlap while they wait.
    Reads the count after the wait, so two records of one key in flight together would lose an update."""

    def init(self, ctx: Context) -> None:
        super().init(ctx)
        self.max_wait_s = float(ctx.params.get("max_wait_ms", 4)) / 1000
        self.random = random.Random(ctx.partition)

    async def process(self, record: Record, ctx: Context) -> None:  # type: ignore[override]
        await asyncio.sleep(self.random.random() * self.max_wait_s)
        if record.value.get("bad"):
            raise ValueError(f"lookup failed for {record.key}")
        super().process(record, ctx)


class PickyCountPerKey(CountPerKey):
    """CountPerKey that raises on values marked bad (after its store write and output)."""

    def process(self, record: Record, ctx: Context) -> None:
        super().process(record, ctx)
        if record.value.get("bad"):
            raise ValueError(f"bad record {record.key}")


class Inflate(Processor):
    """Sends each value on to `params.output`; one marked big gets `params.pad` random bytes more (random,
    so that no compression shrinks them)."""

    def process(self, record: Record, ctx: Context) -> None:
        value = dict(record.value)
        if value.get("big"):
            value["pad"] = os.urandom(int(ctx.params["pad"]))
        ctx.send(str(ctx.params["output"]), value, key=record.key)


class Hoard(Processor):
    """Keeps `params.value_bytes` of incompressible bytes per record in the `hoard` store (fills a disk)."""

    def init(self, ctx: Context) -> None:
        self.output = str(ctx.params["output"])
        self.copy_to = str(ctx.params["copy_to"]) if "copy_to" in ctx.params else None
        self.size = int(ctx.params["value_bytes"])
        self.hoard = ctx.store("hoard")

    def process(self, record: Record, ctx: Context) -> None:
        self.hoard.put(record.offset, random.Random(record.offset).randbytes(self.size))
        ctx.send(self.output, record.value, key=record.key)


class CountPerWindow(Processor):
    """Counts records per key in tumbling windows of `params.size_ms` over the value's `t`, in the
    `windows` window store."""

    def init(self, ctx: Context) -> None:
        self.size = int(ctx.params["size_ms"])
        self.windows = ctx.window_store("windows")

    def process(self, record: Record, ctx: Context) -> None:
        timestamp = int(record.value["t"])
        self.windows.advance(timestamp)
        start = timestamp - timestamp % self.size
        self.windows.put(record.key, start, self.windows.get(record.key, start, 0) + 1)


class CountPerSession(Processor):
    """Counts records per key and session (`params.gap_ms` of inactivity ends one) over the value's `t`,
    in the `sessions` session store: a record joins, and merges, the sessions within the gap of it."""

    def init(self, ctx: Context) -> None:
        self.gap = int(ctx.params["gap_ms"])
        self.sessions = ctx.session_store("sessions")

    def process(self, record: Record, ctx: Context) -> None:
        timestamp = int(record.value["t"])
        self.sessions.advance(timestamp)
        start, end, count = timestamp, timestamp, 1
        for found_start, found_end, found_count in list(
            self.sessions.find(record.key, timestamp - self.gap, timestamp + self.gap)
        ):
            self.sessions.delete(record.key, found_start, found_end)
            start, end, count = min(start, found_start), max(end, found_end), count + found_count
        self.sessions.put(record.key, start, end, count)


class Taxed(Processor):
    """Sends each payment on to `params.output` with its tax (a tenth of its amount) added."""

    def process(self, record: Record, ctx: Context) -> None:
        payment = record.value
        ctx.send(str(ctx.params["output"]), {**payment, "tax": payment["amount"] // 10}, key=record.key)


def merchant_of(record: Record) -> str:
    """A key function for `repartition: {key: tests.support.apps:merchant_of}`."""
    return str(record.value["merchant"]).upper()


class SlowPostgresSink(PostgresSink):
    """PostgresSink at about 4,000 records/s per task, so that kills land while it writes."""

    async def process(self, record: Record, ctx: Context) -> None:
        if record.offset % 40 == 0:
            await asyncio.sleep(0.01)
        await super().process(record, ctx)


def amount(record: Record, buggy: bool) -> int:
    """The record's `amount`; ten times over for keys ending in 7 when `buggy`."""
    found = int(record.value["amount"])
    return found * 10 if buggy and str(record.key).endswith("7") else found


class LedgerWriter(Processor):
    """docs/databases.md's pattern: a processor that writes to PostgreSQL itself, each row with its
    record's idempotency key, in one database transaction per commit; a record delivered again writes its
    row over itself by the key's unique constraint, and after a rewind the fixed code's row over the bug's.
    params: `dsn`, `table` (idempotency_key text PRIMARY KEY, account, amount), `buggy` (see `amount`)."""

    async def init(self, ctx: Context) -> None:
        self.connection = await asyncpg.connect(str(ctx.params["dsn"]))
        self.insert = (f"INSERT INTO {ctx.params['table']} (idempotency_key, account, amount) VALUES ($1, $2, $3) "
                       "ON CONFLICT (idempotency_key) DO UPDATE SET account = excluded.account, "
                       "amount = excluded.amount")  # fmt: skip
        self.buggy = bool(ctx.params.get("buggy", False))
        self.entries: list[tuple[str, str, int]] = []

    def process(self, record: Record, ctx: Context) -> None:
        self.entries.append((record.idempotency_key, record.key, amount(record, self.buggy)))

    async def flush(self, ctx: Context) -> None:
        async with self.connection.transaction():
            await self.connection.executemany(self.insert, self.entries)
        self.entries.clear()

    async def close(self) -> None:
        await self.connection.close()


class AmountSinkParams(PostgresSinkParams):
    buggy: bool = False


class AmountSink(PostgresSink):
    """A PostgresSink whose `value.amount` column gets `amount(record, params.buggy)`."""

    Params: ClassVar[type[PostgresSinkParams]] = AmountSinkParams

    async def init(self, ctx: Context) -> None:
        await super().init(ctx)
        self.buggy = bool(ctx.params.get("buggy", False))

    async def process(self, record: Record, ctx: Context) -> None:
        value = {**record.value, "amount": amount(record, self.buggy)}
        await super().process(
            Record(record.topic, record.partition, record.offset, record.timestamp, record.key, value, record.headers),
            ctx,
        )


class SlowDeduplicate(Deduplicate):
    """Deduplicate at about 4,000 records/s per task, so that kills land while it runs."""

    async def process(self, record: Record, ctx: Context) -> None:  # type: ignore[override]
        if record.offset % 40 == 0:
            await asyncio.sleep(0.01)
        super().process(record, ctx)


class SlowSyncEcho(Processor):
    """Sends each value on to `params.output` after blocking the event loop `sleep_ms` (a synchronous call)."""

    def init(self, ctx: Context) -> None:
        self.output = str(ctx.params["output"])
        self.sleep_s = float(ctx.params["sleep_ms"]) / 1000

    def process(self, record: Record, ctx: Context) -> None:
        time.sleep(self.sleep_s)
        ctx.send(self.output, record.value, key=record.key)
