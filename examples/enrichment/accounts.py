"""Accounts and their payments on one timeline: accounts are opened, payments made, and now and then an
account changes tier, so that a payment made before a change must see the account as it was before."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

TIERS = ("basic", "silver", "gold")


@dataclass(frozen=True)
class Event:
    topic: str  # "accounts" or "payments"
    key: str
    timestamp: int
    value: dict[str, Any]


def timeline(accounts: int, payments: int, start_ms: int, seed: int) -> list[Event]:
    """Every account opened first; then payments, with one account change for every ten payments."""
    rng = random.Random(seed)
    versions = {f"acc-{n:05d}": 0 for n in range(accounts)}
    now = start_ms
    events = [Event("accounts", key, now, {"owner": f"customer-{key[4:]}", "tier": "basic", "version": 0})
              for key in versions]  # fmt: skip
    now += 1  # the first payment after the accounts were opened
    for n in range(payments):
        now += rng.randint(0, 20)
        account = rng.choice(list(versions))
        if rng.random() < 0.1:
            versions[account] += 1
            tier = rng.choice(TIERS)
            events.append(Event("accounts", account, now, {"owner": f"customer-{account[4:]}", "tier": tier,
                                                           "version": versions[account]}))  # fmt: skip
        else:
            payment = {
                "id": f"pay-{start_ms}-{n:06d}",
                "account": account,
                "at": now,
                "amount_minor": rng.randrange(100, 100_000),
            }
            events.append(Event("payments", account, now, payment))
    return events


async def produce(bootstrap: str, topics: dict[str, str], events: list[Event], accounts_first: bool) -> None:
    """Each topic's events in time order; one topic written whole before the other, as two sources would."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    await producer.start()
    try:
        for kind in ("accounts", "payments") if accounts_first else ("payments", "accounts"):
            for event in (e for e in events if e.topic == kind):
                await producer.send(topics[kind], orjson.dumps(event.value), key=event.key.encode(),
                                    timestamp_ms=event.timestamp)  # fmt: skip
        await producer.flush()
    finally:
        await producer.stop()


def enriched(events: list[Event]) -> dict[str, dict[str, Any]]:
    """Each payment's id -> the account it must be joined with: its latest version no later than the
    payment (a tie goes to the payment, the processor's input, before the table)."""
    accounts: dict[str, dict[str, Any]] = {}
    joined = {}
    for event in sorted(events, key=lambda e: (e.timestamp, e.topic != "payments")):
        if event.topic == "accounts":
            accounts[event.key] = event.value
        else:
            joined[event.value["id"]] = accounts[event.key]
    return joined
