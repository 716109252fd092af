"""Window processors for the integration tests (importable by path from an app YAML)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from processors import Context, Record
from processors.windows import Aggregate


class SlowAggregate(Aggregate):
    """Aggregate at about 1,000 records/s per task, so a kill lands mid-stream."""

    async def process(self, record: Record, ctx: Context) -> None:  # type: ignore[override]
        if record.offset % 10 == 0:
            await asyncio.sleep(0.01)
        super().process(record, ctx)


class KilledAfterAggregate(Aggregate):
    """Aggregate whose process kills itself (-9) right after the record whose `n` is `KILL_AFTER_N`, once:
    the first time, it leaves the file `KILL_MARKER` behind, and a process that finds it goes on."""

    def process(self, record: Record, ctx: Context) -> None:
        super().process(record, ctx)
        marker = os.environ.get("KILL_MARKER")
        if marker is not None and record.value["n"] == int(os.environ["KILL_AFTER_N"]) and not os.path.exists(marker):
            Path(marker).touch()
            os.kill(os.getpid(), signal.SIGKILL)
