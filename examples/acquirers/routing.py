"""Payments enriched with their terminal's acquirer and routed to that acquirer's topic."""

from __future__ import annotations

from processors import Context, Processor, Record


class RouteByAcquirer(Processor):
    """Reads the acquirer from the global store; a payment at an unknown or deactivated terminal, or of
    an acquirer without a route, goes to the `unrouted` topic with the reason."""

    def init(self, ctx: Context) -> None:
        self._terminals = ctx.global_store(ctx.params["store"])
        self._routes: dict[str, str] = dict(ctx.params["routes"])
        self._unrouted: str = ctx.params["unrouted"]

    def process(self, record: Record, ctx: Context) -> None:
        payment = record.value
        acquirer = self._terminals.get(payment["terminal_id"])
        if acquirer is None:
            ctx.send(self._unrouted, {**payment, "reason": "unknown or inactive terminal"}, key=record.key)
        elif acquirer not in self._routes:
            ctx.send(self._unrouted, {**payment, "acquirer_id": acquirer, "reason": "no route"}, key=record.key)
        else:
            ctx.send(self._routes[acquirer], {**payment, "acquirer_id": acquirer}, key=record.key)
