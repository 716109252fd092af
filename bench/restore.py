"""Restore: how fast a task rebuilds a RocksDB store of `--keys` keys from its changelog after losing its state dir.

`python -m bench.restore [--keys 1000000] [--runs 5] [--partitions 6] [--bootstrap HOST:PORT]`
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

import msgpack
from aiokafka import AIOKafkaProducer

from bench.app import REPO_ROOT, AppSpec, DiskUsage, RuntimeProcess, disk_usage
from bench.broker import create_topics, kafka, topic_size
from bench.data import BatchProducer, fill_topic, make_key, make_value
from bench.stateful import MB, STORE, count_store
from bench.stats import hotspots, median, run_directory, write_result
from bench.throughput import fresh_output, run_app, timeout_for
from stores.partitioner import partition_for

TARGET_RATE = 200_000
RESTORING = re.compile(r"restoring store (\S+) partition (\d+) from its changelog: offsets (\d+)\.\.(\d+)")
RESTORED = re.compile(r"restored store (\S+) partition (\d+): (\d+) records in ([0-9.]+)s")


@dataclass(frozen=True)
class PartitionRestore:
    """One changelog partition, as the runtime logged its restore."""

    partition: int
    first_offset: int
    end_offset: int
    records: int
    seconds: float  # as the runtime measured it (monotonic clock, not rounded to the log's milliseconds)


@dataclass(frozen=True)
class RestoreRun:
    wall_seconds: float
    startup_seconds: float  # process start -> first "restoring" line
    span_seconds: float  # first "restoring" line -> last "restored" line
    restored: int
    changelog_records: int  # the changelog's size when the run started: what a full restore reads
    partitions: list[PartitionRestore]
    state: DiskUsage
    peak_rss: int

    @property
    def rate(self) -> float:
        return self.restored / self.span_seconds if self.span_seconds > 0 else 0.0

    @property
    def wall_rate(self) -> float:
        return self.restored / self.wall_seconds


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.restore", description=__doc__)
    parser.add_argument("--keys", type=int, default=1_000_000, help="keys in the store, records in the changelog")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    parser.add_argument("--backend", default="rocksdb", choices=["rocksdb", "memory"], help="the store's backend")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="run the restores under cProfile (slower: compare only profiled runs); writes <app_id>.prof",
    )
    parser.add_argument(
        "--new-records",
        type=int,
        default=0,
        help="input records produced into each partition before a run, for runtimes whose "
        "--until-caught-up exits before the restores end (see the README)",
    )
    return parser.parse_args()


def changelog_topic(spec: AppSpec) -> str:
    return f"{spec.app_id}-{STORE}-changelog"


def build_changelog(spec: AppSpec, workdir: Path, keys: int) -> int:
    """Run the counting app once over the input (one record per key): its changelog gets one record per key."""
    print(f"building the changelog: {spec.app_id} counts {keys:,} records of distinct keys ...")
    measured, _ = run_app(spec, workdir, keys)
    changelog = asyncio.run(topic_size(spec.bootstrap, changelog_topic(spec)))
    print(f"  {measured.wall_seconds:.1f} s ({measured.rate(keys):,.0f} rec/s); changelog {changelog:,} records")
    return changelog


async def add_input(bootstrap: str, topic: str, partitions: int, keys: int, per_partition: int) -> None:
    """Produce `per_partition` records of keys already counted into each partition of the input."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        out = BatchProducer(producer, topic, partitions)
        packer = msgpack.Packer()
        wanted = dict.fromkeys(range(partitions), per_partition)
        for index in range(keys):
            key = make_key(index, keys).encode()
            partition = partition_for(key, partitions)
            if wanted.get(partition, 0) > 0:
                wanted[partition] -= 1
                await out.append(key, packer.pack(make_value(index, keys)), partition)
            if not any(wanted.values()):
                break
        await out.flush()
    finally:
        await producer.stop()


def parse_restores(process: RuntimeProcess) -> tuple[list[PartitionRestore], datetime | None, datetime | None]:
    """Per-partition restores of the store, with the time of the first start and of the last end."""
    starts: dict[int, tuple[int, int]] = {}
    partitions: list[PartitionRestore] = []
    first: datetime | None = None
    last: datetime | None = None
    for when, line in process.timed_lines():
        if (started := RESTORING.search(line)) and started.group(1) == STORE:
            starts[int(started.group(2))] = (int(started.group(3)), int(started.group(4)))
            first = first or when
        elif (ended := RESTORED.search(line)) and ended.group(1) == STORE:
            partition = int(ended.group(2))
            low, high = starts.get(partition, (-1, -1))
            partitions.append(PartitionRestore(partition, low, high, int(ended.group(3)), float(ended.group(4))))
            last = when
    return sorted(partitions, key=lambda p: p.partition), first, last


def restart_without_state(
    spec: AppSpec, workdir: Path, state_dir: Path, expected: int, profile: bool
) -> tuple[RuntimeProcess, datetime]:
    """Delete the app's state and run it with --until-caught-up: it restores, then exits. Also when it started."""
    shutil.rmtree(state_dir / spec.app_id, ignore_errors=True)
    started_at = datetime.now()
    process = RuntimeProcess(spec.write(workdir), "--until-caught-up", profile=profile)
    code = process.wait_sampling_rss(timeout_for(expected))
    if code != 0:
        raise RuntimeError(f"the runtime exited with {code}; log {process.log_path}:\n{process.log_tail()}")
    if process.profile_path is not None:
        print(f"profile {process.profile_path.relative_to(REPO_ROOT)}, by own time:\n{hotspots(process.profile_path)}")
    return process, started_at


def run_restore(spec: AppSpec, workdir: Path, state_dir: Path, expected: int, profile: bool) -> RestoreRun:
    process, started_at = restart_without_state(spec, workdir, state_dir, expected, profile)
    partitions, first, last = parse_restores(process)
    restored = sum(p.records for p in partitions)
    if first is None or last is None or restored < expected:
        print(f"  WARNING: restored {restored:,} of {expected:,} changelog records; log {process.log_path}")
    span = (last - first).total_seconds() if first and last else 0.0
    startup = (first - started_at).total_seconds() if first else 0.0
    usage = disk_usage(state_dir / spec.app_id)
    return RestoreRun(process.wall_seconds, startup, span, restored, expected, partitions, usage, process.peak_rss)


def describe(run: RestoreRun) -> str:
    slowest = max((p.seconds for p in run.partitions), default=0.0)
    return (
        f"{run.restored:,} records in {run.span_seconds:.2f} s = {run.rate:,.0f} rec/s "
        f"(slowest partition {slowest:.2f} s); wall {run.wall_seconds:.2f} s = {run.wall_rate:,.0f} rec/s "
        f"(start-up to first restore {run.startup_seconds:.2f} s, "
        f"last restore to exit {run.wall_seconds - run.startup_seconds - run.span_seconds:.2f} s); "
        f"store {run.state.allocated_bytes / MB:.1f} MB on disk, peak RSS {run.peak_rss / MB:.0f} MB"
    )


def main() -> None:
    args = parse_args()
    workdir = run_directory("restore")
    state_dir = workdir / "state"
    suffix = uuid.uuid4().hex[:8]
    input_topic = f"bench-restore-in-{suffix}"
    runs: list[RestoreRun] = []
    with kafka(args.bootstrap) as bootstrap:
        asyncio.run(create_topics(bootstrap, {input_topic: args.partitions}))
        print(f"filling {input_topic} ({args.partitions} partitions) with {args.keys:,} records of distinct keys ...")
        fill_rate = asyncio.run(fill_topic(bootstrap, input_topic, args.keys, args.partitions, args.keys))
        print(f"  produced at {fill_rate:,.0f} rec/s")
        spec = AppSpec(
            app_id=f"bench-restore-{suffix}",
            bootstrap=bootstrap,
            input_topic=input_topic,
            output_topic=asyncio.run(fresh_output(bootstrap, args.partitions)),
            partitions=args.partitions,
            processor_class="bench.processors:CountPerKey",
            processor_name="count",
            stores=count_store(args.backend),
            extra={"state_dir": str(state_dir)},
        )
        changelog = build_changelog(spec, workdir, args.keys)
        for number in range(1, args.runs + 1):
            if args.new_records:
                asyncio.run(add_input(bootstrap, input_topic, args.partitions, args.keys, args.new_records))
            expected = asyncio.run(topic_size(bootstrap, changelog_topic(spec)))
            run = run_restore(spec, workdir, state_dir, expected, args.profile)
            runs.append(run)
            print(f"run {number}/{args.runs}: {describe(run)}")
    summary = {
        "rate": median([r.rate for r in runs]),
        "span_seconds": median([r.span_seconds for r in runs]),
        "wall_seconds": median([r.wall_seconds for r in runs]),
        "wall_rate": median([r.wall_rate for r in runs]),
        "startup_seconds": median([r.startup_seconds for r in runs]),
        "state_allocated_bytes": median([r.state.allocated_bytes for r in runs]),
        "state_file_bytes": median([r.state.file_bytes for r in runs]),
        "peak_rss": median([r.peak_rss for r in runs]),
    }
    verdict = "meets" if summary["rate"] >= TARGET_RATE else "misses"
    restored = median([r.restored for r in runs])
    print(
        f"median of {args.runs}: restore {summary['rate']:,.0f} rec/s ({summary['span_seconds']:.2f} s for "
        f"{restored:,.0f} records; {verdict} the {TARGET_RATE:,} rec/s target), "
        f"wall {summary['wall_seconds']:.2f} s = {summary['wall_rate']:,.0f} rec/s"
    )
    print(
        f"{'':13}store {summary['state_allocated_bytes'] / MB:.1f} MB on disk "
        f"({summary['state_file_bytes'] / MB:.1f} MB in files), peak RSS {summary['peak_rss'] / MB:.0f} MB"
    )
    path = write_result(
        workdir,
        "restore",
        {
            "keys": args.keys,
            "changelog_records": changelog,
            "partitions": args.partitions,
            "backend": args.backend,
            "fill_rate": fill_rate,
            "target_rate": TARGET_RATE,
            "runs": [{**asdict(r), "rate": r.rate, "wall_rate": r.wall_rate} for r in runs],
            "median": summary,
        },
    )
    shutil.rmtree(state_dir, ignore_errors=True)
    print(f"result: {path.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
