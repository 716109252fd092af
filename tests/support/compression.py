"""Look at record batches as the broker stores them: which codec each one was compressed with."""

from __future__ import annotations

from dataclasses import dataclass

from aiokafka import TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.record.memory_records import MemoryRecords

# The codec ids in a record batch's attributes (KIP-98 record batch format).
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
CODEC_NAMES = {number: name for name, number in CODEC_IDS.items()}

FETCH_BYTES = 8 * 1024 * 1024
READ_UNCOMMITTED = 0


@dataclass(frozen=True)
class StoredBatch:
    partition: int
    base_offset: int
    records: int
    codec: str


async def stored_batches(bootstrap: str, topic: str) -> list[StoredBatch]:
    """Every data batch of every partition of `topic`, fetched raw (the consumer would decompress them)."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        cluster = await client.fetch_all_metadata()
        partitions = cluster.partitions_for_topic(topic)
        if not partitions:
            raise LookupError(f"topic {topic} has no partitions")
        batches: list[StoredBatch] = []
        for partition in sorted(partitions):
            leader = cluster.leader_for_partition(TopicPartition(topic, partition))
            batches.extend(await _partition_batches(client, leader, topic, partition))
        return batches
    finally:
        await client.close()


async def _partition_batches(client: AIOKafkaClient, leader: int, topic: str, partition: int) -> list[StoredBatch]:
    batches: list[StoredBatch] = []
    offset = 0
    while True:
        request = FetchRequest(
            max_wait_time=100, min_bytes=1, max_bytes=FETCH_BYTES, isolation_level=READ_UNCOMMITTED,
            topics=[(topic, [(partition, offset, FETCH_BYTES)])],
        )  # fmt: skip
        response = await client.send(leader, request)
        start, highwater = offset, offset
        for _topic, partition_responses in response.topics:
            for _partition, error_code, partition_highwater, *data in partition_responses:
                if error_code != 0:
                    raise RuntimeError(f"fetching {topic}-{partition} at {offset} failed with error {error_code}")
                highwater = partition_highwater
                records = MemoryRecords(data[-1])
                while (batch := records.next_batch()) is not None:
                    if batch.next_offset <= offset:
                        continue  # a fetch may begin with a batch already seen
                    if not batch.is_control_batch:
                        codec = CODEC_NAMES.get(batch.compression_type, f"unknown {batch.compression_type}")
                        batches.append(StoredBatch(partition, batch.base_offset, batch.last_offset_delta + 1, codec))
                    offset = batch.next_offset
        if offset >= highwater:
            return batches
        if offset == start:
            raise RuntimeError(f"no progress fetching {topic}-{partition} at {offset} (high watermark {highwater})")
