"""Each example app, the same input records, on the test kit's driver and on a real broker: the same
outputs. The driver runs the runtime's own tasks, stores and policies, so this holds by construction;
this test is what keeps it so."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import orjson
import pytest

from examples.acquirers.generate import make_payments as make_card_payments
from examples.acquirers.generate import make_terminals
from examples.cdc_merge.changes import transactions
from examples.disorder import Disorder
from examples.enrichment.accounts import timeline
from examples.merchant_totals.run import payments as merchant_payments
from examples.payments.generate import make_payments
from examples.sessions.clicks import make_activity
from tests.conftest import TopicNamer
from tests.support.driver_vs_broker import Outputs, Produced, on_broker, on_driver
from tests.support.example_apps import renamed

Inputs = Callable[[TopicNamer, int], list[Produced]]
"""An example's input records, its topics named by the test, from an epoch ms start."""


def payments(name: TopicNamer, start: int) -> list[Produced]:
    made = make_payments(300, invalid_ratio=0.1, seed=5, poison_ratio=0.03, start_ms=start)
    return [Produced(name("payments"), p.key, p.value, start + n) for n, p in enumerate(made)]


def acquirers(name: TopicNamer, start: int) -> list[Produced]:
    rng = random.Random(3)
    terminals = make_terminals(30, rng)
    rows = [Produced(name("terminal-acquirer"), *t.row(), start + n) for n, t in enumerate(terminals)]
    rows.append(Produced(name("terminal-acquirer"), b"T-broken", b"{not json", start + len(rows)))
    paid = make_card_payments(200, terminals, 0.1, rng)
    return [*rows, *(Produced(name("card-payments"), p.key, p.value, start + 100 + n) for n, p in enumerate(paid))]


def cdc_merge(name: TopicNamer, start: int) -> list[Produced]:
    records: list[Produced] = []
    for transaction in transactions(25, seed=4, max_rows=12):
        for key, value in transaction.rows:
            records.append(Produced(name("cdc-data"), key.encode(), orjson.dumps(value), start + len(records)))
        record = orjson.dumps(transaction.record())
        records.append(Produced(name("cdc-transactions"), str(transaction.id).encode(), record, start + len(records)))
    return records


def enrichment(name: TopicNamer, start: int) -> list[Produced]:
    topics = {"accounts": name("enrich-accounts"), "payments": name("enrich-payments")}
    events = sorted(timeline(40, 400, start, seed=6), key=lambda e: (e.timestamp, e.topic != "payments"))
    return [Produced(topics[e.topic], e.key.encode(), orjson.dumps(e.value), e.timestamp) for e in events]


def merchant_totals(name: TopicNamer, start: int) -> list[Produced]:
    made = merchant_payments(300, start, seed=7)
    return [Produced(name("merchant-payments"), key.encode(), orjson.dumps(value), int(str(value["at"])))
            for key, value in made]  # fmt: skip


def minute_totals(name: TopicNamer, start: int) -> list[Produced]:
    """Payments over some minutes (their times stretched twentyfold), some delayed, some past the grace."""
    disorder = Disorder(delayed_share=0.2, max_delay_ms=750, late_share=0.05, late_delay_ms=4_500)
    made = make_payments(400, invalid_ratio=0, seed=8, start_ms=start, disorder=disorder, key_field="account")
    records = []
    for n, payment in enumerate(made):
        value = msgpack.unpackb(payment.value)
        value["created_at"] = start + (value["created_at"] - start) * 20
        records.append(Produced(name("payments-by-account"), payment.key, msgpack.packb(value), start + n))
    return records


def sessions(name: TopicNamer, start: int) -> list[Produced]:
    disorder = Disorder(delayed_share=0.2, max_delay_ms=20_000, late_share=0.05, late_delay_ms=400_000)
    activity = make_activity(6, 4, 300_000, start, seed=9, disorder=disorder)
    return [Produced(name("clicks"), *click.record(), click.at) for click in activity.clicks]


def merchant_final_totals(outputs: Outputs) -> Outputs:
    """`emit: updates` sends a minute's running total at most once per commit, so how many updates there
    are depends on when commits fall: compared is each minute's last, its largest."""
    final: dict[tuple[str, Any, Any], Any] = {}
    for topic, records in outputs.items():
        for key, value in records:
            where = (topic, key, value["start"])
            final[where] = max(final.get(where, value), value, key=lambda v: v["value"])
    return {topic: sorted((key, v) for (t, key, _), v in final.items() if t == topic) for topic in outputs}


def account_final_totals(outputs: Outputs) -> Outputs:
    """An account's payments reach `payments-valid` from several validating tasks, interleaved as they
    happen to run, so the running totals on the way depend on timing: compared is each account's last
    (the one with the highest count)."""
    totals = next(topic for topic in outputs if topic.endswith("account-totals"))
    final: dict[Any, Any] = {}
    for key, value in outputs[totals]:
        final[key] = max(final.get(key, value), value, key=lambda v: v["count"])
    return {**outputs, totals: sorted(final.items())}


@dataclass(frozen=True)
class Example:
    app_yaml: str
    param_topics: tuple[str, ...]
    inputs: Inputs
    compared: Callable[[Outputs], Outputs] = lambda outputs: outputs


EXAMPLES = {
    "payments": Example(
        "examples/payments/app.yaml", ("valid_topic", "rejected_topic", "output_topic"), payments, account_final_totals
    ),
    "acquirers": Example("examples/acquirers/app.yaml", ("routes", "unrouted"), acquirers),
    "cdc_merge": Example(
        "examples/cdc_merge/app.yaml", ("data", "transactions", "output", "unmatched_topic"), cdc_merge
    ),
    "enrichment": Example("examples/enrichment/app.yaml", ("output",), enrichment),
    "merchant_totals": Example(
        "examples/merchant_totals/app.yaml", ("output",), merchant_totals, merchant_final_totals
    ),
    "minute_totals": Example("examples/minute_totals/app.yaml", ("output", "late_topic"), minute_totals),
    "sessions": Example("examples/sessions/app.yaml", ("output",), sessions),
}


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_driver_and_a_broker_give_the_same_outputs(
    example: str, kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    spec = EXAMPLES[example]
    app_yaml = renamed(Path(spec.app_yaml), topic_name, tmp_path / "broker-state", spec.param_topics)
    # Recent, so the broker keeps it, and far enough back that the longest example (the sessions, over
    # an hour and a half) ends before the wall clock: a record ahead of it by more than max_ahead is refused.
    start = (time.time_ns() // 1_000_000 - 3 * 3_600_000) // 60_000 * 60_000
    records = spec.inputs(topic_name, start)
    driven = spec.compared(on_driver(app_yaml, records, tmp_path / "driver-state"))
    brokered = spec.compared(asyncio.run(on_broker(app_yaml, records, kafka_bootstrap)))
    assert sum(len(outputs) for outputs in driven.values()) > 0
    assert driven == brokered
