"""The dead-letter path at speed: every record failing under `processing: dead_letter`, against the same
records processed without the error, in the same run.

`python -m bench.dead_letter [--records 200000] [--runs 3] [--partitions 6] [--profile] [--bootstrap HOST:PORT]`

Each run times two processes on one input topic, each with a fresh consumer group: **ok**
(`bench.processors:Transform`, every record sent on) and **failing** (`bench.processors:Rejecting`, the
same work, then it raises: every record dead-lettered). The figure is the processing rate (the first
assignment to the end of the input, from the log) of failing over ok. Each failing run's dead letters are
counted, and so are its log lines and the revocations it logged (a lost group session shows as one).
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.app import REPO_ROOT, AppSpec, RuntimeProcess
from bench.broker import create_topics, delete_topics, kafka, topic_size
from bench.data import fill_topic
from bench.stats import hotspots, median, run_directory, write_result
from bench.throughput import Measurement, describe, fresh_output, timeout_for


@dataclass(frozen=True)
class Run:
    ok: Measurement
    failing: Measurement
    dead_letters: int
    failing_log_lines: int
    failing_revocations: int

    def ratio(self, records: int) -> float:
        """Failing over ok, processing rates (wall clock rates when the log gives none)."""
        failing, ok = self.failing.inner_rate(records), self.ok.inner_rate(records)
        if failing is None or ok is None:
            return self.failing.rate(records) / self.ok.rate(records)
        return failing / ok

    def cpu_ratio(self, records: int) -> float:
        """Failing over ok, records per CPU second of the whole process (start-up included): what other load
        on the machine moves least."""
        failing, ok = self.failing.cpu_rate(records), self.ok.cpu_rate(records)
        return failing / ok if failing and ok else float("nan")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.dead_letter", description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--profile", action="store_true", help="run both variants under cProfile")
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    return parser.parse_args()


def run_variant(
    bootstrap: str, input_topic: str, processor_class: str, args: argparse.Namespace, workdir: Path, profile: bool
) -> tuple[Measurement, RuntimeProcess, int]:
    """One process over the input; its measurement, the process, and how many dead letters it wrote."""
    output = asyncio.run(fresh_output(bootstrap, args.partitions))
    dead_letter_topic = f"bench-dlq-{uuid.uuid4().hex[:8]}"
    asyncio.run(create_topics(bootstrap, {dead_letter_topic: args.partitions}))
    spec = AppSpec(
        app_id=f"bench-dead-letter-{uuid.uuid4().hex[:8]}",
        bootstrap=bootstrap,
        input_topic=input_topic,
        output_topic=output,
        partitions=args.partitions,
        processor_class=processor_class,
        extra={"errors": {"processing": "dead_letter", "dead_letter_topic": dead_letter_topic}},
    )
    process = RuntimeProcess(spec.write(workdir), "--until-caught-up", profile=profile)
    code = process.wait(timeout_for(args.records))
    if code != 0:
        raise RuntimeError(f"the runtime exited with {code}; log {process.log_path}:\n{process.log_tail()}")
    outputs = asyncio.run(topic_size(bootstrap, output))
    dead_letters = asyncio.run(topic_size(bootstrap, dead_letter_topic))
    asyncio.run(delete_topics(bootstrap, [output, dead_letter_topic]))
    processing = process.logged_span("assigned ", "caught up")
    measured = Measurement(process.wall_seconds, outputs + dead_letters, processing, None, process.cpu_seconds)
    return measured, process, dead_letters


def main() -> None:
    args = parse_args()
    workdir = run_directory("dead_letter")
    input_topic = f"bench-in-{uuid.uuid4().hex[:8]}"
    runs: list[Run] = []
    with kafka(args.bootstrap) as bootstrap:
        asyncio.run(create_topics(bootstrap, {input_topic: args.partitions}))
        print(f"filling {input_topic} ({args.partitions} partitions) with {args.records:,} records ...")
        asyncio.run(fill_topic(bootstrap, input_topic, args.records, args.partitions))
        for number in range(1, args.runs + 1):
            ok, ok_process, _ = run_variant(
                bootstrap, input_topic, "bench.processors:Transform", args, workdir, args.profile
            )
            failing, process, dead_letters = run_variant(
                bootstrap, input_topic, "bench.processors:Rejecting", args, workdir, args.profile
            )
            lines = process.log().splitlines()
            run = Run(ok, failing, dead_letters, len(lines), sum(" revoked " in line for line in lines))
            runs.append(run)
            print(f"run {number}/{args.runs}: {describe('ok     ', ok, args.records)}")
            print(
                f"{'':9}{describe('failing', failing, args.records)}   failing/ok {run.ratio(args.records):.2f}, "
                f"per CPU second {run.cpu_ratio(args.records):.2f}"
            )
            print(
                f"{'':9}{dead_letters:,} dead letters, {run.failing_log_lines:,} log lines, "
                f"{run.failing_revocations} revocations"
            )
            for name, profiled in (("ok", ok_process), ("failing", process)):
                if profiled.profile_path is not None:
                    print(f"{name}, by own time:\n{hotspots(profiled.profile_path, 25)}")
        summary = {
            "ok_rate": median([run.ok.inner_rate(args.records) or run.ok.rate(args.records) for run in runs]),
            "failing_rate": median(
                [run.failing.inner_rate(args.records) or run.failing.rate(args.records) for run in runs]
            ),
            "ratio": median([run.ratio(args.records) for run in runs]),
            "cpu_ratio": median([run.cpu_ratio(args.records) for run in runs]),
            "failing_log_lines": median([run.failing_log_lines for run in runs]),
        }
        print(
            f"median of {args.runs}: ok {summary['ok_rate']:,.0f} rec/s, failing {summary['failing_rate']:,.0f} rec/s "
            f"(processing only), failing/ok {summary['ratio']:.2f} (per CPU second {summary['cpu_ratio']:.2f}), "
            f"{summary['failing_log_lines']:,.0f} log lines"
        )
    path = write_result(
        workdir,
        "dead_letter",
        {
            "records": args.records,
            "partitions": args.partitions,
            "runs": [
                {**asdict(run), "ratio": run.ratio(args.records), "cpu_ratio": run.cpu_ratio(args.records)}
                for run in runs
            ],
            "median": summary,
        },
    )
    print(f"result: {path.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
