"""The second stage of the payments pipeline: running totals per account, as a table topic.

`payments-valid` is keyed by account, so every payment of an account arrives at the same task, in
order. The task keeps the account's totals in its local store (RocksDB, backed by a compacted
changelog topic that restores it after a crash or when the partition moves to another worker) and
sends every new state on to a compacted topic keyed by account: its latest record per account is
the current table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from processors import Context, Processor, Record


def table_row(state: Mapping[str, Any]) -> dict[str, Any]:
    """What the output topic shows of an account's stored state: its count and totals per currency."""
    return {"count": state["count"], "totals": state["totals"]}


class AccountTotals(Processor):
    """Per account: the number of valid payments and their sum per currency, in minor units.

    Stored value: `{"count": n, "totals": {"RUB": minor, ...}, "offset": o}`, `o` being the input
    offset of the last payment counted. Idempotency: a payment redelivered under at-least-once (after
    a crash, with its effect already restored from the changelog) sits at or below the account's `o`,
    since an account's payments arrive in offset order through one partition, so it is not counted
    again; its totals are only sent again, in case the first send was lost. A payment the validator
    itself sends twice (after its own crash) has a new offset and would count twice: that needs
    `guarantee: exactly_once` (coming). The offsets belong to `payments-valid`: should that topic be
    recreated, delete the store's changelog topic and state directory with it.

    Params: `output_topic` (default `account-totals`), `store` (default `account-totals`).
    """

    output_topic = "account-totals"
    store_name = "account-totals"

    def init(self, ctx: Context) -> None:
        self.output_topic = str(ctx.params.get("output_topic", self.output_topic))
        self.totals = ctx.store(str(ctx.params.get("store", self.store_name)))

    def process(self, record: Record, ctx: Context) -> None:
        payment = record.value
        if not isinstance(payment, dict):
            raise TypeError(
                f"record {record.key!r} at {record.topic}[{record.partition}]@{record.offset} "
                f"is a {type(payment).__name__}, expected a payment map"
            )
        account = record.key  # the validator keys valid payments by account: its partition is the account's
        state = self.totals.get(account)
        if state is not None and record.offset <= state["offset"]:
            ctx.send(self.output_topic, table_row(state), key=account)
            return
        if state is None:
            state = {"count": 0, "totals": {}}
        totals = dict(state["totals"])
        currency = payment["currency"]
        totals[currency] = totals.get(currency, 0) + payment["amount_minor"]
        state = {"count": state["count"] + 1, "totals": totals, "offset": record.offset}
        self.totals.put(account, state)
        ctx.send(self.output_topic, table_row(state), key=account)
