"""Throughput: the runtime against a bare aiokafka loop doing the same job on the same input.

`python -m bench.throughput [--records 1000000] [--runs 5] [--partitions 6] [--bootstrap HOST:PORT]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.app import REPO_ROOT, AppSpec, RuntimeProcess
from bench.broker import create_topics, delete_topics, kafka, topic_size
from bench.data import fill_topic
from bench.stats import median, run_directory, write_result


@dataclass(frozen=True)
class Measurement:
    """One process run. `inner_seconds` leaves out start-up and shutdown (see the README)."""

    wall_seconds: float
    records_out: int
    inner_seconds: float | None
    logged_rate: float | None = None
    cpu_seconds: float | None = None  # the runtime's processes, start-up included

    def cpu_rate(self, records: int) -> float | None:
        """Records per CPU second: less sensitive than the wall clock to other load on the machine."""
        return records / self.cpu_seconds if self.cpu_seconds else None

    def rate(self, records: int) -> float:
        return records / self.wall_seconds

    def inner_rate(self, records: int) -> float | None:
        return records / self.inner_seconds if self.inner_seconds else None


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.throughput", description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    parser.add_argument("--workers", type=int, default=1, help="the runtime's --workers")
    parser.add_argument("--guarantee", default="at_least_once")
    return parser.parse_args()


def timeout_for(records: int) -> float:
    return max(300.0, records / 2_000)


async def fresh_output(bootstrap: str, partitions: int) -> str:
    topic = f"bench-out-{uuid.uuid4().hex[:8]}"
    await create_topics(bootstrap, {topic: partitions})
    return topic


async def finish_output(bootstrap: str, topic: str) -> int:
    count = await topic_size(bootstrap, topic)
    await delete_topics(bootstrap, [topic])
    return count


def run_bare(bootstrap: str, input_topic: str, partitions: int, records: int) -> Measurement:
    output = asyncio.run(fresh_output(bootstrap, partitions))
    command = [sys.executable, "-m", "bench.bare_loop", "--bootstrap", bootstrap, "--input", input_topic]
    command += ["--output", output, "--group", f"bench-bare-{uuid.uuid4().hex[:8]}"]
    started = time.perf_counter()
    done = subprocess.run(
        command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout_for(records), check=False
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"the bare loop failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    inner = json.loads(done.stdout.strip().splitlines()[-1])
    return Measurement(wall, asyncio.run(finish_output(bootstrap, output)), inner["loop_seconds"] or None)


def run_app(
    spec: AppSpec,
    workdir: Path,
    records: int,
    workers: int = 1,
    sample_rss: bool = False,
    profile: bool = False,
    tree: Path = REPO_ROOT,
) -> tuple[Measurement, RuntimeProcess]:
    """Run `spec` with `--until-caught-up` over an input of `records` records; count and delete its output topic."""
    args = ("--until-caught-up", "--workers", str(workers))
    process = RuntimeProcess(spec.write(workdir), *args, profile=profile, tree=tree)
    wait = process.wait_sampling_rss if sample_rss else process.wait
    code = wait(timeout_for(records))
    if code != 0:
        raise RuntimeError(f"the runtime exited with {code}; log {process.log_path}:\n{process.log_tail()}")
    count = asyncio.run(finish_output(spec.bootstrap, spec.output_topic))
    processing = process.logged_span("assigned ", "caught up")
    return Measurement(process.wall_seconds, count, processing, process.logged_rate(), process.cpu_seconds), process


def run_runtime(bootstrap: str, input_topic: str, args: argparse.Namespace, workdir: Path) -> tuple[Measurement, Path]:
    output = asyncio.run(fresh_output(bootstrap, args.partitions))
    spec = AppSpec(
        app_id=f"bench-throughput-{uuid.uuid4().hex[:8]}",
        bootstrap=bootstrap,
        input_topic=input_topic,
        output_topic=output,
        partitions=args.partitions,
        processor_class="bench.processors:Transform",
        guarantee=args.guarantee,
    )
    measured, process = run_app(spec, workdir, args.records, args.workers)
    return measured, process.log_path


def describe(name: str, measured: Measurement, records: int) -> str:
    inner_rate = measured.inner_rate(records)
    inner = f" (processing {measured.inner_seconds:.2f} s = {inner_rate:,.0f} rec/s)" if inner_rate else ""
    if measured.logged_rate is not None:
        inner += f", logged {measured.logged_rate:,.0f} rec/s"
    if measured.cpu_seconds:
        inner += f", cpu {measured.cpu_seconds:.2f} s"
    dupes = f", {measured.records_out - records:+,} records out" if measured.records_out != records else ""
    return f"{name} {measured.wall_seconds:6.2f} s = {measured.rate(records):8,.0f} rec/s{inner}{dupes}"


def median_of(values: Iterable[float | None]) -> float:
    return median([value for value in values if value is not None])


def main() -> None:
    args = parse_args()
    workdir = run_directory("throughput")
    input_topic = f"bench-in-{uuid.uuid4().hex[:8]}"
    bare_runs: list[Measurement] = []
    runtime_runs: list[Measurement] = []
    with kafka(args.bootstrap) as bootstrap:
        asyncio.run(create_topics(bootstrap, {input_topic: args.partitions}))
        print(f"filling {input_topic} ({args.partitions} partitions) with {args.records:,} records ...")
        fill_rate = asyncio.run(fill_topic(bootstrap, input_topic, args.records, args.partitions))
        print(f"  produced at {fill_rate:,.0f} rec/s")
        for run in range(1, args.runs + 1):
            bare = run_bare(bootstrap, input_topic, args.partitions, args.records)
            runtime, log_path = run_runtime(bootstrap, input_topic, args, workdir)
            bare_runs.append(bare)
            runtime_runs.append(runtime)
            ratio = runtime.rate(args.records) / bare.rate(args.records)
            print(f"run {run}/{args.runs}: {describe('bare', bare, args.records)}")
            print(f"{'':9}{describe('runtime', runtime, args.records)}   runtime/bare {ratio:.2f}")
            if runtime.records_out < args.records or bare.records_out < args.records:
                print(f"  WARNING: records missing from an output topic (runtime log: {log_path})")
        ratios = [r.rate(args.records) / b.rate(args.records) for b, r in zip(bare_runs, runtime_runs, strict=True)]
        summary = {
            "bare_rate": median([m.rate(args.records) for m in bare_runs]),
            "runtime_rate": median([m.rate(args.records) for m in runtime_runs]),
            "ratio": median(ratios),
            "bare_processing_rate": median_of(m.inner_rate(args.records) for m in bare_runs),
            "runtime_processing_rate": median_of(m.inner_rate(args.records) for m in runtime_runs),
        }
        print(
            f"median of {args.runs}: bare {summary['bare_rate']:,.0f} rec/s, "
            f"runtime {summary['runtime_rate']:,.0f} rec/s, runtime/bare {summary['ratio']:.2f} "
            "(wall clock of each process, start-up included)"
        )
        print(
            f"{'':13}processing only: bare {summary['bare_processing_rate']:,.0f} rec/s, "
            f"runtime {summary['runtime_processing_rate']:,.0f} rec/s"
        )
    path = write_result(
        workdir,
        "throughput",
        {
            "records": args.records,
            "partitions": args.partitions,
            "workers": args.workers,
            "guarantee": args.guarantee,
            "fill_rate": fill_rate,
            "runs": [
                {"bare": asdict(b), "runtime": asdict(r), "ratio": q}
                for b, r, q in zip(bare_runs, runtime_runs, ratios, strict=True)
            ],
            "median": summary,
        },
    )
    print(f"result: {path.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
