"""Five simulated days of account activity: each account's events (tweets, likes, follows, direct
messages) at random moments, ending an hour ago, and about 1% of them sent twice, a few seconds apart,
as by a producer that retried."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer

DAY_MS = 86_400_000
KINDS = ("tweet", "like", "follow", "direct_message", "retweet")


@dataclass(frozen=True)
class Event:
    account: str
    timestamp: int
    value: bytes  # the JSON the topic holds

    @property
    def event_id(self) -> str:
        return str(json.loads(self.value)["event_id"])


def five_days(events: int, accounts: int, end_ms: int, seed: int) -> list[Event]:
    """`events` distinct events in time order, then the repeats among them (each after its original)."""
    rng = random.Random(seed)
    start = end_ms - 5 * DAY_MS
    times = sorted(rng.randrange(start, end_ms) for _ in range(events))
    made = []
    for number, timestamp in enumerate(times):
        account = f"acc-{rng.randrange(accounts):05d}"
        value = {"event_id": f"{seed}-{number}", "account": account, "kind": rng.choice(KINDS), "at": timestamp}
        made.append(Event(account, timestamp, json.dumps(value, separators=(",", ":")).encode()))
    repeats = [Event(event.account, event.timestamp + rng.randrange(1, 5_000), event.value)
               for event in made if rng.random() < 0.01]  # fmt: skip
    return sorted(made + repeats, key=lambda event: event.timestamp)


async def produce(bootstrap: str, topic: str, events: list[Event]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=1 << 20, acks="all")
    await producer.start()
    try:
        sent = [await producer.send(topic, event.value, key=event.account.encode(), timestamp_ms=event.timestamp)
                for event in events]  # fmt: skip
        for future in sent:
            await future
    finally:
        await producer.stop()
