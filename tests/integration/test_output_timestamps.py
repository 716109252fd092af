"""Output timestamps against a real broker: an output takes the event time of the record it was sent
for, unless the processor gives one; a punctuation's outputs take the time it fired for."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgpack
import pytest

from runtime.config import parse_app
from runtime.worker.worker import Worker
from tests.conftest import TopicNamer
from tests.integration.test_event_time import BASE, produce_timed, stream_time_ticks
from tests.support.kafka_helpers import create_topic, read_topic

pytestmark = pytest.mark.anyio

EVERY_MS = 10_000


def stamped_app(app_id: str, source: str, sink: str, dead: str, guarantee: str) -> dict[str, Any]:
    return {
        "app_id": app_id,
        "guarantee": guarantee,
        "topics": {source: {"key_serde": "str", "timestamp": {"field": "at"}}, sink: {"key_serde": "str"}},
        "processors": [
            {"name": "stamped", "class": "tests.support.event_time_apps:Stamped", "inputs": [source],
             "outputs": [sink], "params": {"output": sink, "shift_ms": 7, "every_ms": EVERY_MS}}
        ],
        "errors": {"processing": "dead_letter", "dead_letter_topic": dead},
    }  # fmt: skip


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
async def test_outputs_take_their_records_event_time_or_the_one_given_and_punctuations_their_firing_time(
    kafka_bootstrap: str, topic_name: TopicNamer, guarantee: str
) -> None:
    source, sink, dead = topic_name("in"), topic_name("out"), topic_name("dlq")
    await create_topic(kafka_bootstrap, source, 1)
    # Event times a second apart in the value; the Kafka timestamps are the producer's clock, an hour later.
    event_times = [BASE + 1000 * i for i in range(40)]
    await produce_timed(kafka_bootstrap, source, [(0, None, {"at": at}) for at in event_times])
    await produce_timed(kafka_bootstrap, source, [(0, None, {"at": BASE + 40_000, "shift_ms": -BASE - 50_000})])
    started = time.time_ns() // 1_000_000
    worker = Worker(parse_app(stamped_app(topic_name("app"), source, sink, dead, guarantee)), kafka_bootstrap, True)
    await asyncio.wait_for(worker.run(), 60)
    ended = time.time_ns() // 1_000_000

    sent: dict[str, list[tuple[int, dict[str, int]]]] = {}
    for record in await read_topic(kafka_bootstrap, sink):
        sent.setdefault(record.key.decode(), []).append((record.timestamp, msgpack.unpackb(record.value)))
    assert sent["record"] == [(at, {"at": at}) for at in event_times]
    assert sent["shifted"] == [(at + 7, {"at": at}) for at in event_times]
    ticks = [tick["tick"] for tick in stream_time_ticks([*event_times, BASE + 40_000], EVERY_MS)]
    assert len(ticks) >= 4
    assert sent["stream_tick"] == [(at, {"stream_time": at}) for at in ticks], "stamped with the stream time then"
    [(wall_time, _)] = sent["wall_tick"]
    assert started <= wall_time <= ended, "a wall-clock punctuation's outputs take the wall-clock time it fired at"

    [letter] = await read_topic(kafka_bootstrap, dead)
    assert dict(letter.headers)["error.message"] == (
        f"timestamp must be epoch milliseconds, an int of at least 0, not {-10_000}".encode()
    )


async def test_event_time_goes_on_through_two_processors(kafka_bootstrap: str, topic_name: TopicNamer) -> None:
    source, middle, sink = topic_name("in"), topic_name("middle"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 2)
    event_times = [BASE + 1000 * i for i in range(20)]
    await produce_timed(kafka_bootstrap, source, [(i % 2, None, {"at": at}) for i, at in enumerate(event_times)])
    app = {
        "app_id": topic_name("app"),
        "topics": {source: {"partitions": 2, "timestamp": {"field": "at"}}, middle: {"partitions": 2},
                   sink: {"partitions": 2, "key_serde": "str"}},
        "processors": [
            {"name": "first", "class": "tests.support.apps:Echo", "inputs": [source], "outputs": [middle],
             "params": {"output": middle}},
            {"name": "second", "class": "tests.support.event_time_apps:Stamp", "inputs": [middle],
             "outputs": [sink], "params": {"output": sink}},
        ],
    }  # fmt: skip
    for _ in range(3):  # a bounded run of the second processor reads what the first had sent when it started
        await asyncio.wait_for(Worker(parse_app(app), kafka_bootstrap, until_caught_up=True).run(), 60)
        if len(sent := await read_topic(kafka_bootstrap, sink)) == len(event_times):
            break

    # The second processor reads the event time as its input's Kafka timestamp, and passes it on.
    assert sorted((record.timestamp, msgpack.unpackb(record.value)["t"]) for record in sent) == [
        (at, at) for at in event_times
    ]
