"""The test kit's driver: records per second through it, and the time to build one from an app's YAML.

`python -m bench.testkit [--records 200000] [--keys 10000] [--runs 5]`

No broker: the driver is what a user's pytest suite runs. Each run pipes `--records` records (the
benchmark data: str keys, msgpack values of about 100 bytes) into the stateless app (`Transform`) and
the stateful one (`CountPerKey`, a RocksDB store with its changelog), 6 partitions, in one
`pipe_bytes_all` call, through the runtime's tasks, output path, store and commit; and, to see what a
test that pipes one record per call costs, `--single` records one `pipe` at a time (each call ends with
a commit). The baseline, measured in the same run: the same processor's `process` called directly
with a hand-written context that only keeps what is sent, what a test without the kit would do.
Build time: `AppDriver.from_yaml` of each example app, median of `--runs` builds, with `close` apart.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgpack

from bench.data import make_key, make_value
from bench.processors import CountPerKey, Transform
from bench.stats import median, run_directory, write_result
from processors import Context, Processor, Record
from processors.stores import ReadOnlyStore, SessionStore, WindowStore
from runtime.testkit import AppDriver
from stores import BufferedKeyValueStore, open_backend
from stores.serdes import resolve_serde

EXAMPLES = sorted(Path("examples").glob("*/app.yaml"))
APPS = {"stateless": "bench.processors:Transform", "stateful": "bench.processors:CountPerKey"}


def app(processor: str, partitions: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": "p", "class": processor, "inputs": ["in"], "outputs": ["out"],
                            "params": {"output": "out"}}  # fmt: skip
    if processor.endswith("CountPerKey"):
        spec["stores"] = {"counts": {"backend": "rocksdb", "changelog": True}}
    topic = {"partitions": partitions, "key_serde": "str", "value_serde": "msgpack"}
    return {"app_id": "bench", "topics": {"in": topic, "out": topic}, "processors": [spec]}


class KeepingContext(Context):
    """The hand-written context of a test without the kit: sends are kept, the store is a dict-backed one."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any, Any]] = []
        self._store = BufferedKeyValueStore(open_backend("memory"), resolve_serde("msgpack"), resolve_serde("msgpack"))

    app_id = processor_name = "bench"
    partition = 0
    params: Mapping[str, Any] = {"output": "out"}
    stream_time = -1

    def send(self, topic: str, value: Any, key: Any = None, headers: Sequence[tuple[str, bytes]] | None = None,
             timestamp: int | None = None) -> None:  # fmt: skip
        self.sent.append((topic, key, value))

    def store(self, name: str) -> BufferedKeyValueStore:
        return self._store

    def window_store(self, name: str) -> WindowStore:
        raise NotImplementedError

    def session_store(self, name: str) -> SessionStore:
        raise NotImplementedError

    def global_store(self, name: str) -> ReadOnlyStore:
        raise NotImplementedError

    def schedule(self, every_ms: int, callback: Any, time: Any = "wall_clock") -> None:
        raise NotImplementedError

    def count(self, name: str, amount: int = 1) -> None:
        return None


def inputs(records: int, keys: int) -> list[tuple[bytes, bytes, int | None]]:
    return [(make_key(i, keys).encode(), msgpack.packb(make_value(i, keys)), None) for i in range(records)]


def through_driver(processor: str, data: list[tuple[bytes, bytes, int | None]], partitions: int) -> float:
    with tempfile.TemporaryDirectory() as state, AppDriver(app(processor, partitions), state_dir=Path(state)) as kit:
        started = time.perf_counter()
        kit.pipe_bytes_all("in", data)
        elapsed = time.perf_counter() - started
        assert kit.counters.processed == len(data), kit.counters
    return len(data) / elapsed


def one_per_call(processor: str, data: list[tuple[bytes, bytes, int | None]], partitions: int) -> float:
    with tempfile.TemporaryDirectory() as state, AppDriver(app(processor, partitions), state_dir=Path(state)) as kit:
        started = time.perf_counter()
        for key, value, _ in data:
            kit.pipe_bytes("in", value, key)
        elapsed = time.perf_counter() - started
    return len(data) / elapsed


def direct(processor_class: type[Processor], data: list[tuple[bytes, bytes, int | None]]) -> float:
    """The baseline: `process` called on decoded records with a hand-written context."""
    processor, ctx = processor_class(), KeepingContext()
    started = time.perf_counter()
    processor.init(ctx)
    decode_value = resolve_serde("msgpack").deserialize
    for offset, (key, value, _) in enumerate(data):
        processor.process(Record("in", 0, offset, 0, key.decode(), decode_value(value)), ctx)
    return len(data) / (time.perf_counter() - started)


def build_ms(path: Path, runs: int) -> float:
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as state:
            started = time.perf_counter()
            driver = AppDriver.from_yaml(path, state_dir=Path(state))
            times.append((time.perf_counter() - started) * 1000)
            driver.close()
    return median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.testkit", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--single", type=int, default=20_000, help="records piped one call each")
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    data = inputs(args.records, args.keys)
    classes: dict[str, type[Processor]] = {"stateless": Transform, "stateful": CountPerKey}
    result: dict[str, Any] = {"records": args.records, "runs": args.runs, "rates": {}, "build_ms": {}}
    for name, processor in APPS.items():
        rates: dict[str, list[float]] = {"driver": [], "one_per_call": [], "direct": []}
        for _ in range(args.runs):
            rates["driver"].append(through_driver(processor, data, args.partitions))
            rates["one_per_call"].append(one_per_call(processor, data[: args.single], args.partitions))
            rates["direct"].append(direct(classes[name], data))
        medians = {kind: median(values) for kind, values in rates.items()}
        result["rates"][name] = {**medians, "runs": rates, "driver_vs_direct": medians["driver"] / medians["direct"]}
        print(f"{name:9}: {medians['driver']:>9,.0f} rec/s through the driver, {medians['one_per_call']:>7,.0f} "
              f"one per call; direct calls {medians['direct']:>9,.0f} rec/s "
              f"(driver {medians['driver'] / medians['direct']:.2f}x)")  # fmt: skip
    for example in EXAMPLES:
        result["build_ms"][str(example)] = build_ms(example, args.runs)
        print(f"build from {example}: {result['build_ms'][str(example)]:.1f} ms (median of {args.runs})")
    written = write_result(run_directory("testkit"), "result.json", result)
    print(f"figures in {written}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
