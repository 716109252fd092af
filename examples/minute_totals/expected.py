"""What the per-minute totals must be, computed in plain Python from the payments in the order they were
produced, to check the app's against.

Each partition of the input has its own stream time: the latest `created_at` among its payments so
far. A minute of an account and currency closes once the stream time of the account's partition
reaches the minute's end plus the grace period; a payment whose minute had closed when it came is
late, and counts in no total. The minutes that had not closed by the last payment are still open:
the app sends them when later payments move the stream time on.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import msgpack

from examples.payments.generate import Payment
from stores.partitioner import partition_for

Minute = tuple[tuple[str, str], int, int]  # ((account, currency), start, end)


@dataclass
class MinuteTotals:
    """The totals of the closed minutes and of those still open, in minor units, and the late payments."""

    closed: dict[Minute, int] = field(default_factory=dict)
    still_open: dict[Minute, int] = field(default_factory=dict)
    late: set[str] = field(default_factory=set)  # payment ids
    out_of_order: int = 0  # payments that came after a later one of their partition


def expected_totals(payments: Iterable[Payment], partitions: int, size_ms: int, grace_ms: int) -> MinuteTotals:
    """The totals the app must send for `payments`, keyed by account, produced in this order into a
    topic of `partitions` partitions, in tumbling windows of `size_ms` with `grace_ms` of grace."""
    stream_time = [-1] * partitions
    totals: dict[Minute, int] = {}
    partition_of: dict[Minute, int] = {}
    found = MinuteTotals()
    for payment in payments:
        value = msgpack.unpackb(payment.value)
        partition, created_at = partition_for(payment.key, partitions), value["created_at"]
        if created_at < stream_time[partition]:
            found.out_of_order += 1
        stream_time[partition] = max(stream_time[partition], created_at)
        start = created_at - created_at % size_ms
        if stream_time[partition] >= start + size_ms + grace_ms:
            found.late.add(value["payment_id"])
            continue
        minute = ((value["account"], value["currency"]), start, start + size_ms)
        totals[minute] = totals.get(minute, 0) + value["amount_minor"]
        partition_of[minute] = partition
    for minute, total in totals.items():
        closed = stream_time[partition_of[minute]] >= minute[2] + grace_ms
        (found.closed if closed else found.still_open)[minute] = total
    return found
