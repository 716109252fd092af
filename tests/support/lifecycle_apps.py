"""Processors that exercise the lifecycle (constructor, `init`, `flush`, `close`, punctuations), for
tests/integration/test_lifecycle.py and test_flush_sink.py (importable by path from an app YAML)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path

from processors import Context, Processor, Record

ROWS_TABLE = """CREATE TABLE IF NOT EXISTS rows (
    partition INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    n INTEGER NOT NULL,
    writes INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (partition, offset)
)"""
UPSERT = """INSERT INTO rows (partition, offset, n) VALUES (?, ?, ?)
ON CONFLICT (partition, offset) DO UPDATE SET writes = writes + 1"""

Row = tuple[int, int, int]


def write_rows(db: Path, rows: list[Row]) -> None:
    """One transaction per call: the rows are all in, or none is."""
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as connection, connection:
        connection.execute(ROWS_TABLE)
        connection.executemany(UPSERT, rows)


def read_rows(db: Path) -> list[tuple[int, int, int, int]]:
    """Every row as (partition, offset, n, writes); none when the sink never flushed."""
    if not db.exists():
        return []
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as connection:
        connection.execute(ROWS_TABLE)
        return list(connection.execute("SELECT partition, offset, n, writes FROM rows ORDER BY partition, offset"))


class SqliteSink(Processor):
    """A batching sink: `process` only buffers a row per record; `flush` writes the buffer to SQLite
    (`params.db`) in one transaction, off the event loop, and empties it only once that succeeded.

    Optional params: `sleep_every` (sleep 10 ms every that many records, so a kill lands mid-run),
    `progress` (a file touched once `progress_after` records were processed), `fail_at` (every flush
    raises while its rows hold the record with that `n`), `failing_flushes` (the first that many
    flushes with rows raise).
    """

    async def init(self, ctx: Context) -> None:
        params = ctx.params
        self.db = Path(str(params["db"]))
        self.sleep_every = int(params.get("sleep_every", 0))
        self.progress = Path(str(params["progress"])) if "progress" in params else None
        self.progress_after = int(params.get("progress_after", 1))
        self.fail_at = params.get("fail_at")
        self.failing_flushes = int(params.get("failing_flushes", 0))
        self.buffer: list[Row] = []
        self.processed = 0

    async def process(self, record: Record, ctx: Context) -> None:
        if self.sleep_every and record.offset % self.sleep_every == 0:
            await asyncio.sleep(0.01)
        self.buffer.append((record.partition, record.offset, int(record.value["n"])))
        self.processed += 1
        if self.progress is not None and self.processed == self.progress_after:
            self.progress.touch()

    async def flush(self, ctx: Context) -> None:
        if not self.buffer:
            return
        if self.failing_flushes > 0:
            self.failing_flushes -= 1
            raise ConnectionError(f"database unavailable ({self.failing_flushes} more failures to come)")
        if self.fail_at is not None and any(n == self.fail_at for _, _, n in self.buffer):
            raise ConnectionError(f"database refused the batch holding n={self.fail_at}")
        await asyncio.to_thread(write_rows, self.db, self.buffer)
        self.buffer = []


class Journal(Processor):
    """Appends what happens to it to `params.journal`, one line per event; `init`, `flush` and `close`
    each await a sleep before their line, so a step that is not awaited leaves no line. `init` sleeps
    longer than a commit interval, so a commit that did not wait for it would flush too early."""

    async def init(self, ctx: Context) -> None:
        self.journal = Path(str(ctx.params["journal"]))
        await asyncio.sleep(0.2)
        self.note("init")
        self.unflushed: list[int] = []

    def process(self, record: Record, ctx: Context) -> None:
        self.note(f"process {record.value['n']}")
        self.unflushed.append(int(record.value["n"]))

    async def flush(self, ctx: Context) -> None:
        await asyncio.sleep(0.01)
        if self.unflushed:
            self.note(f"flush {' '.join(map(str, self.unflushed))}")
            self.unflushed = []

    async def close(self) -> None:
        await asyncio.sleep(0.05)
        self.note("close")

    def note(self, event: str) -> None:
        with self.journal.open("a") as journal:
            journal.write(event + "\n")


class Breaks(Processor):
    """Raises `RuntimeError("<step> broke on purpose")` in the step its subclass names."""

    step = ""

    def __init__(self) -> None:
        self.raise_in("constructor")

    async def init(self, ctx: Context) -> None:
        await asyncio.sleep(0)
        self.raise_in("init")
        ctx.schedule(20, self.punctuate)

    def process(self, record: Record, ctx: Context) -> None:
        pass

    async def flush(self, ctx: Context) -> None:
        await asyncio.sleep(0)
        self.raise_in("flush")

    async def close(self) -> None:
        await asyncio.sleep(0)
        self.raise_in("close")

    def punctuate(self) -> None:
        self.raise_in("punctuation")

    def raise_in(self, step: str) -> None:
        if step == self.step:
            raise RuntimeError(f"{step} broke on purpose")


class BreaksInConstructor(Breaks):
    step = "constructor"


class BreaksInInit(Breaks):
    step = "init"


class BreaksInFlush(Breaks):
    step = "flush"


class BreaksInClose(Breaks):
    step = "close"


class BreaksInPunctuation(Breaks):
    step = "punctuation"
