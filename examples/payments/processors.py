"""The first stage of the payments pipeline: validate each payment and route it.

Valid payments go on keyed by account, so the stages after this one (per-account totals,
limits) see all payments of an account in one partition. Invalid ones go to a rejected
topic with the reason, so they can be reported and fixed instead of silently dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from processors import Context, Processor, Record

CURRENCIES: Final = frozenset({"RUB", "USD", "EUR"})
FIELDS: Final[Mapping[str, type]] = {
    "payment_id": str,
    "terminal_id": str,
    "account": str,
    "amount_minor": int,
    "currency": str,
    "created_at": int,
}
DEFAULT_MAX_AMOUNT_MINOR: Final = 100_000_000  # 1,000,000.00 in any of the currencies


def rejection_reason(payment: Mapping[str, Any], max_amount_minor: int) -> str | None:
    """Why the payment must not go on, or None when it is valid."""
    missing = [name for name in FIELDS if payment.get(name) in (None, "")]
    if missing:
        return f"missing fields: {', '.join(missing)}"
    for name, kind in FIELDS.items():
        value = payment[name]
        # bool is an int subclass, but True is no amount.
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"{name} must be {kind.__name__}, got {type(value).__name__}"
    amount: int = payment["amount_minor"]
    if amount <= 0:
        return f"amount_minor must be positive, got {amount}"
    if amount > max_amount_minor:
        return f"amount_minor {amount} is above the limit {max_amount_minor}"
    if payment["currency"] not in CURRENCIES:
        return f"unknown currency {payment['currency']!r}"
    return None


class ValidatePayment(Processor):
    """Stateless: sends each payment to `valid_topic` (key: account) or `rejected_topic` (key: payment id).

    Params: `valid_topic`, `rejected_topic`, `max_amount_minor` (inclusive). Topic names are params
    so an app, or a test, can rename its topics without touching the code.
    """

    valid_topic = "payments-valid"
    rejected_topic = "payments-rejected"
    max_amount_minor = DEFAULT_MAX_AMOUNT_MINOR

    def init(self, ctx: Context) -> None:
        params = ctx.params
        self.valid_topic = str(params.get("valid_topic", self.valid_topic))
        self.rejected_topic = str(params.get("rejected_topic", self.rejected_topic))
        # int(): a value written as ${VAR:-default} in the YAML arrives as a string.
        self.max_amount_minor = int(params.get("max_amount_minor", self.max_amount_minor))

    def process(self, record: Record, ctx: Context) -> None:
        payment = record.value
        if not isinstance(payment, dict):
            # Not a payment at all: a bug upstream, not a business rejection. Raising hands the
            # record to the app's error policy (fail, skip or dead letter).
            raise TypeError(
                f"payment {record.key!r} at {record.topic}[{record.partition}]@{record.offset} "
                f"is a {type(payment).__name__}, expected a map"
            )
        reason = rejection_reason(payment, self.max_amount_minor)
        if reason is None:
            ctx.send(self.valid_topic, payment, key=payment["account"])
        else:
            ctx.send(self.rejected_topic, {**payment, "reason": reason}, key=record.key)
