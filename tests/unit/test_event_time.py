"""Event time read from a field of the value or by a user function, and records whose event time
cannot be read going to the deserialization policy, without a broker."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from aiokafka import TopicPartition

from processors.context import Context
from processors.processor import Processor
from processors.record import Record
from runtime.config import ErrorPolicy
from runtime.task.event_time import TimestampError, extractor_reader, field_reader, stamping
from runtime.task.failures import RecordFailed
from runtime.telemetry import Telemetry
from tests.support.engine_fakes import (
    DEAD,
    IN,
    fake_outputs,
    make_services,
    make_task,
    raw,
    running,
    sent,
    telemetry_variant,
    until_idle,
    value,
)

pytestmark = pytest.mark.anyio

TP = TopicPartition(IN, 0)


def record(value: object, headers: tuple[tuple[str, bytes], ...] = ()) -> Record:
    return Record(IN, 0, 7, 1_000, "k", value, headers)


def from_header(record: Record) -> int:
    """An extractor: the `ts` header, as decimal text."""
    return int(record.header("ts") or b"")


def broken(record: Record) -> int:
    raise LookupError("no clock in this record")


def text_time(record: Record) -> object:
    return "yesterday"


@pytest.mark.parametrize(
    ("path", "found", "expected"),
    [
        ("at", {"at": 1_700_000_000_123}, 1_700_000_000_123),
        ("at", {"at": 1_700_000_000_123.9}, 1_700_000_000_123),  # a float is truncated
        ("at", {"at": 0}, 0),
        ("event.time", {"event": {"time": 42, "zone": "UTC"}}, 42),
    ],
)
def test_a_field_gives_epoch_milliseconds(path: str, found: object, expected: int) -> None:
    assert field_reader(path)(record(found)) == expected


@pytest.mark.parametrize(
    ("path", "found", "message"),
    [
        ("at", {"other": 1}, r"^field 'at' of the value is missing$"),
        ("event.time", {"event": {}}, r"^field 'event\.time' of the value is missing$"),
        ("event.time", {"event": 5}, r"field 'event\.time' of the value is missing: .* \(int\)"),
        ("at", None, r"field 'at' of the value is missing: the value holds no mapping there \(NoneType\)"),
        ("at", [1, 2], r"field 'at' of the value is missing: .* \(list\)"),
        ("at", {"at": True}, r"field 'at' of the value is bool True, not epoch milliseconds"),
        ("at", {"at": "1700000000000"}, r"field 'at' of the value is str '1700000000000', not epoch"),
        ("at", {"at": None}, r"field 'at' of the value is NoneType None"),
        ("at", {"at": float("nan")}, r"field 'at' of the value is nan, not epoch milliseconds"),
        ("at", {"at": float("inf")}, r"field 'at' of the value is inf"),
        ("at", {"at": -5}, r"field 'at' of the value is -5: a timestamp cannot be negative"),
    ],
)
def test_a_field_that_holds_no_timestamp_is_an_error_naming_it(path: str, found: object, message: str) -> None:
    with pytest.raises(TimestampError, match=message):
        field_reader(path)(record(found))


def test_an_extractor_is_given_the_decoded_record_and_its_result_is_checked() -> None:
    assert extractor_reader("tests.unit.test_event_time:from_header")(record({}, (("ts", b"1234"),))) == 1234
    with pytest.raises(LookupError, match="no clock"):
        extractor_reader("tests.unit.test_event_time:broken")(record({}))
    with pytest.raises(TimestampError, match=r"extractor tests\.unit\.test_event_time:text_time's result is str"):
        extractor_reader("tests.unit.test_event_time:text_time")(record({}))


def test_stamping_builds_the_record_with_its_event_time() -> None:
    build = stamping(field_reader("at"))

    built = build(IN, 2, 9, 1_000, "k", {"at": 55}, (("h", b"v"),))

    assert built == Record(IN, 2, 9, 55, "k", {"at": 55}, (("h", b"v"),))


@pytest.fixture(params=["off", "traced", "metrics"])
def telemetry(request: pytest.FixtureRequest) -> Iterator[Telemetry]:
    telemetry = telemetry_variant(request.param)
    yield telemetry
    telemetry.shutdown()


class Times(Processor):
    """Notes each record's offset and timestamp."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []

    def process(self, record: Record, ctx: Context) -> None:
        self.seen.append((record.offset, record.timestamp))


def mixed() -> list[object]:
    return [raw(0, value(0, at=500)), raw(1, value(1)), raw(2, value(2, at="late")), raw(3, value(3, at=400))]


@pytest.mark.parametrize("policy", [ErrorPolicy.SKIP, ErrorPolicy.DEAD_LETTER])
async def test_records_whose_field_is_missing_or_not_a_number_follow_the_deserialization_policy(
    telemetry: Telemetry, policy: ErrorPolicy
) -> None:
    processor = Times()
    services = make_services(telemetry, policy, timestamps={IN: field_reader("at")})
    task = make_task(processor, services)
    task.enqueue(TP, mixed())

    async with running(task):
        await until_idle(task)

    assert processor.seen == [(0, 500), (3, 400)]  # event time, not Kafka's (1000 + offset)
    assert task.next_offsets == {TP: 4}
    counters = services.counters
    if policy is ErrorPolicy.SKIP:
        assert (counters.skipped, counters.dead_lettered) == (2, 0)
    else:
        assert (counters.skipped, counters.dead_lettered) == (0, 2)
        assert sent(fake_outputs(task), DEAD) == [value(1), value(2, at="late")]


async def test_a_record_whose_field_is_missing_stops_the_task_under_fail_naming_the_field(telemetry: Telemetry) -> None:
    processor = Times()
    task = make_task(processor, make_services(telemetry, ErrorPolicy.FAIL, timestamps={IN: field_reader("at")}))
    task.enqueue(TP, mixed())

    with pytest.raises(
        RecordFailed,
        match=r"deserialization failed in processor 'p' for record in\[0\]@1: TimestampError: field 'at' of the value "
        r"is missing",
    ):
        await task.run()

    assert processor.seen == [(0, 500)]
    assert task.next_offsets == {TP: 1}


async def test_an_extractor_that_raises_sends_its_record_to_the_deserialization_policy() -> None:
    processor = Times()
    extractor = extractor_reader("tests.unit.test_event_time:from_header")
    services = make_services(policy=ErrorPolicy.DEAD_LETTER, timestamps={IN: extractor})
    task = make_task(processor, services)
    task.enqueue(TP, [raw(0, value(0)), dataclasses.replace(raw(1, value(1)), headers=[("ts", b"77")])])

    async with running(task):
        await until_idle(task)

    assert processor.seen == [(1, 77)]
    assert services.counters.dead_lettered == 1
