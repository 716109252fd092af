"""Global stores: how long a worker takes to read a reference table of `--rows` rows before it may process.

`python -m bench.global_stores [--rows 50000 1000000] [--runs 5] [--new-rows 1000] [--bootstrap HOST:PORT]`
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from aiokafka import AIOKafkaProducer

from bench.app import REPO_ROOT, AppSpec, DiskUsage, RuntimeProcess, disk_usage
from bench.broker import create_topics, kafka
from bench.data import BATCH_BYTES, BatchProducer
from bench.stateful import MB
from bench.stats import hotspots, median, run_directory, write_result
from bench.throughput import timeout_for
from examples.acquirers.terminals import table_row

STORE = "terminals"
VARIANTS = {"updater": "examples.acquirers.terminals:ActiveTerminals", "mirror": None}  # None: the default mirror
TARGET_SECONDS = {50_000: 0.5, 1_000_000: 5.0}
INACTIVE_EVERY = 20  # one row in 20 is deactivated: the updater deletes it, the mirror keeps it
READY = re.compile(r"global stores \[.*\] ready: (\d+) records read in ([0-9.]+)s")


@dataclass(frozen=True)
class Case:
    """One way of reading the table: its variant (updater or mirror), backend, and whether the store is kept."""

    rows: int
    variant: str
    backend: str
    restart: bool = False

    @property
    def label(self) -> str:
        kind = "restart" if self.restart else "bootstrap"
        return f"{kind} {self.rows:,} rows, {self.variant}, {self.backend}"


@dataclass(frozen=True)
class ReadyRun:
    records: int  # as the runtime logged them
    bootstrap_seconds: float  # as the runtime logged it: store opened to the last partition read
    ready_seconds: float  # process start -> the "ready" log line (interpreter, imports, topics included)
    wall_seconds: float  # process start -> exit
    peak_rss: int
    store: DiskUsage | None  # the RocksDB store after the process exited


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.global_stores", description=__doc__)
    parser.add_argument("--rows", type=int, nargs="+", default=[50_000, 1_000_000], help="table sizes to read")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=3, help="partitions of the table topic")
    parser.add_argument("--new-rows", type=int, default=1_000, help="rows added before each restart run")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--backends", nargs="+", default=["memory", "rocksdb"], choices=["memory", "rocksdb"])
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    parser.add_argument(
        "--profile", action="store_true", help="run the runtime under cProfile (slower); writes <app_id>.prof"
    )
    return parser.parse_args()


@dataclass
class Table:
    """The table topic and how many rows were produced into it: row ids 0..rows-1, one terminal each."""

    bootstrap: str
    topic: str
    partitions: int
    rows: int = 0

    def add(self, count: int) -> float:
        """Produce `count` new rows; returns rows / second."""
        rate = asyncio.run(produce_rows(self.bootstrap, self.topic, self.rows, count))
        self.rows += count
        return rate


async def produce_rows(bootstrap: str, topic: str, first: int, count: int) -> float:
    """Rows `first`..`first + count - 1` of terminal_acquirer as the connector writes them, in full batches."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", max_batch_size=BATCH_BYTES, max_request_size=4 * BATCH_BYTES
    )
    await producer.start()
    started = time.perf_counter()
    try:
        out = BatchProducer(producer, topic, len(await producer.partitions_for(topic)))
        for n in range(first, first + count):
            acquirer = ("ACQ-NORTH", "ACQ-SOUTH")[n % 2]
            key, value = table_row(n, f"T{n:08d}", acquirer, n % INACTIVE_EVERY != 0, 1_767_225_600_000 + n)
            await out.append(key, value)
            if n % 100_000 == 99_999:
                await out.flush()
        await out.flush()
    finally:
        await producer.stop()
    return count / (time.perf_counter() - started)


def write_app(spec: AppSpec, workdir: Path, table: Table, case: Case) -> Path:
    """The bench app (an empty input, a Transform) plus the global store over `table`."""
    app = spec.to_yaml()
    app["topics"][table.topic] = {"partitions": table.partitions, "key_serde": "str", "value_serde": "json"}
    store: dict[str, Any] = {"topic": table.topic, "backend": case.backend, "key_serde": "str", "value_serde": "json"}
    if (updater := VARIANTS[case.variant]) is not None:
        store["updater"] = updater
    app["global_stores"] = {STORE: store}
    path = workdir / f"{spec.app_id}{'-restart' if case.restart else ''}.yaml"  # its own log and profile
    path.write_text(yaml.safe_dump(app, sort_keys=False))
    return path


def run_once(app_yaml: Path, store_dir: Path, expected: int | None, profile: bool) -> ReadyRun:
    """Run the app with `--until-caught-up` (its input is empty: it exits once the stores are ready);
    warn unless it read `expected` records (None: any number)."""
    started_at = datetime.now()
    process = RuntimeProcess(app_yaml, "--until-caught-up", profile=profile)
    code = process.wait_sampling_rss(timeout_for(expected or 0))
    if code != 0:
        raise RuntimeError(f"the runtime exited with {code}; log {process.log_path}:\n{process.log_tail()}")
    if process.profile_path is not None:
        print(f"profile {process.profile_path.relative_to(REPO_ROOT)}, by own time:\n{hotspots(process.profile_path)}")
    found = [(when, READY.search(line)) for when, line in process.timed_lines()]
    ready = [(when, match) for when, match in found if match is not None]
    if not ready:
        raise RuntimeError(f"no 'global stores ... ready' line in {process.log_path}:\n{process.log_tail()}")
    when, match = ready[0]
    records = int(match.group(1))
    if expected is not None and records != expected:
        print(f"  WARNING: the runtime read {records:,} records, expected {expected:,}; log {process.log_path}")
    store = disk_usage(store_dir) if store_dir.exists() else None
    ready_seconds = (when - started_at).total_seconds()
    return ReadyRun(records, float(match.group(2)), ready_seconds, process.wall_seconds, process.peak_rss, store)


def describe(run: ReadyRun) -> str:
    store = f", store {run.store.allocated_bytes / MB:.1f} MB on disk" if run.store is not None else ""
    rate = run.records / run.bootstrap_seconds if run.bootstrap_seconds > 0 else 0.0
    return (
        f"{run.records:,} records in {run.bootstrap_seconds * 1000:,.0f} ms ({rate:,.0f} rec/s); "
        f"ready {run.ready_seconds:.2f} s after process start, exit after {run.wall_seconds:.2f} s; "
        f"peak RSS {run.peak_rss / MB:.0f} MB{store}"
    )


def summarize(case: Case, runs: list[ReadyRun]) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "records": median([r.records for r in runs]),
        "bootstrap_seconds": median([r.bootstrap_seconds for r in runs]),
        "ready_seconds": median([r.ready_seconds for r in runs]),
        "wall_seconds": median([r.wall_seconds for r in runs]),
        "peak_rss": median([r.peak_rss for r in runs]),
    }
    stores = [r.store for r in runs if r.store is not None]
    if stores:
        summary["store_allocated_bytes"] = median([s.allocated_bytes for s in stores])
        summary["store_file_bytes"] = median([s.file_bytes for s in stores])
    target = TARGET_SECONDS.get(case.rows)
    verdict = ""
    if target is not None and not case.restart:
        verdict = f"; {'meets' if summary['bootstrap_seconds'] < target else 'misses'} the {target:g} s target"
    store = ""
    if stores:
        store = f", store {summary['store_allocated_bytes'] / MB:.1f} MB on disk"
    print(
        f"  median of {len(runs)}: {summary['records']:,.0f} records in {summary['bootstrap_seconds'] * 1000:,.0f} ms"
        f"{verdict}; ready {summary['ready_seconds']:.2f} s after start, peak RSS {summary['peak_rss'] / MB:.0f} MB"
        f"{store}"
    )
    return summary


def measure(case: Case, spec: AppSpec, workdir: Path, table: Table, args: argparse.Namespace) -> dict[str, Any]:
    """`--runs` runs of `case`: from an empty store each time, or (restart) from the kept one after new rows."""
    app_yaml = write_app(spec, workdir, table, case)
    app_state = Path(spec.extra["state_dir"]) / spec.app_id
    store_dir = app_state / "global" / STORE
    print(f"{case.label} ({spec.app_id}):")
    if case.restart:
        run_once(app_yaml, store_dir, None, False)  # untimed: brings the kept store to the table's end
    runs: list[ReadyRun] = []
    for number in range(1, args.runs + 1):
        if case.restart:
            table.add(args.new_rows)
        else:
            shutil.rmtree(app_state, ignore_errors=True)
        run = run_once(app_yaml, store_dir, args.new_rows if case.restart else table.rows, args.profile)
        runs.append(run)
        print(f"  run {number}/{args.runs}: {describe(run)}")
    return {**asdict(case), "runs": [asdict(r) for r in runs], "median": summarize(case, runs)}


def main() -> None:
    args = parse_args()
    workdir = run_directory("global-stores")
    state_dir = workdir / "state"
    suffix = uuid.uuid4().hex[:8]
    input_topic, output_topic = f"bench-global-in-{suffix}", f"bench-global-out-{suffix}"
    results: list[dict[str, Any]] = []
    fill_rates: dict[int, float] = {}
    with kafka(args.bootstrap) as bootstrap:
        asyncio.run(create_topics(bootstrap, {input_topic: 1, output_topic: 1}))
        for rows in args.rows:
            table = Table(bootstrap, f"bench-global-table-{rows}-{suffix}", args.partitions)
            asyncio.run(create_topics(bootstrap, {table.topic: args.partitions}))
            print(f"filling {table.topic} ({args.partitions} partitions) with {rows:,} rows ...")
            fill_rates[rows] = table.add(rows)
            print(f"  produced at {fill_rates[rows]:,.0f} rows/s")
            specs = {
                (variant, backend): AppSpec(
                    app_id=f"bench-global-{rows}-{variant}-{backend}-{suffix}",
                    bootstrap=bootstrap,
                    input_topic=input_topic,
                    output_topic=output_topic,
                    partitions=1,
                    processor_class="bench.processors:Transform",
                    extra={"state_dir": str(state_dir)},
                )
                for variant in args.variants
                for backend in args.backends
            }
            cases = [Case(rows, variant, backend) for variant, backend in specs]
            if "rocksdb" in args.backends:
                cases += [Case(rows, variant, "rocksdb", restart=True) for variant in args.variants]
            for case in cases:
                results.append(measure(case, specs[case.variant, case.backend], workdir, table, args))
    print(f"medians of {args.runs} runs (bootstrap: store opened -> table read, as the runtime logs it):")
    for result in results:
        case, summary = Case(result["rows"], result["variant"], result["backend"], result["restart"]), result["median"]
        store = summary.get("store_allocated_bytes")
        print(
            f"  {case.label:<42} {summary['records']:>10,.0f} records {summary['bootstrap_seconds'] * 1000:>9,.0f} ms"
            f"  ready {summary['ready_seconds']:6.2f} s  peak RSS {summary['peak_rss'] / MB:5.0f} MB"
            + (f"  store {store / MB:6.1f} MB" if store is not None else "")
        )
    path = write_result(
        workdir,
        "global_stores",
        {
            "partitions": args.partitions,
            "new_rows": args.new_rows,
            "inactive_every": INACTIVE_EVERY,
            "fill_rates": fill_rates,
            "targets_seconds": TARGET_SECONDS,
            "cases": results,
        },
    )
    shutil.rmtree(state_dir, ignore_errors=True)
    print(f"result: {path.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
