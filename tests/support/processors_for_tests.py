"""Processor classes for the integration tests of this module's neighbours (importable by path from an app)."""

from __future__ import annotations

from processors import Context, Processor, Record


class Transform(Processor):
    """Sends `{"n", "doubled", "text" upper-cased, "src": [partition, offset]}` to `params.output`, same key."""

    def init(self, ctx: Context) -> None:
        self.output = str(ctx.params["output"])

    def process(self, record: Record, ctx: Context) -> None:
        value = record.value
        transformed = {
            "n": value["n"],
            "doubled": value["n"] * 2,
            "text": str(value["text"]).upper(),
            "src": [record.partition, record.offset],
        }
        ctx.send(self.output, transformed, key=record.key)
