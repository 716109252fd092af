"""Each customer's order count and sum, from the order events: kept in a store, sent on at every change."""

from __future__ import annotations

from processors import Context, Processor, Record


class CustomerTotals(Processor):
    """params: `output`, the topic of `{"customer", "orders", "amount_minor"}` records keyed by customer."""

    def init(self, ctx: Context) -> None:
        self.output = str(ctx.params["output"])
        self.totals = ctx.store("totals")

    def process(self, record: Record, ctx: Context) -> None:
        event = record.value
        orders, amount = self.totals.get(record.key) or (0, 0)
        orders, amount = orders + 1, amount + int(event["amount_minor"])
        self.totals.put(record.key, (orders, amount))
        ctx.send(self.output, {"customer": record.key, "orders": orders, "amount_minor": amount}, key=record.key)
