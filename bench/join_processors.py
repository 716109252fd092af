"""Join processors the benchmark apps run (apart from bench/processors.py, which bench.regression copies into
trees older than the joins)."""

from __future__ import annotations

import asyncio

from processors import Context, Record
from processors.joins import MergeJoin, MergeJoinParams


class SlowMergeJoinParams(MergeJoinParams):
    slow_every: int = 0  # sleep 1 ms every this many data rows


class SlowMergeJoin(MergeJoin):
    """`MergeJoin` that sleeps 1 ms every `slow_every` rows: a processor far slower than its input."""

    Params = SlowMergeJoinParams

    def init(self, ctx: Context) -> None:
        super().init(ctx)
        self._slow_every = SlowMergeJoinParams.model_validate(ctx.params).slow_every

    async def process(self, record: Record, ctx: Context) -> None:  # type: ignore[override]
        if record.offset % self._slow_every == 0:
            await asyncio.sleep(0.001)
        super().process(record, ctx)
