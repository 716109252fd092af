"""Join processors for the integration tests (importable by path from an app YAML)."""

from __future__ import annotations

import asyncio

from processors import Context, Record
from processors.joins import MergeJoin


class SlowMergeJoin(MergeJoin):
    """MergeJoin at about 1,000 rows/s per task, so a kill lands mid-stream."""

    async def process(self, record: Record, ctx: Context) -> None:  # type: ignore[override]
        if record.offset % 10 == 0:
            await asyncio.sleep(0.01)
        super().process(record, ctx)
