"""The example apps' processors, tested as a user tests theirs: on the test kit's driver, from each
example's own YAML, against results computed here."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import msgpack

from examples.acquirers.generate import change_terminals, make_terminals, table
from examples.acquirers.generate import make_payments as make_card_payments
from examples.cdc_merge.changes import joined, transactions
from examples.enrichment.accounts import enriched, timeline
from runtime.testkit import AppDriver

MakeDriver = Callable[..., AppDriver]
START = 1_790_000_040_000  # a whole minute


def payment(payment_id: str, amount_minor: int, account: str = "acc-1", created_at: int = START) -> dict[str, Any]:
    return {"payment_id": payment_id, "terminal_id": "T1", "account": account, "amount_minor": amount_minor,
            "currency": "RUB", "created_at": created_at}  # fmt: skip


def test_payments_are_validated_routed_and_added_up_per_account(app_driver: MakeDriver) -> None:
    payments = app_driver("examples/payments/app.yaml")
    payments.pipe("payments", payment("p-1", 1250), key="p-1")  # the README's test
    assert [r.key for r in payments.read("payments-valid")] == ["acc-1"]
    payments.pipe("payments", payment("p-2", 10**9), key="p-2")  # docs/testing.md's
    [rejected] = payments.read("payments-rejected")
    assert rejected.value["reason"].startswith("amount_minor 1000000000 is above the limit")
    assert payments.read("payments-valid") == []
    payments.pipe("payments", payment("p-3", 750), key="p-3")
    payments.pipe_bytes("payments", b"\xc1not msgpack", b"p-4")  # poison: set aside, the rest goes on
    assert [r.value for r in payments.read("account-totals")] == [
        {"count": 1, "totals": {"RUB": 1250}}, {"count": 2, "totals": {"RUB": 2000}},
    ]  # fmt: skip
    store = payments.store("account-totals", payments.partition_of("payments-valid", "acc-1"))
    assert store.get("acc-1")["count"] == 2
    [poison] = payments.dead_letters()
    assert (poison.stage, poison.processor, poison.key) == ("deserialization", "validate", b"p-4")


def test_payments_are_routed_by_the_acquirer_of_their_terminal_in_the_global_store(app_driver: MakeDriver) -> None:
    rng = random.Random(1)
    terminals = make_terminals(20, rng)
    changed = change_terminals(terminals, 0.3, rng)
    routes = {"ACQ-NORTH": "payments-acq-north", "ACQ-SOUTH": "payments-acq-south"}
    acquirers = app_driver("examples/acquirers/app.yaml")
    acquirers.pipe_bytes_all("terminal-acquirer", [(*t.row(), None) for t in [*terminals, *changed]])
    acquirers.pipe_bytes("terminal-acquirer", b"{not json", b"T-broken")
    paid = make_card_payments(100, terminals, 0.1, rng)
    acquirers.pipe_bytes_all("card-payments", [(p.key, p.value, None) for p in paid])
    acquirer_of = table([*terminals, *changed])
    expected = {p.payment_id: routes.get(acquirer_of.get(p.terminal_id) or "", "payments-unrouted") for p in paid}
    found = {r.key: topic for topic in [*routes.values(), "payments-unrouted"] for r in acquirers.read(topic)}
    assert found == expected
    assert (
        acquirers.global_store("terminal-acquirer").get(terminals[0].terminal_id)
        == acquirer_of[terminals[0].terminal_id]
    )
    [broken] = acquirers.dead_letters()
    assert (broken.stage, broken.processor, broken.key) == ("global-store update", "terminal-acquirer", b"T-broken")


def test_cdc_rows_wait_for_their_transaction_then_join_it(app_driver: MakeDriver) -> None:
    changes = list(transactions(5, seed=2, max_rows=8))
    merge = app_driver("examples/cdc_merge/app.yaml")
    first = changes[0]
    merge.pipe_all("cdc-data", first.rows)
    assert merge.read("cdc-joined") == []  # its transaction's record has not come
    merge.pipe("cdc-transactions", first.record(), key=str(first.id))
    for transaction in changes[1:]:
        merge.pipe_all("cdc-data", transaction.rows)
        merge.pipe("cdc-transactions", transaction.record(), key=str(transaction.id))
    found = sorted((r.key, r.value) for r in merge.read("cdc-joined"))
    assert found == sorted(joined(changes), key=lambda row: (row[0], json.dumps(row[1])))


def test_each_payment_is_enriched_with_its_account_as_of_its_time(app_driver: MakeDriver) -> None:
    events = sorted(timeline(10, 200, START, seed=3), key=lambda e: (e.timestamp, e.topic != "payments"))
    enrichment = app_driver("examples/enrichment/app.yaml")
    topics = {"accounts": "enrich-accounts", "payments": "enrich-payments"}
    for event in events:
        enrichment.pipe(topics[event.topic], event.value, key=event.key, timestamp=event.timestamp)
    found = {r.value["stream"]["id"]: r.value["table"] for r in enrichment.read("enriched-payments")}
    assert found == enriched(events)


def test_merchant_totals_gather_payments_of_every_account_through_the_repartition_topic(
    app_driver: MakeDriver,
) -> None:
    totals = app_driver("examples/merchant_totals/app.yaml")
    accounts = ["acc-0001", "acc-0002", "acc-0003"]
    assert len({totals.partition_of("merchant-payments", a) for a in accounts}) > 1  # read by different tasks
    for n, account in enumerate(accounts):
        value = {"id": f"pay-{n}", "account": account, "merchant": "m-007", "amount_minor": 100 * (n + 1),
                 "at": START + n}  # fmt: skip
        totals.pipe("merchant-payments", value, key=account)
    updates = [(r.key, r.value) for r in totals.read("merchant-minute-totals")]
    assert updates[-1] == ("m-007", {"start": START, "end": START + 60_000, "value": 600})


def test_a_minute_total_is_sent_once_the_grace_is_over_and_a_late_payment_is_set_aside(app_driver: MakeDriver) -> None:
    minutes = app_driver("examples/minute_totals/app.yaml")

    def pay(payment_id: str, amount: int, created_at: int) -> None:
        minutes.pipe_bytes("payments-by-account", msgpack.packb(payment(payment_id, amount, created_at=created_at)),
                           b"acc-1")  # fmt: skip

    pay("p-1", 100, START + 1_000)
    pay("p-2", 200, START + 59_000)
    pay("p-3", 400, START + 61_000)  # the next minute
    pay("p-4", 800, START + 30_000)  # out of order, within the grace: counted
    assert minutes.read("payment-minute-totals") == []
    pay("p-5", 1, START + 60_000 + 20_000)  # the minute plus its 20 s of grace: the first minute is final
    [total] = minutes.read("payment-minute-totals")
    assert (total.key, total.value) == (["acc-1", "RUB"], {"start": START, "end": START + 60_000, "value": 1100})
    pay("p-6", 5, START + 2_000)  # too late for a minute already sent
    [late] = minutes.read("late-payments")
    assert late.value["payment_id"] == "p-6"


def test_a_session_is_sent_once_its_gap_and_grace_have_passed(app_driver: MakeDriver) -> None:
    sessions = app_driver("examples/sessions/app.yaml")

    def click(at: int) -> None:
        sessions.pipe("clicks", {"user": "u-1", "page": "cart", "at": at}, key="u-1")

    for at in (START, START + 60_000, START + 200_000):
        click(at)
    click(START + 200_000 + 300_000 + 30_001)  # past the gap (5 min) and the grace (30 s): a new session
    [session] = sessions.read("click-sessions")
    assert (session.key, session.value) == ("u-1", {"start": START, "end": START + 200_000, "value": 3})
