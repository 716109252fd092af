"""Scaling: records/s, CPU per record, peak RSS and state on disk as keys, partitions and value size grow.

    python -m bench.scaling [--records 1000000] [--keys 10000,1000000,10000000] [--partitions 6,24,96]
        [--kinds stateless,stateful] [--guarantees at_least_once,exactly_once] [--values 100,1000]
        [--runs 3] [--memory-mb M] [--only PATTERN ...] [--no-bare] [--profile] [--bootstrap HOST:PORT]

A cell is kind:keys:partitions:guarantee:value (`stateless`: the `Transform` app, `stateful`: `CountPerKey`
with its RocksDB store and changelog, both as bench.guarantees builds them; one worker). Each input topic,
one per (keys, partitions, value bytes), is filled once with max(--records, keys) records, so that with more
keys than records every key is still in the input (and the store) once, and is read by every cell and run
on it; the bare aiokafka loop (bench.throughput's `run_bare`) runs on each input too, unless --no-bare.
Each round runs every cell once, in an order that turns from round to round, so that drift weighs on all
cells alike; the table gives medians over --runs rounds: records/s over the processing span (`assigned`
to `caught up`), µs of CPU per record (the whole process, start-up included), the peak RSS of the process
tree and the disk its state directory takes after it exited (each run a fresh one, deleted after), and the
medians of the within-round ratios: the rate against the first --keys', stateful/stateless and runtime/bare
on the same input. With --profile, each runtime cell runs once more under cProfile, after the rounds and out
of the medians, and its hotspots are printed. Full size is 72 runtime cells and 18 bare ones per round over
inputs of up to 10,000,000 1 KB records (about 40 GB of topics on the broker at once, and about 1 GB of memory
to fill an input of 10,000,000 keys): pick cells with --only.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import shutil
import tempfile
import uuid
from dataclasses import asdict, dataclass, replace
from fnmatch import fnmatchcase
from pathlib import Path

from bench.app import REPO_ROOT, DiskUsage, children_cpu_seconds, disk_usage
from bench.broker import create_topics, delete_topics, kafka
from bench.data import fill_topic
from bench.guarantees import GUARANTEES, spec
from bench.stateful import MB, STORE, report_profile
from bench.stats import run_directory, write_result
from bench.throughput import Measurement, median_of, run_app, run_bare

KINDS = ("bare", "stateless", "stateful")


@dataclass(frozen=True)
class Cell:
    kind: str
    keys: int
    partitions: int
    guarantee: str  # "-" for the bare loop
    value_bytes: int

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.keys}:{self.partitions}:{self.guarantee}:{self.value_bytes}"

    @property
    def input(self) -> tuple[int, int, int]:
        return self.keys, self.partitions, self.value_bytes

    def order(self) -> tuple[int, int, int, str, int]:
        return self.value_bytes, self.partitions, KINDS.index(self.kind), self.guarantee, self.keys


@dataclass(frozen=True)
class Figures:
    """One run of one cell: the process measured, and what it left (the bare loop's RSS and state are not)."""

    records: int
    run: Measurement
    peak_rss: int | None
    state: DiskUsage | None

    @property
    def rate(self) -> float | None:
        return self.run.inner_rate(self.records)

    @property
    def cpu_us(self) -> float | None:
        return self.run.cpu_seconds / self.records * 1e6 if self.run.cpu_seconds else None


def ints(text: str) -> list[int]:
    return [int(item) for item in text.split(",")]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000, help="per cell; max(records, keys) are used")
    parser.add_argument("--keys", type=ints, default=[10_000, 1_000_000, 10_000_000])
    parser.add_argument("--partitions", type=ints, default=[6, 24, 96])
    parser.add_argument("--kinds", type=lambda text: text.split(","), default=list(KINDS[1:]))
    parser.add_argument("--guarantees", type=lambda text: text.split(","), default=list(GUARANTEES))
    parser.add_argument("--values", type=ints, default=[100, 1000], help="value sizes in bytes (msgpack)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--memory-mb", type=int, help="`rocksdb: {memory_mb: M}` in the stateful apps' YAML")
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="KIND:KEYS:PARTITIONS:GUARANTEE:VALUE",
        help="run only the cells matching one of these patterns (`*` matches anything), e.g. 'stateful:*:6:*:100'",
    )
    parser.add_argument("--no-bare", action="store_true", help="do not run the bare aiokafka loop")
    parser.add_argument("--profile", action="store_true", help="one more run per cell under cProfile: hotspots")
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    args = parser.parse_args()
    if not set(args.kinds) <= set(KINDS[1:]) or not set(args.guarantees) <= set(GUARANTEES):
        parser.error(f"--kinds are of {KINDS[1:]}, --guarantees of {GUARANTEES}")
    return args


def run_cell(
    cell: Cell, topic: str, bootstrap: str, args: argparse.Namespace, workdir: Path, state_root: Path, profile: bool
) -> Figures:
    """One run of `cell` on its input `topic`; with `profile`, under cProfile, its hotspots printed."""
    records = max(args.records, cell.keys)
    if cell.kind == "bare":
        cpu_before = children_cpu_seconds()
        bare = run_bare(bootstrap, topic, cell.partitions, records)
        return Figures(records, replace(bare, cpu_seconds=children_cpu_seconds() - cpu_before), None, None)
    stateful = cell.kind == "stateful"
    state_dir = Path(tempfile.mkdtemp(dir=state_root))
    app = spec(bootstrap, topic, cell.partitions, cell.guarantee, stateful, state_dir, label="scaling-")
    if stateful and args.memory_mb is not None:
        app = replace(app, extra={**app.extra, "rocksdb": {"memory_mb": args.memory_mb}})
    measured, process = run_app(app, workdir, records, sample_rss=True, profile=profile)
    report_profile(process)
    usage = disk_usage(state_dir)
    shutil.rmtree(state_dir)
    if stateful:
        asyncio.run(delete_topics(bootstrap, [f"{app.app_id}-{STORE}-changelog"]))
    if measured.records_out < records:
        print(f"  WARNING: {app.app_id} wrote {measured.records_out:,} of {records:,} records")
    return Figures(records, measured, process.peak_rss, usage)


def describe(figures: Figures) -> str:
    rss = f", peak RSS {figures.peak_rss / MB:.0f} MB" if figures.peak_rss else ""
    state = f", state {figures.state.allocated_bytes / MB:.1f} MB" if figures.state else ""
    return f"{text(figures.rate, ',.0f')} rec/s, {text(figures.cpu_us, '.2f')} µs CPU/record{rss}{state}"


def text(value: float | None, spec: str) -> str:
    return "" if value is None or math.isnan(value) else format(value, spec)


def ratio(runs: dict[str, list[Figures]], cell: Cell, other: Cell) -> float | None:
    """The median over the rounds of the cell's rate over the other's in the same round."""
    if other.name not in runs:
        return None
    pairs = zip(runs[cell.name], runs[other.name], strict=True)
    return median_of(a.rate / b.rate if a.rate and b.rate else None for a, b in pairs)


def table(runs: dict[str, list[Figures]], cells: list[Cell], base_keys: int) -> tuple[str, dict[str, dict[str, float]]]:
    """The markdown table of medians and ratios, and the same figures by cell name."""
    head = ["kind", "keys", "partitions", "guarantee", "value B", "records", "records/s", "µs CPU/record"]
    head += ["peak RSS MB", "state MB", f"/ {base_keys:,} keys", "stateful/stateless", "runtime/bare"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 3 + "---|" + "---:|" * (len(head) - 4)]
    medians: dict[str, dict[str, float]] = {}
    for cell in sorted(cells, key=Cell.order):
        figures = runs[cell.name]
        bare = Cell("bare", cell.keys, cell.partitions, "-", cell.value_bytes)
        stateless = replace(cell, kind="stateless")
        row = medians[cell.name] = {
            "records": figures[0].records,
            "rate": median_of(f.rate for f in figures),
            "cpu_us_per_record": median_of(f.cpu_us for f in figures),
            "peak_rss_mb": median_of(f.peak_rss / MB if f.peak_rss else None for f in figures),
            "state_mb": median_of(f.state.allocated_bytes / MB if f.state else None for f in figures),
        }
        ratios = {
            "vs_base_keys": ratio(runs, cell, replace(cell, keys=base_keys)),
            "stateful_vs_stateless": ratio(runs, cell, stateless) if cell.kind == "stateful" else None,
            "runtime_vs_bare": ratio(runs, cell, bare) if cell.kind != "bare" else None,
        }
        row.update({name: value for name, value in ratios.items() if value is not None})
        numbers = [text(row["rate"], ",.0f"), text(row["cpu_us_per_record"], ".2f"), text(row["peak_rss_mb"], ".0f")]
        numbers += [text(row["state_mb"], ".1f"), *(text(value, ".2f") for value in ratios.values())]
        labels = [cell.kind, f"{cell.keys:,}", str(cell.partitions), cell.guarantee, str(cell.value_bytes)]
        lines.append("| " + " | ".join([*labels, f"{figures[0].records:,}", *numbers]) + " |")
    return "\n".join(lines), medians


def main() -> None:
    args = parse_args()
    dimensions = [(v, p, k, kind, g) for v in args.values for p in args.partitions for k in args.keys
                  for kind in args.kinds for g in args.guarantees]  # fmt: skip
    cells = [Cell(kind, k, p, g, v) for v, p, k, kind, g in dimensions]
    if args.only:
        cells = [cell for cell in cells if any(fnmatchcase(cell.name, pattern) for pattern in args.only)]
    inputs = sorted({cell.input for cell in cells})
    if not args.no_bare:
        cells += [Cell("bare", keys, partitions, "-", value) for keys, partitions, value in inputs]
    workdir = run_directory("scaling")
    runs: dict[str, list[Figures]] = {cell.name: [] for cell in cells}
    profiled: dict[str, Figures] = {}
    with kafka(args.bootstrap) as bootstrap, tempfile.TemporaryDirectory(prefix="bench-scaling-state-") as temp:
        state = Path(temp)
        topics: dict[tuple[int, int, int], str] = {}
        for keys, partitions, value in inputs:
            topic = topics[keys, partitions, value] = f"bench-scaling-in-{uuid.uuid4().hex[:8]}"
            records = max(args.records, keys)
            asyncio.run(create_topics(bootstrap, {topic: partitions}))
            print(f"filling {topic}: {partitions} partitions, {records:,} records, {keys:,} keys, {value} B ...")
            fill_rate = asyncio.run(fill_topic(bootstrap, topic, records, partitions, keys, value_bytes=value))
            print(f"  produced at {fill_rate:,.0f} rec/s", flush=True)
        for number in range(1, args.runs + 1):
            turn = len(cells) * (number - 1) // args.runs
            for cell in cells[turn:] + cells[:turn]:
                figures = run_cell(cell, topics[cell.input], bootstrap, args, workdir, state, profile=False)
                runs[cell.name].append(figures)
                print(f"run {number}/{args.runs} {cell.name}: {describe(figures)}", flush=True)
        for cell in [cell for cell in cells if cell.kind != "bare"] if args.profile else []:
            print(f"profiled {cell.name}:")
            profiled[cell.name] = run_cell(cell, topics[cell.input], bootstrap, args, workdir, state, profile=True)
        asyncio.run(delete_topics(bootstrap, list(topics.values())))
    markdown, medians = table(runs, cells, args.keys[0])
    result = {
        "arguments": vars(args),
        "runs": {name: [asdict(figures) for figures in cell_runs] for name, cell_runs in runs.items()},
        "profiled": {name: asdict(figures) for name, figures in profiled.items()},
        "median": medians,
        "table": markdown,
    }
    path = write_result(workdir, "scaling", result)
    print(f"medians of {args.runs} run(s), µs of CPU per record with start-up; ratios: medians of the rounds' ones\n")
    print(markdown)
    print(f"\nresult: {path.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
