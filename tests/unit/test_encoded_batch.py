"""A batch the runtime encodes itself is the batch aiokafka's compiled builder writes for the same records."""

from __future__ import annotations

import asyncio
from collections import namedtuple
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.record.default_records import DefaultRecordBatch

from runtime.counters import Counters
from runtime.kafka.aiokafka_internals import BatchSettings
from runtime.kafka.encoded_batch import EncodedBatch, EncodedHeaders, encode_headers, varint
from runtime.kafka.outputs import Outputs
from runtime.testkit.clock import ManualClock
from runtime.testkit.topics import MemoryProducer, Topics

Records = list[tuple[int | None, bytes | None, bytes | None, list[tuple[str, bytes]]]]
RECORDS: Records = [
    (1_700_000_000_123, b"k1", b"v" * 300, [("error.stage", b"processing"), ("error.message", b"x" * 200)]),
    (1_700_000_000_100, None, b"value", []),  # earlier than the first: a negative delta
    (1_700_000_090_000, b"k3", None, [("h", b"")]),  # a delta past the varint table
    (1_700_000_000_124, b"", b"", [("\u00e9t\u00e9", b"\xff" * 20_000)]),  # a length past it
]


PRODUCER = (4321, 7, 99)  # an idempotent producer's id, epoch and first sequence


def aiokafka_batch(codec: int, transactional: bool, records: Records, producer: bool = True) -> bytes:
    builder = BatchBuilder(1_000_000, codec, is_transactional=transactional)
    for timestamp, key, value, headers in records:
        assert builder.append(timestamp=timestamp, key=key, value=value, headers=headers) is not None
    if producer:
        builder._set_producer_state(*PRODUCER)
    return bytes(builder._build())


def encoded_batch(
    codec: int, transactional: bool, records: Records, encoded: bool, producer: bool = True
) -> EncodedBatch:
    batch = EncodedBatch(BatchSettings(1_000_000, codec, transactional))
    for offset, (timestamp, key, value, headers) in enumerate(records):
        given = EncodedHeaders(encode_headers(headers)) if encoded else headers
        assert batch.append(offset, timestamp, key, value, given)
    batch._relative_offset = len(records)
    batch.close()
    if producer:
        batch._set_producer_state(*PRODUCER)
    return batch


@pytest.mark.parametrize("producer", [True, False], ids=["idempotent", "no producer id"])
@pytest.mark.parametrize("encoded", [True, False], ids=["encoded headers", "header lists"])
@pytest.mark.parametrize("transactional", [False, True])
def test_the_same_records_give_the_same_bytes_as_aiokafka_builds(
    encoded: bool, transactional: bool, producer: bool
) -> None:
    built = encoded_batch(0, transactional, RECORDS, encoded, producer)._build()
    assert built == aiokafka_batch(0, transactional, RECORDS, producer)


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_a_compressed_batch_reads_back_as_its_records(codec: int) -> None:
    built = encoded_batch(codec, False, RECORDS, encoded=True)._build()
    batch = DefaultRecordBatch(built)
    assert batch.compression_type == codec
    assert batch.validate_crc()
    read = [(record.timestamp, record.key, record.value, list(record.headers)) for record in batch]
    assert read == [(t, k, v, h) for t, k, v, h in RECORDS]


def test_the_batch_is_full_past_its_size_but_a_first_record_always_goes_in() -> None:
    batch = EncodedBatch(BatchSettings(200, 0, False))
    assert batch.append(0, 1, b"k", b"v" * 500, [])
    assert batch.append(1, 1, b"k", b"v", []) is None
    small = EncodedBatch(BatchSettings(200, 0, False))
    assert small.append(0, 1, b"k", b"v", [])
    assert small.append(1, 1, b"k", b"v", [])
    assert small.size() < 200


def test_a_batch_is_built_once_and_sized_as_built() -> None:
    batch = encoded_batch(3, False, RECORDS, encoded=True)
    built = batch._build()
    assert batch._build() is built
    assert batch.size() == len(built)
    assert batch.closed()


def test_encoded_headers_decode_to_the_list_they_were_encoded_from() -> None:
    headers = [("a", b"1"), ("\u00e9", b"\x00" * 10_000), ("empty", b"")]
    assert EncodedHeaders(encode_headers(headers)).decoded() == headers


@pytest.mark.parametrize("number", [0, 1, -1, 63, 64, -65, 8191, 8192, -8193, 2**31, -(2**40)])
def test_varints_are_zigzag_as_kafka_writes_them(number: int) -> None:
    zigzag = (number << 1) ^ (number >> 63)
    decoded, shift = 0, 0
    for byte in varint(number):
        decoded |= (byte & 0x7F) << shift
        shift += 7
    assert decoded == zigzag
    assert all(byte & 0x80 for byte in varint(number)[:-1])


class RecordingProducer(AIOKafkaProducer):  # type: ignore[misc]
    """aiokafka's producer, unstarted, that keeps the batches sent rather than sending them: `Outputs` builds
    its encoded batches with this producer's settings."""

    def __init__(self) -> None:
        super().__init__(bootstrap_servers="127.0.0.1:1", max_batch_size=1_000_000)
        self.batches: list[tuple[str, int, Any]] = []

    async def send_batch(self, batch: Any, topic: str, *, partition: int) -> asyncio.Future[Any]:
        self.batches.append((topic, partition, batch))
        acked: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        acked.set_result(Acked(0))
        return acked


Acked = namedtuple("Acked", "offset")


def sent_records(producer: RecordingProducer) -> list[tuple[str, int, bytes | None, list[tuple[str, bytes]]]]:
    records = []
    for topic, partition, batch in producer.batches:
        built = DefaultRecordBatch(bytes(batch._build()))
        assert built.validate_crc()
        records += [(topic, partition, record.value, list(record.headers)) for record in built]
    return records


DEAD = [("error.stage", b"processing"), ("error.message", b"boom")]


@pytest.mark.anyio
async def test_records_with_encoded_headers_go_out_in_order_among_the_others() -> None:
    producer = RecordingProducer()
    outputs = Outputs(producer, {"dlq": 1}, Counters())
    outputs.append("dlq", b"k", b"plain-1", [("h", b"1")], partition=0)  # a batch of aiokafka's is open
    outputs.append_encoded("dlq", b"k", b"dead-1", EncodedHeaders(encode_headers(DEAD)), None, "p")
    outputs.append("dlq", b"k", b"plain-2", partition=0)  # into the encoded batch
    outputs.append_encoded("dlq", b"k", b"dead-2", EncodedHeaders(encode_headers(DEAD)), None, "p")
    await outputs.wait_acked()
    assert [type(batch).__name__ for *_, batch in producer.batches] == ["BatchBuilder", "EncodedBatch"]
    assert [(value, headers) for *_, value, headers in sent_records(producer)] == [
        (b"plain-1", [("h", b"1")]),
        (b"dead-1", DEAD),
        (b"plain-2", []),
        (b"dead-2", DEAD),
    ]
    await producer.stop()


@pytest.mark.anyio
async def test_a_producer_not_aiokafkas_and_a_record_not_appended_encoded_are_given_the_headers_decoded() -> None:
    topics = Topics({"dlq": 1}, ManualClock(0))
    outputs = Outputs(MemoryProducer(topics, transactional=False), {"dlq": 1}, Counters())
    outputs.append_encoded("dlq", b"k", b"dead", EncodedHeaders(encode_headers(DEAD)), None, "p")
    outputs.append("dlq", b"k", b"sent again", EncodedHeaders(encode_headers(DEAD)), partition=0)
    await outputs.wait_acked()
    assert [(record.value, list(record.headers)) for record in topics.records("dlq")] == [
        (b"dead", DEAD),
        (b"sent again", DEAD),
    ]
