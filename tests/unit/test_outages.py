"""A broker outage told once: the Kafka client's repeated connection errors folded into the runtime's own
lines, an outage opened by the first and closed when none has come for a while; other messages untouched."""

from __future__ import annotations

import logging

import pytest

from runtime.kafka.outages import QUIET_S, REMIND_S, Outages


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def record(name: str, level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, message, None, None)


def test_an_outage_is_told_when_it_begins_reminded_and_told_when_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    outages = Outages(clock)
    caplog.set_level(logging.WARNING, logger="runtime.kafka")
    passed = []
    for second in range(70):  # seventy seconds of errors, twenty a second
        clock.now = 1_000.0 + second
        for _ in range(20):
            passed.append(
                outages.filter(record("aiokafka.client", logging.ERROR, 'Unable connect to "127.0.0.1:9092"'))
            )
        outages.tick()
    assert not any(passed) and outages.unreachable
    clock.now += QUIET_S
    outages.tick()
    told = [entry.getMessage() for entry in caplog.records]
    assert told[0].startswith('Kafka is unreachable: Unable connect to "127.0.0.1:9092"')
    assert told[1:-1] == [
        f"Kafka has been unreachable for {s:.0f} s ({s * 20 - 1 + 20:.0f} client messages not printed)"
        for s in (REMIND_S, 2 * REMIND_S)
    ]
    assert told[-1] == (
        "Kafka is reachable again, after 69 s unreachable (1399 client messages not printed: 1399 'Unable connect to')"
    )
    assert (outages.unreachable, outages.outages, outages.seconds) == (False, 1, 69.0)


def test_what_is_not_an_outage_passes_as_it_is() -> None:
    outages = Outages(Clock())
    assert outages.filter(record("aiokafka.consumer.fetcher", logging.ERROR, "Unexpected error in fetcher routine"))
    assert outages.filter(record("aiokafka.client", logging.WARNING, 'Unable connect to "x:1"'))  # not an error
    assert outages.filter(record("runtime.worker", logging.ERROR, "Unable connect to the database"))  # not the client
    assert not outages.unreachable


def test_the_outages_consequences_are_folded_while_it_lasts_and_told_by_kind(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    outages = Outages(clock)
    caplog.set_level(logging.WARNING, logger="runtime.kafka")
    coordinator = record(
        "aiokafka.consumer.group_coordinator", logging.WARNING, "Marking the coordinator dead (node 1)"
    )
    expired = record(
        "aiokafka.consumer.group_coordinator", logging.ERROR, "Heartbeat session expired - marking coordinator dead"
    )
    assert outages.filter(coordinator) and outages.filter(expired)  # no outage: said as it is
    assert not outages.filter(record("aiokafka.client", logging.ERROR, "Unable to update metadata from [1]"))
    assert not outages.filter(coordinator) and not outages.filter(expired)
    assert not outages.filter(record("aiokafka", logging.ERROR, "Failed fetch messages from 1: NodeNotReadyError"))
    assert outages.filter(record("aiokafka.producer", logging.ERROR, "Message too large"))  # not about the outage
    clock.now += QUIET_S
    outages.tick()
    assert caplog.records[-1].getMessage() == (
        "Kafka is reachable again, after 0 s unreachable (3 client messages not printed: "
        "2 the group coordinator marked dead, 1 'Failed fetch messages')"
    )
    assert outages.filter(coordinator)  # over: said again


def test_without_ticks_the_next_error_after_a_quiet_while_closes_the_outage_and_opens_another(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    outages = Outages(clock)
    caplog.set_level(logging.WARNING, logger="runtime.kafka")
    error = record("aiokafka.client", logging.ERROR, "Unable to update metadata from [1]")
    assert not outages.filter(error)
    clock.now += 2
    assert not outages.filter(error)
    clock.now += QUIET_S + 60  # back, then gone again a minute later: no tick in between
    assert not outages.filter(error)
    told = [entry.getMessage() for entry in caplog.records]
    assert [line.split(",")[0].split(":")[0] for line in told] == [
        "Kafka is unreachable",
        "Kafka is reachable again",
        "Kafka is unreachable",
    ]
    assert outages.outages == 2 and outages.seconds == 2.0


def test_an_outage_is_not_over_while_the_runtime_waits_to_try_again(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    outages = Outages(clock)
    caplog.set_level(logging.WARNING, logger="runtime.kafka")
    assert not outages.filter(record("aiokafka.client", logging.ERROR, 'Unable connect to "127.0.0.1:9092"'))
    outages.retrying_in(8.0)  # a start-up retry's backoff: no client errors meanwhile
    clock.now += 8.0 + QUIET_S - 1
    outages.tick()
    assert outages.unreachable
    clock.now += 1
    outages.tick()
    assert not outages.unreachable
