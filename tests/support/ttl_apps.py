"""A processor on a key-value store with a TTL, after Quix Streams' State TTL cookbook ("Emit only on toggle
or after TTL expiry"), by stream time instead of the wall clock."""

from __future__ import annotations

from processors import Context, Processor, Record


class EmitOnToggleOrExpiry(Processor):
    """Sends a reading `{"event": ...}` on when it differs from its key's last one sent, or when that one
    expired; drops it otherwise. A reading with `ttl_ms` keeps its event that long instead of the store's
    `ttl_ms`."""

    def init(self, ctx: Context) -> None:
        self.output = str(ctx.params["output"])
        self.last = ctx.store("last-event")

    def process(self, record: Record, ctx: Context) -> None:
        event = record.value["event"]
        if self.last.get(record.key) == event:
            return
        self.last.put(record.key, event, ttl_ms=record.value.get("ttl_ms"))
        ctx.send(self.output, record.value, key=record.key)
