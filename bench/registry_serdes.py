"""Avro (with a schema registry) against JSON, on the same data in the same run: what a record costs
through the runtime, and what its serdes alone cost.

`python -m bench.registry_serdes [--records 200000] [--runs 3] [--partitions 3] [--bootstrap H:P] [--registry URL]`

Through the runtime: the stateless benchmark app (`Transform`: decode the value, add a field, encode
the output) runs as `python -m runtime app.yaml --until-caught-up` over an input topic of JSON values
and over one of the same values in Avro, alternately, each run with a fresh group and output topic.
The figure is records per CPU second of the runtime's process (start-up included), which other load
on the machine barely moves. The serdes alone: the same decode, field and encode in a loop over the
same values with the serdes a worker builds (`topic_serdes`), the Avro one finding each record's
schema in its cache. Without `--registry` an Apicurio Registry is started for the run (tests/support;
Java and Maven), without `--bootstrap` a broker.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml
from aiokafka import AIOKafkaProducer

from bench.app import RuntimeProcess
from bench.broker import create_topics, kafka, topic_size
from bench.data import BATCH_BYTES, BatchProducer, make_key, make_value
from bench.stats import median, run_directory, write_result
from processors.serdes import Serde
from runtime.config import load_app
from runtime.kafka.topic_serdes import topic_serdes
from stores.partitioner import partition_for
from tests.support.schema_registry import LocalRegistry

SERDES = ("json", "avro")
VALUE_SCHEMA = {
    "type": "record", "name": "Payment", "namespace": "bench",
    "fields": [
        {"name": "id", "type": "long"}, {"name": "user", "type": "string"}, {"name": "amount", "type": "double"},
        {"name": "currency", "type": "string"}, {"name": "ts", "type": "long"}, {"name": "note", "type": "string"},
    ],
}  # fmt: skip
OUTPUT_SCHEMA = {**VALUE_SCHEMA, "name": "SeenPayment", "fields": [*VALUE_SCHEMA["fields"],
                                                                   {"name": "seen", "type": "boolean"}]}  # fmt: skip


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.registry_serdes", description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--bootstrap", help="an existing broker (default: start one)")
    parser.add_argument("--registry", help="a registry's Confluent-compatible API (default: start one)")
    return parser.parse_args()


@contextlib.contextmanager
def registry(url: str | None, directory: Path) -> Iterator[str]:
    if url is not None:
        yield url
        return
    local = LocalRegistry(log_file=directory / "registry.log")
    local.start()
    try:
        yield local.url
    finally:
        local.stop()


def app_yaml(directory: Path, serde: str, bootstrap: str, url: str, source: str, partitions: int) -> Path:
    """The Transform app from `source` to a fresh output topic, both of `serde` values."""
    sink = f"{source}-out-{uuid.uuid4().hex[:6]}"
    topics: dict[str, Any] = {}
    for topic, schema in ((source, VALUE_SCHEMA), (sink, OUTPUT_SCHEMA)):
        topics[topic] = {"partitions": partitions, "key_serde": "str", "value_serde": serde}
        if serde == "avro":
            path = directory / f"{topic}.avsc"
            path.write_text(json.dumps(schema))
            topics[topic]["value_schema"] = str(path)
    app = {
        "app_id": f"{sink}-app",
        "kafka": {"bootstrap_servers": bootstrap},
        "schema_registry": {"url": url},
        "topics": topics,
        "processors": [{"name": "transform", "class": "bench.processors:Transform", "inputs": [source],
                        "outputs": [sink], "params": {"output": sink}}],
        "state_dir": str(directory / "state"),
    }  # fmt: skip
    path = directory / f"{sink}.yaml"
    path.write_text(yaml.safe_dump(app, sort_keys=False))
    return path


def value_serdes(path: Path) -> tuple[Serde, Serde]:
    """The input's and the output's value serdes, as a worker of the app builds them."""
    built = list(topic_serdes(load_app(path)).values())
    return built[0][1], built[1][1]


async def fill(bootstrap: str, topic: str, values: list[bytes], partitions: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", max_batch_size=BATCH_BYTES)
    await producer.start()
    try:
        out = BatchProducer(producer, topic, partitions)
        for index, value in enumerate(values):
            key = make_key(index).encode()
            await out.append(key, value, partition_for(key, partitions))
        await out.flush()
    finally:
        await producer.stop()


def serde_rate(decode: Callable[[bytes], Any], encode: Callable[[Any], bytes], inputs: list[bytes]) -> float:
    """Records per second through decode, the processor's change, encode."""
    started = time.perf_counter()
    for data in inputs:
        encode({**decode(data), "seen": True})
    return len(inputs) / (time.perf_counter() - started)


def runtime_rate(path: Path, records: int, bootstrap: str) -> float:
    """Records per CPU second of one `--until-caught-up` run of the app."""
    process = RuntimeProcess(path, "--until-caught-up")
    code = process.wait(600)
    if code != 0 or process.cpu_seconds is None:
        raise RuntimeError(f"the runtime exited {code}:\n{process.log_tail()}")
    sink = next(iter(yaml.safe_load(path.read_text())["processors"]))["outputs"][0]
    produced = asyncio.run(topic_size(bootstrap, sink))
    if produced != records:
        raise RuntimeError(f"{produced} outputs for {records} records:\n{process.log_tail()}")
    return records / process.cpu_seconds


def main() -> None:
    args = parse_args()
    directory = run_directory("registry_serdes")
    values = [make_value(index) for index in range(args.records)]
    rates: dict[str, dict[str, list[float]]] = {"runtime": {s: [] for s in SERDES}, "serdes": {s: [] for s in SERDES}}
    sizes: dict[str, float] = {}
    with kafka(args.bootstrap) as bootstrap, registry(args.registry, directory) as url:
        sources = {serde: f"bench-{serde}-{uuid.uuid4().hex[:6]}" for serde in SERDES}
        asyncio.run(create_topics(bootstrap, {topic: args.partitions for topic in sources.values()}))
        encoded: dict[str, list[bytes]] = {}
        for serde, source in sources.items():
            decode_serde, encode_serde = value_serdes(app_yaml(directory, serde, bootstrap, url, source, 1))
            encoded[serde] = [decode_serde.serialize(value) for value in values]
            sizes[serde] = sum(map(len, encoded[serde])) / args.records
            asyncio.run(fill(bootstrap, source, encoded[serde], args.partitions))
            rates["serdes"][serde].append(serde_rate(decode_serde.deserialize, encode_serde.serialize, encoded[serde]))
        for run in range(args.runs):
            for serde, source in sources.items():  # alternated, so both see the same machine
                path = app_yaml(directory, serde, bootstrap, url, source, args.partitions)
                rates["runtime"][serde].append(runtime_rate(path, args.records, bootstrap))
                if run:
                    serdes_of = value_serdes(path)
                    rates["serdes"][serde].append(serde_rate(serdes_of[0].deserialize, serdes_of[1].serialize,
                                                             encoded[serde]))  # fmt: skip
    medians = {kind: {serde: median(found) for serde, found in by_serde.items()} for kind, by_serde in rates.items()}
    ratios = {kind: found["json"] / found["avro"] for kind, found in medians.items()}
    for kind, what in (
        ("runtime", "records per CPU second through the runtime"),
        ("serdes", "records/s, serdes alone"),
    ):
        print(f"{what}: json {medians[kind]['json']:,.0f}, avro {medians[kind]['avro']:,.0f}: "
              f"Avro costs {ratios[kind]:.2f}x what JSON does")  # fmt: skip
    print(f"values: json {sizes['json']:.0f} bytes, avro {sizes['avro']:.0f} bytes (5 of them the wire format's)")
    write_result(directory, "registry_serdes", {
        "records": args.records, "runs": args.runs, "partitions": args.partitions, "rates": rates,
        "medians": medians, "avro_cost_over_json": ratios, "value_bytes": sizes,
    })  # fmt: skip


if __name__ == "__main__":
    main()
