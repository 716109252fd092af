"""Snapshot restore: time to a ready task for a store of `--keys` keys, changelog replay vs snapshot ingest + tail.

`python -m bench.snapshot_restore [--keys 1000000] [--tail 10000] [--runs 3] [--partitions 6] [--bootstrap HOST:PORT]`
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import uuid
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path

from bench.app import REPO_ROOT, AppSpec, RuntimeProcess
from bench.broker import create_topics, kafka, topic_size
from bench.data import fill_topic
from bench.restore import RESTORED, RESTORING, add_input, build_changelog, changelog_topic, restart_without_state
from bench.stateful import MB, STORE, count_store
from bench.stats import median, run_directory, write_result
from bench.throughput import fresh_output, run_app
from stores.rocksdb import RocksDBBackend
from stores.snapshot import Manifest, snapshot_manifest, write_manifest, write_partition

TARGET_RATIO = 10.0
INGESTING = re.compile(r"ingesting snapshot \S+ into store (\S+) partition (\d+)")
INGESTED = re.compile(r"ingested snapshot into store (\S+) partition (\d+): (\d+) rows in ([0-9.]+)s")
UP_TO_DATE = re.compile(r"store (\S+) partition (\d+) is up to date")


@dataclass(frozen=True)
class ReadyRun:
    """One restart with no state left, until every task of the store was ready."""

    wall_seconds: float
    startup_seconds: float  # process start -> the first restore step
    ready_seconds: float  # the first restore step -> the last partition ready
    ingested_rows: int
    ingest_seconds: float  # summed over the partitions (they ingest concurrently)
    replayed: int
    peak_rss: int


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.snapshot_restore", description=__doc__)
    parser.add_argument("--keys", type=int, default=1_000_000, help="keys in the store")
    parser.add_argument("--tail", type=int, default=10_000, help="changelog records written after the snapshot")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    return parser.parse_args()


def snapshot_stores(spec: AppSpec, state_dir: Path, out: Path) -> Manifest:
    """A snapshot of the app's stores as they are on disk: what Spark's job makes of the changelog, faster."""
    written, offsets = [], {}
    for partition in range(spec.partitions):
        backend = RocksDBBackend(state_dir / spec.app_id / STORE / str(partition))
        try:
            written.append(write_partition(out, partition, backend.items()))
            offsets[partition] = backend.changelog_offset() or 0
        finally:
            backend.close()
    manifest = snapshot_manifest(
        written, app=spec.app_id, store=STORE, partitions=spec.partitions, key_serde="msgpack",
        value_serde="msgpack", changelog_topic=changelog_topic(spec), changelog_offsets=offsets,
    )  # fmt: skip
    write_manifest(out, manifest)
    return manifest


def add_tail(spec: AppSpec, workdir: Path, keys: int, tail: int) -> None:
    """Updates of existing keys after the snapshot: the app counts them, each one a changelog record."""
    per_partition = max(1, tail // spec.partitions)
    asyncio.run(add_input(spec.bootstrap, spec.input_topic, spec.partitions, keys, per_partition))
    run_app(spec, workdir, per_partition * spec.partitions)


def parse_ready(process: RuntimeProcess, started_at: datetime) -> ReadyRun:
    first: datetime | None = None
    last: datetime | None = None
    rows = replayed = 0
    ingest_seconds = 0.0
    for when, line in process.timed_lines():
        begun = INGESTING.search(line) or RESTORING.search(line)
        if begun is not None and begun.group(1) == STORE:
            first = first or when
        ended = INGESTED.search(line) or RESTORED.search(line) or UP_TO_DATE.search(line)
        if ended is None or ended.group(1) != STORE:
            continue
        last = when
        if ended.re is INGESTED:
            rows += int(ended.group(3))
            ingest_seconds += float(ended.group(4))
        elif ended.re is RESTORED:
            replayed += int(ended.group(3))
    if first is None or last is None:
        raise RuntimeError(f"no restore of store {STORE} in {process.log_path}")
    return ReadyRun(
        process.wall_seconds, (first - started_at).total_seconds(), (last - first).total_seconds(), rows,
        ingest_seconds, replayed, process.peak_rss,
    )  # fmt: skip


def describe(run: ReadyRun) -> str:
    return (
        f"ready {run.ready_seconds:.2f} s after the first restore step ({run.ingested_rows:,} rows ingested, "
        f"{run.replayed:,} changelog records replayed); wall {run.wall_seconds:.2f} s "
        f"(start-up {run.startup_seconds:.2f} s), peak RSS {run.peak_rss / MB:.0f} MB"
    )


def main() -> None:
    args = parse_args()
    workdir = run_directory("snapshot-restore")
    state_dir = workdir / "state"
    snapshots = workdir / "snapshots"
    suffix = uuid.uuid4().hex[:8]
    input_topic = f"bench-snapshot-in-{suffix}"
    runs: dict[str, list[ReadyRun]] = {"changelog": [], "snapshot": []}
    with kafka(args.bootstrap) as bootstrap:
        asyncio.run(create_topics(bootstrap, {input_topic: args.partitions}))
        print(f"filling {input_topic} ({args.partitions} partitions) with {args.keys:,} records of distinct keys ...")
        asyncio.run(fill_topic(bootstrap, input_topic, args.keys, args.partitions, args.keys))
        full = AppSpec(
            app_id=f"bench-snapshot-{suffix}",
            bootstrap=bootstrap,
            input_topic=input_topic,
            output_topic=asyncio.run(fresh_output(bootstrap, args.partitions)),
            partitions=args.partitions,
            processor_class="bench.processors:CountPerKey",
            processor_name="count",
            stores=count_store("rocksdb"),
            extra={"state_dir": str(state_dir)},
        )
        from_snapshot = replace(full, extra={**full.extra, "snapshots": {"location": str(snapshots)}})
        build_changelog(full, workdir, args.keys)
        manifest = snapshot_stores(full, state_dir, snapshots / STORE / "bench")
        print(f"snapshot of {sum(manifest.row_counts.values()):,} rows at offsets {manifest.changelog_offsets}")
        add_tail(full, workdir, args.keys, args.tail)
        changelog = asyncio.run(topic_size(bootstrap, changelog_topic(full)))
        tail = changelog - sum(manifest.changelog_offsets.values())
        print(f"changelog {changelog:,} records, {tail:,} of them after the snapshot")
        for number in range(1, args.runs + 1):
            for mode, spec in (("changelog", full), ("snapshot", from_snapshot)):
                # Both write the same YAML file name (the app id): the log of each run is overwritten.
                process, started_at = restart_without_state(spec, workdir, state_dir, changelog, False)
                run = parse_ready(process, started_at)
                runs[mode].append(run)
                print(f"run {number}/{args.runs} {mode:>9}: {describe(run)}")
    ready = {mode: median([r.ready_seconds for r in measured]) for mode, measured in runs.items()}
    wall = {mode: median([r.wall_seconds for r in measured]) for mode, measured in runs.items()}
    ratio = ready["changelog"] / ready["snapshot"] if ready["snapshot"] else float("inf")
    wall_ratio = wall["changelog"] / wall["snapshot"]
    verdict = "meets" if ratio >= TARGET_RATIO else "misses"
    print(
        f"median of {args.runs}, {args.keys:,} keys: ready after changelog replay {ready['changelog']:.2f} s, "
        f"after snapshot ingest + {tail:,} tail records {ready['snapshot']:.2f} s: {ratio:.1f}x faster "
        f"({verdict} the {TARGET_RATIO:.0f}x target); wall {wall['changelog']:.2f} s vs {wall['snapshot']:.2f} s "
        f"({wall_ratio:.1f}x)"
    )
    path = write_result(
        workdir,
        "snapshot_restore",
        {
            "keys": args.keys,
            "partitions": args.partitions,
            "changelog_records": changelog,
            "tail_records": tail,
            "snapshot_rows": sum(manifest.row_counts.values()),
            "target_ratio": TARGET_RATIO,
            "runs": {mode: [asdict(r) for r in measured] for mode, measured in runs.items()},
            "median": {"ready_seconds": ready, "wall_seconds": wall, "ratio": ratio, "wall_ratio": wall_ratio},
        },
    )
    shutil.rmtree(state_dir, ignore_errors=True)
    shutil.rmtree(snapshots, ignore_errors=True)
    print(f"result: {path.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
