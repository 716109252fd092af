"""Throughput before and after a change: a baseline commit's runtime against the current tree's, run after run
on the same inputs, for the stateless and the stateful app, msgpack and JSON values, at-least-once and
exactly-once.

    python -m bench.regression --baseline REV [--records 1000000] [--keys 100000] [--runs 3] [--bootstrap HOST:PORT]

With `--instructions`, each tree's runtime runs under cachegrind instead, and what is compared is the
instructions it executes per record: (count over --records - count over --small) / the difference, so
start-up cancels out. Load on the machine moves wall-clock ratios by a tenth from run to run; it does
not move instruction counts. Give it about --records 100000: a run under cachegrind is ~50x slower.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bench.app import REPO_ROOT
from bench.broker import create_topics, delete_topics, kafka
from bench.data import fill_topic
from bench.guarantees import GUARANTEES, spec
from bench.instructions import instructions
from bench.stateful import STORE
from bench.stats import median, run_directory, write_result
from bench.throughput import Measurement, describe, median_of, run_app

SERDES = ("msgpack", "json")
# A median ratio below 1 - TOLERANCE is flagged in the summary.
TOLERANCE = 0.02
INSTRUCTIONS_COMMIT_INTERVAL_MS = 10_000


@dataclass(frozen=True)
class Case:
    """One app, one value serde (input and output topics), one guarantee."""

    stateful: bool
    serde: str
    guarantee: str

    @property
    def name(self) -> str:
        return f"{'stateful' if self.stateful else 'stateless'} {self.serde} {self.guarantee}"


CASES = tuple(
    Case(stateful, serde, guarantee) for stateful in (False, True) for serde in SERDES for guarantee in GUARANTEES
)


@dataclass(frozen=True)
class Tree:
    """A source tree whose runtime is measured: the exported baseline, or the tree this benchmark runs from."""

    label: str
    path: Path
    commit: str


@dataclass(frozen=True)
class Pair:
    """One run of a case: the baseline's process, then the current tree's, back to back."""

    case: Case
    baseline: Measurement
    current: Measurement

    def ratio(self, records: int) -> float:
        return self.current.rate(records) / self.baseline.rate(records)

    def processing_ratio(self, records: int) -> float | None:
        current, baseline = self.current.inner_rate(records), self.baseline.inner_rate(records)
        return current / baseline if current and baseline else None

    def cpu_ratio(self, records: int) -> float | None:
        current, baseline = self.current.cpu_rate(records), self.baseline.cpu_rate(records)
        return current / baseline if current and baseline else None


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.regression", description=__doc__)
    parser.add_argument(
        "--baseline", required=True, type=commit, help="the git revision to compare with (exported by git archive)"
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000, help="distinct keys in the input")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    parser.add_argument("--instructions", action="store_true", help="compare instructions per record (cachegrind)")
    parser.add_argument("--small", type=int, default=2_000, help="with --instructions: the input subtracted")
    parser.add_argument(
        "--cases",
        nargs="+",
        metavar="WORD",
        help="only the cases whose name has every word given, e.g. --cases stateless msgpack at_least_once",
    )
    return parser.parse_args()


def commit(revision: str) -> str:
    """The full hash of the commit `revision` names in this repository."""
    found = git("rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    if not found:
        raise argparse.ArgumentTypeError(f"{revision!r} names no commit in {REPO_ROOT}")
    return found


def git(*args: str) -> str:
    """The output of a git command in this repository, or "" if it fails."""
    done = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


def export(commit: str, directory: Path) -> Tree:
    """`git archive` of `commit` into `directory`, with the current apps' processors, so only the engine differs."""
    with subprocess.Popen(["git", "archive", commit], cwd=REPO_ROOT, stdout=subprocess.PIPE) as archive:
        subprocess.run(["tar", "-x", "-C", str(directory)], stdin=archive.stdout, check=True)
    if archive.returncode != 0:
        raise RuntimeError(f"git archive {commit} failed ({archive.returncode})")
    (directory / "bench").mkdir(exist_ok=True)
    shutil.copy2(REPO_ROOT / "bench" / "processors.py", directory / "bench" / "processors.py")
    return Tree("baseline", directory, commit)


def run_case(
    bootstrap: str, case: Case, tree: Tree, topic: str, args: argparse.Namespace, workdir: Path, state: Path
) -> Measurement:
    """One process of `tree` on `topic` with a fresh app id and output topic; its state and changelog dropped after."""
    label = f"{tree.label}-{case.serde}-"
    app = spec(bootstrap, topic, args.partitions, case.guarantee, case.stateful, state, case.serde, label)
    measured, process = run_app(app, workdir, args.records, tree=tree.path)
    if measured.records_out < args.records:
        missing = f"{measured.records_out:,} of {args.records:,} records"
        print(f"  WARNING: {tree.label} wrote {missing} (log: {process.log_path})")
    if case.stateful:
        shutil.rmtree(state / app.app_id, ignore_errors=True)
        asyncio.run(delete_topics(bootstrap, [f"{app.app_id}-{STORE}-changelog"]))
    return measured


def instructions_per_record(
    bootstrap: str, case: Case, tree: Tree, topics: dict[int, str], args: argparse.Namespace, workdir: Path, state: Path
) -> float:
    """`tree`'s instructions per record on `case`, from a run over each of the two inputs in `topics` (by size)."""
    counted: dict[int, int] = {}
    for size, topic in topics.items():
        app = spec(bootstrap, topic, args.partitions, case.guarantee, case.stateful, state, case.serde,
                   f"{tree.label}-{case.serde}-")  # fmt: skip
        # Commits on a clock would count more often under cachegrind; a transaction must end within a minute.
        app = replace(app, extra={**app.extra, "commit_interval_ms": INSTRUCTIONS_COMMIT_INTERVAL_MS})
        counted[size] = instructions(app, workdir, tree.path)
        if case.stateful:
            shutil.rmtree(state / app.app_id, ignore_errors=True)
            asyncio.run(delete_topics(bootstrap, [f"{app.app_id}-{STORE}-changelog"]))
        asyncio.run(delete_topics(bootstrap, [app.output_topic]))
    (large, large_count), (small, small_count) = sorted(counted.items(), reverse=True)
    return (large_count - small_count) / (large - small)


def compare_instructions(
    bootstrap: str, trees: tuple[Tree, Tree], inputs: dict[str, dict[int, str]], args: argparse.Namespace,
    workdir: Path, state: Path,
) -> dict[str, dict[str, float]]:  # fmt: skip
    """Per case: each tree's instructions per record, and baseline / current (above 1: the current tree does less)."""
    summary: dict[str, dict[str, float]] = {}
    for case in chosen(args.cases):
        baseline, current = (
            instructions_per_record(bootstrap, case, tree, inputs[case.serde], args, workdir, state) for tree in trees
        )
        summary[case.name] = {"baseline": baseline, "current": current, "ratio": baseline / current}
        print(f"{case.name:34}{baseline:12,.0f}{current:12,.0f}{baseline / current:8.3f}", flush=True)
    return summary


def chosen(words: list[str] | None) -> list[Case]:
    return [case for case in CASES if not words or all(word in case.name.split() for word in words)]


def summarize(pairs: list[Pair], records: int) -> dict[str, dict[str, float]]:
    """Per case: each tree's median rates, and the median of the pairs' ratios (wall clock and processing)."""
    summary: dict[str, dict[str, float]] = {}
    for case in dict.fromkeys(pair.case for pair in pairs):
        mine = [pair for pair in pairs if pair.case == case]
        summary[case.name] = {
            "baseline_rate": median([pair.baseline.rate(records) for pair in mine]),
            "current_rate": median([pair.current.rate(records) for pair in mine]),
            "ratio": median([pair.ratio(records) for pair in mine]),
            "baseline_processing_rate": median_of(pair.baseline.inner_rate(records) for pair in mine),
            "current_processing_rate": median_of(pair.current.inner_rate(records) for pair in mine),
            "processing_ratio": median_of(pair.processing_ratio(records) for pair in mine),
            "baseline_cpu_rate": median_of(pair.baseline.cpu_rate(records) for pair in mine),
            "current_cpu_rate": median_of(pair.current.cpu_rate(records) for pair in mine),
            "cpu_ratio": median_of(pair.cpu_ratio(records) for pair in mine),
        }
    return summary


def print_summary(summary: dict[str, dict[str, float]], runs: int) -> None:
    print(
        f"median of {runs} (records/s; wall clock of each process, start-up included | processing only | "
        "per CPU second of the runtime's processes):"
    )
    columns = f"{'baseline':>10}{'current':>10}{'ratio':>7}"
    print(f"{'':34}{columns} |{columns} |{columns}")
    for name, figures in summary.items():
        ratios = (figures["ratio"], figures["processing_ratio"], figures["cpu_ratio"])
        flag = "  beyond -2%" if min(ratios) < 1 - TOLERANCE else ""
        columns_of = [
            f"{figures[f'baseline_{kind}rate']:10,.0f}{figures[f'current_{kind}rate']:10,.0f}{figures[f'{kind}ratio']:7.3f}"
            for kind in ("", "processing_", "cpu_")
        ]
        print(f"{name:34}{' |'.join(columns_of)}{flag}")


def main() -> None:
    args = parse_args()
    workdir = run_directory("regression")
    started = time.perf_counter()
    current = Tree("current", REPO_ROOT, git("describe", "--always", "--dirty"))
    inputs = {serde: f"bench-in-{serde}-{uuid.uuid4().hex[:8]}" for serde in SERDES}
    pairs: list[Pair] = []
    fill_rates: dict[str, float] = {}
    with (
        tempfile.TemporaryDirectory(prefix="bench-baseline-") as exported,
        tempfile.TemporaryDirectory(prefix="bench-state-") as state,
        kafka(args.bootstrap) as bootstrap,
    ):
        baseline = export(args.baseline, Path(exported))
        print(f"baseline {baseline.commit[:12]} against the current tree ({current.commit})")
        trees = (baseline, current)  # alternating, so that drift on the machine hits both alike
        asyncio.run(create_topics(bootstrap, dict.fromkeys(inputs.values(), args.partitions)))
        for serde, topic in inputs.items():
            print(f"filling {topic} ({args.partitions} partitions) with {args.records:,} {serde} records ...")
            fill_rates[serde] = asyncio.run(
                fill_topic(bootstrap, topic, args.records, args.partitions, args.keys, value_serde=serde)
            )
            print(f"  produced at {fill_rates[serde]:,.0f} rec/s")
        if args.instructions:
            small = {serde: f"bench-in-{serde}-{uuid.uuid4().hex[:8]}" for serde in SERDES}
            asyncio.run(create_topics(bootstrap, dict.fromkeys(small.values(), args.partitions)))
            for serde, topic in small.items():
                asyncio.run(fill_topic(bootstrap, topic, args.small, args.partitions, args.keys, value_serde=serde))
            sizes = {serde: {args.records: inputs[serde], args.small: small[serde]} for serde in SERDES}
            print(f"instructions per record under cachegrind: {'baseline':>12}{'current':>12}{'ratio':>8}")
            counts = compare_instructions(bootstrap, trees, sizes, args, workdir, Path(state))
            asyncio.run(delete_topics(bootstrap, [*inputs.values(), *small.values()]))
            path = write_result(workdir, "regression-instructions", {
                "baseline": {"commit": baseline.commit}, "current": {"tree": str(REPO_ROOT), "commit": current.commit},
                "records": args.records, "small": args.small, "keys": args.keys, "partitions": args.partitions,
                "per_record": counts,
            })  # fmt: skip
            print(f"result: {path.relative_to(REPO_ROOT)} ({(time.perf_counter() - started) / 60:.1f} min in all)")
            return
        for run in range(1, args.runs + 1):
            for case in chosen(args.cases):
                topic = inputs[case.serde]
                before, after = (run_case(bootstrap, case, tree, topic, args, workdir, Path(state)) for tree in trees)
                pair = Pair(case, before, after)
                pairs.append(pair)
                processing = pair.processing_ratio(args.records)
                ratios = f"current/baseline {pair.ratio(args.records):.3f}"
                ratios += f" (processing {processing:.3f})" if processing is not None else ""
                cpu = pair.cpu_ratio(args.records)
                ratios += f" (cpu {cpu:.3f})" if cpu is not None else ""
                print(f"run {run}/{args.runs} {case.name}:")
                print(f"  {describe('baseline', pair.baseline, args.records)}")
                print(f"  {describe('current ', pair.current, args.records)}   {ratios}")
        asyncio.run(delete_topics(bootstrap, list(inputs.values())))
    summary = summarize(pairs, args.records)
    print_summary(summary, args.runs)
    result: dict[str, Any] = {
        "baseline": {"commit": baseline.commit},
        "current": {"tree": str(REPO_ROOT), "commit": current.commit},
        "records": args.records,
        "keys": args.keys,
        "partitions": args.partitions,
        "fill_rates": fill_rates,
        "seconds": time.perf_counter() - started,
        "runs": [
            {
                "case": pair.case.name,
                "baseline": asdict(pair.baseline),
                "current": asdict(pair.current),
                "ratio": pair.ratio(args.records),
                "processing_ratio": pair.processing_ratio(args.records),
                "cpu_ratio": pair.cpu_ratio(args.records),
            }
            for pair in pairs
        ],
        "median": summary,
    }
    path = write_result(workdir, "regression", result)
    print(f"result: {path.relative_to(REPO_ROOT)} ({result['seconds'] / 60:.1f} min in all)")


if __name__ == "__main__":
    main()
