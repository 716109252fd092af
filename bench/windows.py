"""Windowed aggregations: the built-in `processors.windows:Aggregate` counting per key in 1-minute windows
(RocksDB store with a changelog, final results), against the count-per-key app in the same run.

`python -m bench.windows [--records 1000000] [--keys 100000] [--runs 3] [--partitions 6]
[--cases count tumbling count-eos tumbling-eos sliding session] [--bootstrap HOST:PORT]`
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from bench import guarantees
from bench.app import REPO_ROOT, AppSpec
from bench.broker import create_topics, delete_topics, kafka
from bench.data import fill_topic
from bench.peers.inputs import WINDOW_MS, Input
from bench.stateful import STORE
from bench.stats import median, run_directory, write_result
from bench.throughput import Measurement, median_of, run_app

WINDOW_STORE = "window"  # the Aggregate processor's name, which names its store
# Every third round of keys is followed by a pause of this long: the keys' sessions, 60 s of gap, close.
SESSION_PAUSE_MS = 60_000

# The windows of each Aggregate case: 1 minute, grace 0, a count per key, one final result per window.
WINDOWS: dict[str, dict[str, Any]] = {
    "tumbling": {"type": "tumbling", "size_ms": WINDOW_MS},
    "sliding": {"type": "sliding", "time_difference_ms": WINDOW_MS},
    "session": {"type": "session", "gap_ms": WINDOW_MS},
}


def window_count(window: dict[str, Any]) -> dict[str, Any]:
    """The Aggregate processor's params for a count per record key in `window`, final results."""
    return {"window": window, "aggregation": {"type": "count"}, "emit": "final"}


@dataclass(frozen=True)
class Case:
    """One runtime process per run: the count-per-key baseline or an Aggregate app, under a guarantee."""

    name: str
    window: str | None  # a key of WINDOWS; None: the count-per-key app
    guarantee: str = "at_least_once"

    def spec(self, bootstrap: str, topic: str, partitions: int, state_dir: Path) -> AppSpec:
        """The count-per-key app, or the Aggregate processor in its place, with a fresh app id and output."""
        label = f"windows-{self.name}-"
        count = guarantees.spec(bootstrap, topic, partitions, self.guarantee, True, state_dir, label=label)
        if self.window is None:
            return count
        return replace(count, processor_class="processors.windows:Aggregate", processor_name=WINDOW_STORE,
                       params=window_count(WINDOWS[self.window]), stores={})  # fmt: skip

    @property
    def store(self) -> str:
        return STORE if self.window is None else WINDOW_STORE

    @property
    def baseline(self) -> str:
        """The case whose rate this one's is compared with: the count per key under the same guarantee."""
        return "count" if self.guarantee == "at_least_once" else "count-eos"


CASES = (
    Case("count", None),
    Case("tumbling", "tumbling"),
    Case("count-eos", None, "exactly_once"),
    Case("tumbling-eos", "tumbling", "exactly_once"),
    Case("sliding", "sliding"),
    Case("session", "session"),
)


@dataclass(frozen=True)
class Inputs:
    """The input topics: `main`, whose timestamps close a 1-minute window every 2 x keys records, and
    `sessions`, the same records with a pause after every third round of keys (each key's sessions are
    3 records 30 s apart, and close at the pause)."""

    source: Input
    main: str
    sessions: str

    def topic(self, case: Case) -> str:
        return self.sessions if case.window == "session" else self.main

    def expected_outputs(self, case: Case) -> int | None:
        """One per input record for the baseline, one per closed window for tumbling; None: not computed."""
        if case.window is None:
            return self.source.records
        return len(self.source.closed_windows) if case.window == "tumbling" else None


def session_timestamp(source: Input) -> Callable[[int], int]:
    def timestamp(index: int) -> int:
        return source.timestamp(index) + index // source.keys // 3 * SESSION_PAUSE_MS

    return timestamp


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.windows", description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000, help="distinct keys; each window holds every key twice")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--cases", nargs="+", choices=[case.name for case in CASES], default=[c.name for c in CASES])
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    return parser.parse_args()


@dataclass
class CaseRuns:
    case: Case
    runs: list[Measurement] = field(default_factory=list)


def run_case(case: Case, inputs: Inputs, bootstrap: str, partitions: int, workdir: Path) -> Measurement:
    """One process of `case` with a fresh app id; its state directory and changelog are deleted after."""
    state_dir = workdir / "state"
    spec = case.spec(bootstrap, inputs.topic(case), partitions, state_dir)
    measured, _ = run_app(spec, workdir, inputs.source.records)
    shutil.rmtree(state_dir / spec.app_id, ignore_errors=True)
    asyncio.run(delete_topics(bootstrap, [f"{spec.app_id}-{case.store}-changelog"]))
    return measured


def describe(case: Case, inputs: Inputs, measured: Measurement) -> str:
    """The run's rates, its outputs, and a warning when they are fewer than expected (under exactly-once the
    end offsets also count the commit markers)."""
    records, expected = inputs.source.records, inputs.expected_outputs(case)
    processing = measured.inner_rate(records)
    line = (f"{case.name:<13}{measured.wall_seconds:6.2f} s = {measured.rate(records):8,.0f} rec/s"
            f"{f' (processing {processing:,.0f} rec/s)' if processing else ''}, cpu {measured.cpu_seconds or 0:.2f} s, "
            f"{measured.records_out:,} outputs")  # fmt: skip
    if expected is not None and measured.records_out < expected:
        line += f"   WARNING: {expected:,} expected"
    return line


def summary(results: dict[str, CaseRuns], records: int) -> dict[str, dict[str, float]]:
    """Per case: medians of the rates (wall clock, processing span, CPU) and of the ratios to its baseline."""
    medians = {}
    for name, done in results.items():
        figures = {
            "rate": median([m.rate(records) for m in done.runs]),
            "processing_rate": median_of(m.inner_rate(records) for m in done.runs),
            "cpu_rate": median_of(m.cpu_rate(records) for m in done.runs),
            "outputs": median([m.records_out for m in done.runs]),
        }
        baseline = results.get(done.case.baseline)
        if baseline is not None and baseline is not done:
            pairs = list(zip(done.runs, baseline.runs, strict=True))
            figures["ratio"] = median([m.rate(records) / b.rate(records) for m, b in pairs])
            figures["cpu_ratio"] = median_of(quotient(m.cpu_rate(records), b.cpu_rate(records)) for m, b in pairs)
        medians[name] = figures
    return medians


def quotient(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator is not None and denominator else None


def print_summary(medians: dict[str, dict[str, float]], runs: int) -> None:
    print(f"median of {runs} run(s), records/s: wall clock of the process (start-up included) | processing span "
          "| per CPU second; ratios to the count-per-key app under the same guarantee (wall | CPU)")  # fmt: skip
    for name, figures in medians.items():
        ratio = f"   x{figures['ratio']:.2f} | x{figures['cpu_ratio']:.2f}" if "ratio" in figures else ""
        print(f"  {name:<13}{figures['rate']:>10,.0f} | {figures['processing_rate']:>10,.0f} | "
              f"{figures['cpu_rate']:>10,.0f}   {figures['outputs']:>11,.0f} outputs{ratio}")  # fmt: skip


def main() -> None:
    args = parse_args()
    workdir = run_directory("windows")
    cases = [case for case in CASES if case.name in args.cases]
    results = {case.name: CaseRuns(case) for case in cases}
    with kafka(args.bootstrap) as bootstrap:
        source = Input.now(args.records, args.keys, args.partitions)
        inputs = Inputs(source, f"bench-in-{uuid.uuid4().hex[:8]}", f"bench-sessions-{uuid.uuid4().hex[:8]}")
        timestamps = {inputs.main: source.timestamp, inputs.sessions: session_timestamp(source)}
        topics = sorted({inputs.topic(case) for case in cases})
        for topic in topics:
            asyncio.run(create_topics(bootstrap, {topic: args.partitions}))
            print(f"filling {topic} ({args.partitions} partitions): {args.records:,} records over {args.keys:,} keys")
            rate = asyncio.run(
                fill_topic(bootstrap, topic, args.records, args.partitions, args.keys, timestamp=timestamps[topic])
            )
            print(f"  produced at {rate:,.0f} rec/s")
        for number in range(1, args.runs + 1):
            for case in cases:
                measured = run_case(case, inputs, bootstrap, args.partitions, workdir)
                results[case.name].runs.append(measured)
                label = f"run {number}/{args.runs}:" if case is cases[0] else ""
                print(f"{label:<10}{describe(case, inputs, measured)}")
        medians = summary(results, args.records)
        print_summary(medians, args.runs)
        asyncio.run(delete_topics(bootstrap, topics))
    path = write_result(
        workdir,
        "windows",
        {"arguments": vars(args), "windows": WINDOWS,
         "runs": {name: [asdict(m) for m in done.runs] for name, done in results.items()}, "median": medians},
    )  # fmt: skip
    print(f"result: {path.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
