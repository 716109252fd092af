"""Window and session stores on RocksDB, in process and without a broker: does the store's size level
off over a long run of advancing stream time, and what does an update cost?

`python -m bench.window_store [--records 3000000] [--keys 10000] [--window-ms 60000] [--grace-ms 60000]
[--ms-per-record 1] [--commit-every 20000] [--runs 3]`

The workload is a tumbling count: record i has key `i mod keys` and time `i * ms-per-record`; each
record advances the store's stream time, then `get`s and `put`s its key's window. Every
`commit-every` records the changes are taken (the changelog records of a commit) and flushed, as a
commit does. Retention is window + grace.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.app import disk_usage
from bench.stats import median, run_directory, write_result
from stores import BufferedKeyValueStore, RocksDBBackend, SessionView, WindowView
from stores.serdes import RawSerde, StrSerde

MB = 1024 * 1024


@dataclass(frozen=True)
class Sample:
    """The store after `records` records: its entries (a window is two), its files, the changelog so far."""

    records: int
    entries: int
    disk_bytes: int
    changelog_records: int


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.window_store", description=__doc__)
    parser.add_argument("--records", type=int, default=3_000_000, help="records of the long run")
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--window-ms", type=int, default=60_000)
    parser.add_argument("--grace-ms", type=int, default=60_000)
    parser.add_argument("--ms-per-record", type=int, default=1, help="how far each record moves stream time")
    parser.add_argument("--commit-every", type=int, default=20_000, help="records between commits")
    parser.add_argument("--samples", type=int, default=15, help="size samples over the long run")
    parser.add_argument("--ops", type=int, default=300_000, help="updates timed per run for the cost per update")
    parser.add_argument("--runs", type=int, default=3, help="runs of the cost per update (the median is reported)")
    return parser.parse_args()


def raw_store(path: Path) -> BufferedKeyValueStore:
    return BufferedKeyValueStore(RocksDBBackend(path), RawSerde(), RawSerde(), name="bench", changelog=True)


def names(keys: int) -> list[str]:
    return [f"user-{n:06d}" for n in range(keys)]


def long_run(args: argparse.Namespace, directory: Path) -> list[Sample]:
    """The tumbling count over `--records` records, sampling the store's size as stream time moves on."""
    raw = raw_store(directory / "long-run")
    windows = WindowView(raw, args.window_ms + args.grace_ms, StrSerde())
    keys, size, step = names(args.keys), args.window_ms, args.ms_per_record
    sample_every = max(args.records // args.samples, args.commit_every)
    samples, changelog_records = [], 0
    try:
        for record in range(args.records):
            timestamp = record * step
            key = keys[record % args.keys]
            windows.advance(timestamp)
            start = timestamp - timestamp % size
            windows.put(key, start, windows.get(key, start, 0) + 1)
            if (record + 1) % args.commit_every == 0:
                changelog_records += len(raw.take_changes())
                raw.flush(changelog_records)
            if (record + 1) % sample_every == 0:
                entries = sum(1 for _ in raw.range()) - 1  # less the stream time
                samples.append(
                    Sample(record + 1, entries, disk_usage(directory / "long-run").file_bytes, changelog_records)
                )
                print(f"  {record + 1:>10,} records, stream time {timestamp / 60_000:7.1f} min: "
                      f"{entries:>8,} entries, {samples[-1].disk_bytes / MB:7.2f} MB on disk, "
                      f"{changelog_records:>10,} changelog records")  # fmt: skip
    finally:
        raw.close()
    return samples


def per_update(args: argparse.Namespace, directory: Path, run: int) -> dict[str, float]:
    """µs per update: the window store's get+put (alone, and with advance and commits), a session
    store's find+put, and a key-value store's get+put of the same keys for comparison."""
    keys, ops, size = names(args.keys), args.ops, args.window_ms
    retention = size + args.grace_ms
    figures: dict[str, float] = {}

    def timed(name: str, store: BufferedKeyValueStore, update: Callable[[int], Any]) -> None:
        started = time.perf_counter()
        for op in range(ops):
            update(op)
            if (op + 1) % args.commit_every == 0:
                store.take_changes()
                store.flush(op)
        figures[name] = (time.perf_counter() - started) / ops * 1e6
        store.close()

    # Stream time stays inside the first window: every update after the first of a key finds its window.
    raw = raw_store(directory / f"windows-{run}")
    windows = WindowView(raw, retention, StrSerde())
    windows.advance(0)
    timed(
        "window get+put",
        raw,
        lambda op: windows.put(keys[op % args.keys], 0, windows.get(keys[op % args.keys], 0, 0) + 1),
    )

    raw = raw_store(directory / f"advancing-{run}")
    advancing = WindowView(raw, retention, StrSerde())

    def advance_get_put(op: int) -> None:
        timestamp, key = op * args.ms_per_record, keys[op % args.keys]
        advancing.advance(timestamp)
        start = timestamp - timestamp % size
        advancing.put(key, start, advancing.get(key, start, 0) + 1)

    timed("window advance+get+put", raw, advance_get_put)

    raw = raw_store(directory / f"sessions-{run}")
    sessions = SessionView(raw, retention, StrSerde())

    def find_put(op: int) -> None:
        timestamp, key = op * args.ms_per_record, keys[op % args.keys]
        sessions.advance(timestamp)
        start, count = timestamp, 1
        for found_start, found_end, found_count in list(sessions.find(key, timestamp - size, timestamp)):
            sessions.delete(key, found_start, found_end)
            start, count = min(start, found_start), count + found_count
        sessions.put(key, start, timestamp, count)

    timed("session advance+find+put", raw, find_put)

    plain = BufferedKeyValueStore(
        RocksDBBackend(directory / f"key-value-{run}"), StrSerde(), name="bench", changelog=True
    )
    timed(
        "key-value get+put", plain, lambda op: plain.put(keys[op % args.keys], plain.get(keys[op % args.keys], 0) + 1)
    )
    return figures


def spread(values: list[float] | list[int]) -> str:
    return f"{min(values):,.1f} to {max(values):,.1f}"


def main() -> None:
    args = parse_args()
    results = run_directory("window_store")
    work = Path(tempfile.mkdtemp(prefix="window-store-bench-"))
    try:
        retention_min = (args.window_ms + args.grace_ms) / 60_000
        print(f"long run: {args.records:,} records over {args.keys:,} keys, {args.ms_per_record} ms apart; "
              f"windows of {args.window_ms / 60_000:g} min kept {retention_min:g} min; "
              f"a commit every {args.commit_every:,} records")  # fmt: skip
        samples = long_run(args, work)
        first, second = samples[: len(samples) // 2], samples[len(samples) // 2 :]
        print(f"entries: first half of the run {spread([s.entries for s in first])}, "
              f"second half {spread([s.entries for s in second])}")  # fmt: skip
        print(f"MB on disk: first half of the run {spread([s.disk_bytes / MB for s in first])}, "
              f"second half {spread([s.disk_bytes / MB for s in second])}")  # fmt: skip
        runs = []
        for run in range(args.runs):
            runs.append(per_update(args, work, run))
            print(f"run {run + 1}: " + ", ".join(f"{name} {us:.2f} µs" for name, us in runs[-1].items()))
        medians = {name: median([figures[name] for figures in runs]) for name in runs[0]}
        best = {name: min(figures[name] for figures in runs) for name in runs[0]}
        print("µs per update, median (best) of the runs: "
              + ", ".join(f"{name} {medians[name]:.2f} ({best[name]:.2f})" for name in medians))  # fmt: skip
        for figures, which in ((medians, "medians"), (best, "best")):
            ratio = figures["window get+put"] / figures["key-value get+put"]
            print(f"window get+put against key-value get+put ({which}): {ratio:.2f}x")
        path = write_result(
            results,
            "window_store",
            {"arguments": vars(args), "samples": [asdict(sample) for sample in samples], "runs": runs,
             "median_us_per_update": medians, "best_us_per_update": best},
        )  # fmt: skip
        print(f"result: {path}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
