"""Avro (with a schema registry) against JSON: what decoding a record's value and encoding its output
costs a task, per record, on the benchmarks' data, in the same run.

`python -m bench.registry_serdes [--records 200000] [--runs 5] [--registry URL]`

The serdes are the runtime's own, built from an app YAML as a worker builds them (`topic_serdes`): the
Avro serde reads the schema id of each record, finds the schema in its cache (the registry is asked
once) and resolves nothing (the app reads with the schema the records were written with). The loop is
a task's serde path around the stateless benchmark's processor: decode the value, add a field, encode
the output. Without `--registry` an Apicurio Registry is started for the run (tests/support, Java and
Maven needed). The broker is not involved: it moves the bytes alike for both.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from bench.data import make_value
from bench.stats import median, run_directory, write_result
from processors.serdes import Serde
from runtime.config import load_app
from runtime.kafka.topic_serdes import topic_serdes
from tests.support.schema_registry import LocalRegistry

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
    parser.add_argument("--runs", type=int, default=5)
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


def serdes(directory: Path, url: str, value_serde: str) -> tuple[Serde, Serde]:
    """The input's and the output's value serdes of an app whose topics use `value_serde`."""
    schemas = {"in": VALUE_SCHEMA, "out": OUTPUT_SCHEMA}
    topics: dict[str, Any] = {}
    for topic, schema in schemas.items():
        name = f"bench-{value_serde}-{topic}-{time.time_ns()}"
        topics[name] = {"key_serde": "str", "value_serde": value_serde}
        if value_serde == "avro":
            path = directory / f"{name}.avsc"
            path.write_text(json.dumps(schema))
            topics[name]["value_schema"] = str(path)
    app = {
        "app_id": f"bench-{value_serde}",
        "schema_registry": {"url": url},
        "topics": topics,
        "processors": [{"name": "p", "class": "bench.processors:Transform", "inputs": [next(iter(topics))]}],
    }
    path = directory / f"{value_serde}.yaml"
    path.write_text(yaml.safe_dump(app))
    built = topic_serdes(load_app(path))
    source, sink = (built[name][1] for name in topics)
    return source, sink


def rate(decode: Callable[[bytes], Any], encode: Callable[[Any], bytes], inputs: list[bytes]) -> float:
    """Records per second through decode, the processor's change, encode."""
    started = time.perf_counter()
    for data in inputs:
        value = decode(data)
        encode({**value, "seen": True})
    return len(inputs) / (time.perf_counter() - started)


def main() -> None:
    args = parse_args()
    directory = run_directory("registry_serdes")
    values = [make_value(index) for index in range(args.records)]
    with tempfile.TemporaryDirectory() as scratch, registry(args.registry, Path(scratch)) as url:
        chosen = {serde: serdes(Path(scratch), url, serde) for serde in ("json", "avro")}
        inputs = {serde: [source.serialize(value) for value in values] for serde, (source, _) in chosen.items()}
        rates: dict[str, list[float]] = {serde: [] for serde in chosen}
        for _ in range(args.runs):
            for serde, (source, sink) in chosen.items():  # alternated, so both see the same machine
                rates[serde].append(rate(source.deserialize, sink.serialize, inputs[serde]))
    medians = {serde: median(found) for serde, found in rates.items()}
    sizes = {serde: sum(map(len, data)) / len(data) for serde, data in inputs.items()}
    cost = {serde: 1e6 / medians[serde] for serde in medians}
    for serde in chosen:
        print(f"{serde:>5}: {medians[serde]:>10,.0f} records/s  ({cost[serde]:.2f} µs a record, input value "
              f"{sizes[serde]:.0f} bytes)")  # fmt: skip
    print(f"Avro costs {cost['avro'] / cost['json']:.2f}x what JSON does per record (medians of {args.runs})")
    write_result(directory, "registry_serdes", {
        "records": args.records, "runs": args.runs, "rates": rates, "medians": medians,
        "microseconds_per_record": cost, "value_bytes": sizes, "avro_over_json": cost["avro"] / cost["json"],
    })  # fmt: skip


if __name__ == "__main__":
    main()
