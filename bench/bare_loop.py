"""The baseline: the same job as the runtime's `Transform` app, written as one bare aiokafka loop.

`python -m bench.bare_loop --bootstrap HOST:PORT --input T --output T --group G [--serde msgpack|json]`

getmany() -> decode each value (msgpack, or JSON with orjson, which the runtime's `json` serde writes with) -> add a
field -> encode -> one batch per output
partition via create_batch()/send_batch() (Kafka's murmur2 partitioner, the runtime's own
`partition_for`) -> wait for the acks -> commit, until it has read everything the input held at
start-up. It prints one JSON line: records read and the seconds spent in the loop (start-up and
shutdown excluded).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import msgpack
import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.data import BATCH_BYTES, BatchProducer

MAX_RECORDS = 50_000
DESCRIPTION = "The throughput baseline: one bare aiokafka consume-transform-produce loop."
# Each serde's decode and encode of a value.
CODECS: dict[str, tuple[Callable[[bytes], Any], Callable[[Any], bytes]]] = {
    "msgpack": (msgpack.unpackb, msgpack.Packer().pack),
    "json": (orjson.loads, orjson.dumps),
}


async def run(
    bootstrap: str, input_topic: str, output_topic: str, group: str, batch_bytes: int, serde: str = "msgpack"
) -> dict[str, Any]:
    consumer = AIOKafkaConsumer(
        input_topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    # The runtime's producer settings: acks=all, idempotent, 512 KiB batches.
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        max_batch_size=batch_bytes,
        max_request_size=4 * batch_bytes,
    )
    await asyncio.gather(consumer.start(), producer.start())
    try:
        partitions = sorted(await producer.partitions_for(input_topic))
        ends = await consumer.end_offsets([TopicPartition(input_topic, p) for p in partitions])
        total = sum(ends.values())
        output_partitions = len(await producer.partitions_for(output_topic))
        out = BatchProducer(producer, output_topic, output_partitions)
        decode, encode = CODECS[serde]
        seen = 0
        first: float | None = None
        while seen < total:
            batches = await consumer.getmany(timeout_ms=500, max_records=MAX_RECORDS)
            if not batches:
                continue
            if first is None:
                first = time.perf_counter()
            for records in batches.values():
                for record in records:
                    value = decode(record.value)
                    value["seen"] = True
                    key = record.key.decode()
                    await out.append(key.encode(), encode(value))
                seen += len(records)
            await out.flush()
            await consumer.commit()
        finished = time.perf_counter()
    finally:
        await asyncio.gather(consumer.stop(), producer.stop())
    loop_seconds = finished - first if first is not None else 0.0
    return {"records": seen, "loop_seconds": loop_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bare_loop", description=DESCRIPTION)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--batch-bytes", type=int, default=BATCH_BYTES)
    parser.add_argument("--serde", choices=sorted(CODECS), default="msgpack", help="the values' encoding")
    args = parser.parse_args()
    result = asyncio.run(run(args.bootstrap, args.input, args.output, args.group, args.batch_bytes, args.serde))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
