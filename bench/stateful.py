"""Stateful throughput: a count-per-key app with a RocksDB store and changelog against the stateless Transform.

`python -m bench.stateful [--records 1000000] [--keys 100000] [--runs 5] [--partitions 6] [--bootstrap HOST:PORT]`
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.app import REPO_ROOT, AppSpec, DiskUsage, RuntimeProcess, disk_usage
from bench.broker import create_topics, delete_topics, kafka, topic_size
from bench.data import fill_topic
from bench.stats import hotspots, median, run_directory, write_result
from bench.throughput import Measurement, describe, fresh_output, median_of, run_app

MB = 1024 * 1024
STORE = "counts"


@dataclass(frozen=True)
class StatefulMeasurement:
    """The stateful run, plus what it left: its store files and changelog, and its peak memory."""

    run: Measurement
    changelog_records: int
    state: DiskUsage
    peak_rss: int


@dataclass(frozen=True)
class Run:
    stateless: Measurement
    stateless_peak_rss: int
    stateful: StatefulMeasurement

    def ratio(self, records: int) -> float:
        return self.stateful.run.rate(records) / self.stateless.rate(records)

    def processing_ratio(self, records: int) -> float | None:
        stateful, stateless = self.stateful.run.inner_rate(records), self.stateless.inner_rate(records)
        return stateful / stateless if stateful and stateless else None


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.stateful", description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000, help="distinct keys in the input")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    parser.add_argument("--backend", default="rocksdb", choices=["rocksdb", "memory"], help="the store's backend")
    parser.add_argument("--workers", type=int, default=1, help="the runtime's --workers")
    parser.add_argument("--guarantee", default="at_least_once")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="run the runtime under cProfile (slower: compare only profiled runs); writes <app_id>.prof",
    )
    return parser.parse_args()


def count_store(backend: str) -> dict[str, Any]:
    """The `stores:` entry of the counting app: default (msgpack) serdes, with a changelog."""
    return {STORE: {"backend": backend, "changelog": True}}


def run_stateless(bootstrap: str, input_topic: str, args: argparse.Namespace, workdir: Path) -> tuple[Measurement, int]:
    spec = AppSpec(
        app_id=f"bench-stateless-{uuid.uuid4().hex[:8]}",
        bootstrap=bootstrap,
        input_topic=input_topic,
        output_topic=asyncio.run(fresh_output(bootstrap, args.partitions)),
        partitions=args.partitions,
        processor_class="bench.processors:Transform",
        guarantee=args.guarantee,
    )
    measured, process = run_app(spec, workdir, args.records, args.workers, sample_rss=True, profile=args.profile)
    report_profile(process)
    return measured, process.peak_rss


def run_stateful(bootstrap: str, input_topic: str, args: argparse.Namespace, workdir: Path) -> StatefulMeasurement:
    state_dir = workdir / "state"
    spec = AppSpec(
        app_id=f"bench-stateful-{uuid.uuid4().hex[:8]}",
        bootstrap=bootstrap,
        input_topic=input_topic,
        output_topic=asyncio.run(fresh_output(bootstrap, args.partitions)),
        partitions=args.partitions,
        processor_class="bench.processors:CountPerKey",
        guarantee=args.guarantee,
        processor_name="count",
        stores=count_store(args.backend),
        extra={"state_dir": str(state_dir)},
    )
    measured, process = run_app(spec, workdir, args.records, args.workers, sample_rss=True, profile=args.profile)
    report_profile(process)
    app_state = state_dir / spec.app_id
    usage = disk_usage(app_state)
    shutil.rmtree(app_state, ignore_errors=True)
    changelog = f"{spec.app_id}-{STORE}-changelog"
    changelog_records = asyncio.run(topic_size(bootstrap, changelog))
    asyncio.run(delete_topics(bootstrap, [changelog]))
    return StatefulMeasurement(measured, changelog_records, usage, process.peak_rss)


def report_profile(process: RuntimeProcess) -> None:
    if process.profile_path is not None:
        print(f"profile {process.profile_path.relative_to(REPO_ROOT)}, by own time:\n{hotspots(process.profile_path)}")


def describe_state(measured: StatefulMeasurement, records: int) -> str:
    state = measured.state
    changelog = f", changelog {measured.changelog_records:,} records" if measured.changelog_records != records else ""
    return (
        f"state dir {state.allocated_bytes / MB:.1f} MB on disk ({state.file_bytes / MB:.1f} MB in "
        f"{state.files} files), peak RSS {measured.peak_rss / MB:.0f} MB{changelog}"
    )


def main() -> None:
    args = parse_args()
    workdir = run_directory("stateful")
    input_topic = f"bench-in-{uuid.uuid4().hex[:8]}"
    runs: list[Run] = []
    records = args.records
    with kafka(args.bootstrap) as bootstrap:
        asyncio.run(create_topics(bootstrap, {input_topic: args.partitions}))
        print(f"filling {input_topic} ({args.partitions} partitions) with {records:,} records, {args.keys:,} keys ...")
        fill_rate = asyncio.run(fill_topic(bootstrap, input_topic, records, args.partitions, args.keys))
        print(f"  produced at {fill_rate:,.0f} rec/s")
        for number in range(1, args.runs + 1):
            stateless, stateless_rss = run_stateless(bootstrap, input_topic, args, workdir)
            stateful = run_stateful(bootstrap, input_topic, args, workdir)
            run = Run(stateless, stateless_rss, stateful)
            runs.append(run)
            processing_ratio = run.processing_ratio(records)
            ratios = f"stateful/stateless {run.ratio(records):.2f}"
            if processing_ratio is not None:
                ratios += f" (processing {processing_ratio:.2f})"
            print(f"run {number}/{args.runs}: {describe('stateless', stateless, records)}")
            print(f"{'':9}{describe('stateful ', stateful.run, records)}   {ratios}")
            print(f"{'':9}{describe_state(stateful, records)} (stateless: {stateless_rss / MB:.0f} MB)")
            if stateful.run.records_out < records or stateless.records_out < records:
                print("  WARNING: records missing from an output topic (logs in the result directory)")
        summary = {
            "stateless_rate": median([r.stateless.rate(records) for r in runs]),
            "stateful_rate": median([r.stateful.run.rate(records) for r in runs]),
            "ratio": median([r.ratio(records) for r in runs]),
            "stateless_processing_rate": median_of(r.stateless.inner_rate(records) for r in runs),
            "stateful_processing_rate": median_of(r.stateful.run.inner_rate(records) for r in runs),
            "processing_ratio": median_of(r.processing_ratio(records) for r in runs),
            "state_allocated_bytes": median([r.stateful.state.allocated_bytes for r in runs]),
            "state_file_bytes": median([r.stateful.state.file_bytes for r in runs]),
            "stateful_peak_rss": median([r.stateful.peak_rss for r in runs]),
            "stateless_peak_rss": median([r.stateless_peak_rss for r in runs]),
        }
        print(
            f"median of {args.runs}: stateless {summary['stateless_rate']:,.0f} rec/s, "
            f"stateful {summary['stateful_rate']:,.0f} rec/s, stateful/stateless {summary['ratio']:.2f} "
            "(wall clock of each process, start-up included)"
        )
        print(
            f"{'':13}processing only: stateless {summary['stateless_processing_rate']:,.0f} rec/s, "
            f"stateful {summary['stateful_processing_rate']:,.0f} rec/s, "
            f"stateful/stateless {summary['processing_ratio']:.2f}"
        )
        print(
            f"{'':13}state dir {summary['state_allocated_bytes'] / MB:.1f} MB on disk "
            f"({summary['state_file_bytes'] / MB:.1f} MB in files) for {args.keys:,} keys, "
            f"peak RSS stateful {summary['stateful_peak_rss'] / MB:.0f} MB, "
            f"stateless {summary['stateless_peak_rss'] / MB:.0f} MB"
        )
        asyncio.run(delete_topics(bootstrap, [input_topic]))
    path = write_result(
        workdir,
        "stateful",
        {
            "records": records,
            "keys": args.keys,
            "partitions": args.partitions,
            "backend": args.backend,
            "workers": args.workers,
            "guarantee": args.guarantee,
            "fill_rate": fill_rate,
            "runs": [
                {**asdict(r), "ratio": r.ratio(records), "processing_ratio": r.processing_ratio(records)} for r in runs
            ],
            "median": summary,
        },
    )
    print(f"result: {path.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
