"""Record batches no Kafka client would build (header keys that are not UTF-8), and appending one to a partition."""

from __future__ import annotations

import asyncio
import struct
import time

from aiokafka import TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import for_code
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.record.default_records import _DefaultRecordBatchBuilderPy

RawHeaders = list[tuple[bytes, bytes]]
ACKS_ALL = -1
TIMEOUT_MS = 30_000
ATTEMPTS = 100


class _EncodedKey(str):
    """A header key that encodes to the given bytes: aiokafka's pure-Python builder encodes keys itself."""

    raw: bytes

    def __new__(cls, raw: bytes) -> _EncodedKey:
        key = super().__new__(cls, raw.decode("latin-1"))
        key.raw = raw
        return key

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return self.raw


def record_batch(
    records: list[tuple[bytes | None, bytes | None, RawHeaders]], base_offset: int = 0, compression: int = 0
) -> bytes:
    """One v2 batch; `compression` is a codec id (1 gzip)."""
    timestamp_ms = int(time.time() * 1000)
    builder = _DefaultRecordBatchBuilderPy(
        magic=2, compression_type=compression, is_transactional=0, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=1 << 20,
    )  # fmt: skip
    for offset, (key, value, headers) in enumerate(records):
        encoded: list[tuple[str, bytes | None]] = [(_EncodedKey(k), v) for k, v in headers]
        builder.append(offset, timestamp_ms, key, value, encoded)
    batch = builder.build()
    struct.pack_into(">q", batch, 0, base_offset)  # the broker assigns it; the checksum leaves it out
    return bytes(batch)


async def produce_raw(
    bootstrap: str, topic: str, partition: int, records: list[tuple[bytes | None, bytes | None, RawHeaders]]
) -> None:
    """Appends `records` to the partition as one batch, header keys exactly as given."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        batch = record_batch(records)
        for _attempt in range(ATTEMPTS):  # a topic created a moment ago may have no leader yet
            cluster = await client.fetch_all_metadata()
            leader = cluster.leader_for_partition(TopicPartition(topic, partition))
            if leader is not None and leader >= 0:
                request = ProduceRequest(None, ACKS_ALL, TIMEOUT_MS, [(topic, [(partition, batch)])])
                response = await client.send(leader, request)
                [error_code] = [code for _topic, parts in response.topics for _partition, code, *_ in parts]
                if error_code == 0:
                    return
                error = for_code(error_code)
                if not error.retriable:
                    raise error(f"producing a raw batch to {topic}[{partition}]")
            await asyncio.sleep(0.1)
        raise TimeoutError(f"no leader took a raw batch for {topic}[{partition}]")
    finally:
        await client.close()
