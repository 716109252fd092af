"""Records from the future against a real broker: among ordinary records, one stamped in the year 3000 and
one an hour ahead (event time from a field of the value, as producers nobody controls write it). Every
window kind and de-duplication give what they give without those two, which are dead-lettered with the
reason; the same input without a bound (as in Kafka Streams) loses windows, and de-duplication takes every
record after it for late."""

from __future__ import annotations

import asyncio
import random
import re
import time
from typing import Any

import msgpack
import pytest
from aiokafka import AIOKafkaProducer

from runtime.config import parse_app
from runtime.worker.worker import Worker
from tests.conftest import TopicNamer
from tests.support.kafka_helpers import create_topic, read_topic

pytestmark = pytest.mark.anyio

YEAR_3000 = 32_503_680_000_000
HOUR = 3_600_000
WINDOWS: dict[str, dict[str, Any]] = {
    "tumbling": {"type": "tumbling", "size_ms": 1000, "grace_ms": 200},
    "hopping": {"type": "hopping", "size_ms": 1000, "advance_ms": 250, "grace_ms": 200},
    "sliding": {"type": "sliding", "time_difference_ms": 400, "grace_ms": 200},
    "session": {"type": "session", "gap_ms": 100, "grace_ms": 200},
}
GUARDED = [*WINDOWS, "dedup"]
UNGUARDED = ["tumbling", "dedup"]  # enough to show the harm


def ordinary(count: int) -> list[dict[str, Any]]:
    """Every id twice, the copy three records later, about 20 ms apart in event time ten minutes back,
    one in twenty late by 3 s (past the grace)."""
    rng = random.Random(7)
    at = int(time.time() * 1000) - 600_000
    ids = [n for block in range(0, count // 2, 3) for n in [*range(block, block + 3)] * 2]
    values = []
    for n in ids[:count]:
        at += rng.randint(0, 40)
        values.append(
            {"id": n, "key": f"user-{n % 6}", "n": rng.randint(1, 100), "at": at - rng.choice([0] * 19 + [3000])}
        )
    return values


def from_the_future(values: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`values` with the year 3000 at offset 100 and an hour ahead at offset 200."""
    now = int(time.time() * 1000)
    return [*values[:100], {"id": -1, "key": "user-0", "n": 1, "at": YEAR_3000}, *values[100:199],
            {"id": -2, "key": "user-1", "n": 1, "at": now + HOUR}, *values[199:]]  # fmt: skip


async def produce(bootstrap: str, topic: str, values: list[dict[str, Any]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        sent = [await producer.send(topic, msgpack.packb(value), key=value["key"].encode()) for value in values]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


def processor(kind: str, source: str, out: str, late: str) -> dict[str, Any]:
    if kind == "dedup":
        params: dict[str, Any] = {"id": "value.id", "window_ms": 60_000, "output": out}
        return {"name": f"{kind}-{source}", "class": "processors.dedup:Deduplicate", "inputs": [source],
                "outputs": [out], "params": params}  # fmt: skip
    params = {"window": WINDOWS[kind], "aggregation": {"type": "sum", "field": "n"}, "output": out, "late_topic": late}
    return {"name": f"{kind}-{source}", "class": "processors.windows:Aggregate", "inputs": [source],
            "outputs": [out, late], "params": params}  # fmt: skip


async def results(bootstrap: str, topic: str) -> list[tuple[str, Any]]:
    return [(record.key.decode(), msgpack.unpackb(record.value)) for record in await read_topic(bootstrap, topic)]


async def test_records_from_the_future_change_no_window_nor_de_duplication_and_are_dead_lettered(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Any
) -> None:
    clean, dirty, unbounded, dead = topic_name("clean"), topic_name("dirty"), topic_name("unbounded"), topic_name("dlq")
    values = ordinary(400)
    for source, given in ((clean, values), (dirty, from_the_future(values)), (unbounded, from_the_future(values))):
        await create_topic(kafka_bootstrap, source, 1)
        await produce(kafka_bootstrap, source, given)
    runs = [(clean, kind) for kind in GUARDED] + [(dirty, kind) for kind in GUARDED]
    runs += [(unbounded, kind) for kind in UNGUARDED]
    role = {clean: "clean", dirty: "dirty", unbounded: "unbounded"}
    out = {(source, kind): topic_name(f"{role[source]}-{kind}-out") for source, kind in runs}
    late = {(source, kind): topic_name(f"{role[source]}-{kind}-late") for source, kind in runs}
    assert len({*out.values(), *late.values()}) == 2 * len(runs)
    event_time = {"key_serde": "str", "timestamp": {"field": "at"}}
    app = {
        "app_id": topic_name("app"),
        "topics": {clean: event_time, dirty: event_time, unbounded: {**event_time, "max_ahead": None},
                   **{topic: {"key_serde": "str"} for topic in [*out.values(), *late.values()]}},
        "processors": [processor(kind, source, out[source, kind], late[source, kind]) for source, kind in runs],
        # skip: the unbounded de-duplication sends the year 3000 on, and the broker refuses that timestamp
        "errors": {"deserialization": "dead_letter", "processing": "skip", "dead_letter_topic": dead},
        "state_dir": str(tmp_path / "state"),
        "commit_interval_ms": 200,
    }  # fmt: skip

    worker = Worker(parse_app(app), kafka_bootstrap, until_caught_up=True)
    await asyncio.wait_for(worker.run(), 180)

    assert worker.counters.skipped == 1  # that one
    for kind in GUARDED:
        expected = await results(kafka_bootstrap, out[clean, kind])
        assert expected, f"{kind}: the ordinary records give results"
        assert await results(kafka_bootstrap, out[dirty, kind]) == expected, kind
        if kind != "dedup":
            assert await results(kafka_bootstrap, late[dirty, kind]) == await results(
                kafka_bootstrap, late[clean, kind]
            )
    letters = await read_topic(kafka_bootstrap, dead)
    assert len(letters) == 2 * len(GUARDED) and worker.counters.dead_lettered == len(letters)
    for letter in letters:
        headers = dict(letter.headers)
        assert headers["source.topic"] == dirty.encode()
        assert headers["error.stage"] == b"deserialization"
        assert headers["error.type"] == b"runtime.task.event_time_bounds.EventTimeAhead"
        offset, message = int(headers["source.offset"]), headers["error.message"].decode()
        assert (offset, msgpack.unpackb(letter.value)["id"]) in {(100, -1), (200, -2)}
        assert re.search(r" ahead of the wall clock \(\d{4}-\d\d-\d\dT[0-9:.]+Z\): ", message), message
        assert message.endswith(f"more than max_ahead (0:15:00) of topic '{dirty}'")
        assert ("(3000-01-01T00:00:00.000Z)" in message) == (offset == 100)
        assert (re.search(r" is 0:5\d:\d\d", message) is not None) == (offset == 200)  # an hour, less the wait

    # Without the bound, the year 3000 closes every window and makes all that follows late, and
    # de-duplication drops every record after it as late.
    assert len(await results(kafka_bootstrap, out[unbounded, "tumbling"])) < len(
        await results(kafka_bootstrap, out[clean, "tumbling"])
    )
    assert len(await results(kafka_bootstrap, late[unbounded, "tumbling"])) > 250
    deduplicated = [value["id"] for _, value in await results(kafka_bootstrap, out[unbounded, "dedup"])]
    assert deduplicated == list(dict.fromkeys(value["id"] for value in values[:100])), "what came before it"
